import builtins
import json

import pytest
import torch

from backbone import Backbone, preset
from bench import perf
from bench.common.cli import run
from bench.perf import format_table, main, measure
from bench.speed import timing
from objectives import Vocab, build_objective

SMALL = dict(model="tiny", seq_len=16, batch_size=4, repeats=1, new_tokens=4, vocab_size=64)


def own_flops(spec: str) -> float:
    """The analytic FLOPs of one step of 4 windows of 16 tokens, from the objective's expected count: with BERT's
    exact rule every window has the same supervised positions, so it must equal what the benchmark counted on its
    own corrupted batch."""
    vocab = Vocab.for_tokenizer(64)
    with torch.device("meta"):
        objective = build_objective(spec, Backbone(preset("tiny", vocab.size, max_seq_len=16)), vocab)
    return 4 * objective.expected_flops_per_sequence(16)


def test_perf_runs_on_the_tiny_preset_and_counts_with_the_objectives():
    pytest.importorskip("transformers")
    rows, note = measure(**SMALL)
    assert note is None
    by_name = {row["name"]: row for row in rows}
    for spec in ("mlm", "ar", "electra", "span"):
        row = by_name[spec]
        assert row["flops_per_step"] == own_flops(spec)
        assert row["ours_tokens_per_s"] > 0 and row["peer_tokens_per_s"] > 0 and 0 < row["mfu"]
        assert row["ratio"] == pytest.approx(row["ours_tokens_per_s"] / row["peer_tokens_per_s"])
    assert any(name.startswith("masking") for name in by_name)
    pipeline = next(row for name, row in by_name.items() if "processes" in name)
    assert "one of 4 processes" in pipeline["name"] and pipeline["ratio"] > 0  # batch 4: a row per process
    assert sum(name.startswith("generation") for name in by_name) == 2
    assert any(name.startswith("RoPE") for name in by_name)
    assert "ours tokens/s" in format_table(rows)


def test_the_rope_rows_peer_is_the_pairwise_form_it_replaced():
    # the same rotation, so the row times two ways of computing one thing: bit for bit in fp32
    from backbone.model import apply_rope, rope_tables
    from bench.perf import pairwise_rope
    cos, sin = rope_tables(8, 16)
    x = torch.randn(2, 3, 16, 8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(pairwise_rope(x, cos[:, 0::2], sin[:, 1::2]), apply_rope(x, cos, sin))
    for dtype, name in ((None, "float32"), (torch.bfloat16, "bfloat16")):  # timed in the activations' dtype
        row = perf.rope_rates("tiny", Vocab.for_tokenizer(64), 4, 16, dtype, repeats=1)
        assert name in row["name"] and row["ours_tokens_per_s"] > 0 and row["peer_tokens_per_s"] > 0


@pytest.mark.slow
def test_perf_without_transformers_prints_its_own_figures(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_transformers(name, *args, **kwargs):
        if name.startswith("transformers"):
            raise ImportError("no transformers here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    main(["--model", "tiny", "--seq-len", "16", "--batch-size", "4", "--repeats", "1", "--new-tokens", "4",
          "--vocab-size", "64", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert [row["flops_per_step"] for row in rows[:4]] == [own_flops(s) for s in ("mlm", "ar", "electra", "span")]
    assert all("peer_tokens_per_s" not in row for row in rows[:4])
    main(["--model", "tiny", "--seq-len", "16", "--batch-size", "4", "--repeats", "1", "--new-tokens", "4",
          "--vocab-size", "64"])
    assert "need transformers" in capsys.readouterr().out


def test_perf_on_cuda_without_a_gpu_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        run(main, ["--accelerator", "cuda", "--model", "tiny"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == "error: --accelerator cuda: no CUDA device is visible to PyTorch here"


def test_perf_times_the_device_work_not_the_launches(monkeypatch):
    # a GPU runs asynchronously: every timed call must be fenced by a synchronisation on both sides
    events = []
    monkeypatch.setattr(timing, "synchronize", lambda device: events.append("sync"))
    timing.median_seconds(lambda: events.append("step"), repeats=2, warmup=1, device=torch.device("cuda"))
    assert events == ["step", "sync", "step", "sync", "sync", "step", "sync"]


def test_the_matmul_peak_stops_growing_once_a_product_is_long(monkeypatch):
    # an emulated dtype (bf16 on a CPU without bf16 units) is measured at a size that takes a fraction of a second
    sides, real = [], torch.randn
    monkeypatch.setattr(torch, "randn", lambda *shape, **kwargs: sides.append(shape[0]) or real(*shape, **kwargs))
    monkeypatch.setattr(timing, "median_seconds", lambda step, repeats, warmup=1, device=None: 0.5)
    assert timing.matmul_peak(torch.float32, long_seconds=0.2) == 2 * 256 ** 3 / 0.5 and set(sides) == {256}
    sides.clear()
    monkeypatch.setattr(timing, "median_seconds", lambda step, repeats, warmup=1, device=None: 0.01)
    assert timing.matmul_peak(torch.float32, size=1024) == 2 * 1024 ** 3 / 0.01
    assert sorted(set(sides)) == [256, 512, 1024]


@pytest.mark.slow
def test_perf_times_the_default_comparisons_step_alone_and_at_once():
    # tiny shapes: this checks that the rows are made and hold sane keys; their speeds are bench.perf's to print
    from bench.speed.throughput import comparison_rows
    rows = comparison_rows(steps=3, model="tiny", seq_len=16, batch_size=4,
                           data="synthetic:train=64,heldout=16,words=64,lexicon=8", rounds=3)
    names = [row["name"] for row in rows]
    assert [name.split(": ")[1] for name in names][1:] == ["one run, 1 thread",
                                                           "two runs at once, 2 processes of 1 thread"]
    assert [row["runs"] for row in rows] == [1, 1, 2]
    for row in rows:
        assert row["tokens"] == row["runs"] * 3 * 4 * 16 and row["seconds"] > 0 and row["ours_tokens_per_s"] > 0
        assert row["flops_per_step"] == rows[0]["flops_per_step"] and row["ours_flops_per_s"] > 0
        assert len(row["seconds_each_round"]) == 3 and sorted(row["seconds_each_round"])[1] == row["seconds"]
