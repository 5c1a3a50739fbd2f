import pytest
import torch
import torch.nn.functional as F

from backbone import fused_loss
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
    hidden, weight = torch.randn(4, 3), torch.randn(5, 3)
    with torch.no_grad():
        loss, _ = linear_cross_entropy(hidden, weight, torch.tensor([0, 1, 2, 3]))
    assert loss.item() == pytest.approx(F.cross_entropy(hidden @ weight.T, torch.tensor([0, 1, 2, 3])).item(),
                                        rel=1e-6)
