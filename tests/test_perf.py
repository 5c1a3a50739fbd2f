import builtins
import json

import pytest
import torch

from backbone import Backbone, preset
from bench.perf import format_table, main, measure
from objectives import Vocab, build_objective

SMALL = dict(model="tiny", seq_len=16, batch_size=4, repeats=1, new_tokens=4, vocab_size=64)


def own_flops(spec: str) -> int:
    """The objective's own FLOP count for the batch the benchmark times (same seeds)."""
    vocab = Vocab(64 + 100, num_sentinels=100, first_ordinary=5)
    tokens = torch.randint(vocab.first_ordinary, vocab.end_ordinary, (4, 16), generator=torch.Generator().manual_seed(0))
    objective = build_objective(spec, Backbone(preset("tiny", vocab.size, max_seq_len=16)), vocab)
    return objective.flops(objective.corrupt(tokens, torch.Generator().manual_seed(0)))


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
    assert sum(name.startswith("generation") for name in by_name) == 2
    assert "ours tokens/s" in format_table(rows)


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
