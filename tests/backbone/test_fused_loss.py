import pytest
import torch
import torch.nn.functional as F

from backbone import fused_loss, measure_flops
from backbone.fused_loss import linear_cross_entropy


@pytest.mark.parametrize("chunk", [3, 1024])
def test_fused_loss_and_gradients_equal_the_plain_path(chunk, monkeypatch):
    monkeypatch.setattr(fused_loss, "CHUNK_ROWS", chunk)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(10, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(13, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(13, (10,), generator=generator)
    loss, correct = linear_cross_entropy(hidden, weight, targets)
    (3 * loss).backward()
    fused = (loss.detach(), hidden.grad.clone(), weight.grad.clone())
    hidden.grad, weight.grad = None, None
    logits = hidden @ weight.T
    plain = F.cross_entropy(logits, targets)
    (3 * plain).backward()
    torch.testing.assert_close(fused[0], plain.detach())
    torch.testing.assert_close(fused[1], hidden.grad)
    torch.testing.assert_close(fused[2], weight.grad)
    assert correct.item() == (logits.argmax(-1) == targets).sum().item()


def test_no_gradient_work_without_grad():
    hidden, weight = torch.randn(4, 3, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    with torch.no_grad():
        # evaluation: only the projection runs (2·rows·d·V), not the two gradient products
        assert measure_flops(lambda: linear_cross_entropy(hidden, weight, torch.tensor([0, 1, 2, 3]))) == 2 * 4 * 3 * 5
        loss, _ = linear_cross_entropy(hidden, weight, torch.tensor([0, 1, 2, 3]))
    assert loss.item() == pytest.approx(F.cross_entropy(hidden @ weight.T, torch.tensor([0, 1, 2, 3])).item(),
                                        rel=1e-6)


def test_fp16_gradients_survive_tiny_softmax_values():
    # 4,000 rows over a 3,000-id vocabulary: (softmax − one-hot) / rows underflows fp16 unless kept wider
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(4000, 8, generator=generator).requires_grad_()
    weight = (torch.randn(3000, 8, generator=generator) * 0.01).requires_grad_()
    targets = torch.randint(100, (4000,), generator=generator)  # ids >= 100 get only the softmax part
    with torch.autocast("cpu", dtype=torch.float16):
        loss, _ = linear_cross_entropy(hidden, weight, targets)
    loss.backward()
    reference = weight.detach().clone().requires_grad_()
    F.cross_entropy(hidden.detach() @ reference.T, targets).backward()
    relative_error = (weight.grad[100:] - reference.grad[100:]).norm() / reference.grad[100:].norm()
    assert relative_error < 0.01


def test_the_autocast_queries_it_calls_exist_in_the_torch_floor():
    # pyproject's torch floor is where these device-generic queries appeared (2.4); older torch fails here, not with
    # an AttributeError in the middle of a bf16 run
    import re
    from pathlib import Path
    floor = re.search(r'"torch>=(\d+)\.(\d+)"', (Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert tuple(map(int, floor.groups())) >= (2, 4)
    assert not torch.is_autocast_enabled("cpu") and fused_loss._compute_dtype(torch.ones(1)) == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert fused_loss._compute_dtype(torch.ones(1)) == torch.bfloat16
        with torch.autocast("cpu", enabled=False):
            assert not torch.is_autocast_enabled("cpu")


def test_chunks_stay_cache_sized_on_a_cpu_and_grow_on_a_gpu():
    assert fused_loss.chunk_rows(torch.device("cpu"), 30622) == fused_loss.CHUNK_ROWS
    rows = fused_loss.chunk_rows(torch.device("cuda"), 30622)  # BERT's vocabulary with the sentinels
    assert rows * 30622 * 4 <= fused_loss.GPU_CHUNK_BYTES < (rows + 1) * 30622 * 4 and rows > fused_loss.CHUNK_ROWS
    assert fused_loss.chunk_rows(torch.device("cuda"), 10 ** 6) == fused_loss.CHUNK_ROWS  # never below the CPU's
