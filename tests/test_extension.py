"""A fifth objective, written in this one file, runs through every bench tool with no change to bench/: the
objective answers what the bench asks (its parts, floors, probe attention, ceiling), the bench never asks who it is."""

import json

import pytest
import torch

import objectives
from bench.compare import main as compare_main
from bench.positions import main as positions_main
from objectives import IGNORE, Corrupted, Objective, Output
from objectives.base import lm_flops, lm_forward


class HalfPrefixLM(Objective):
    """Read the first half of a window bidirectionally, predict the second half left to right (a prefix LM)."""

    name = "half"
    attention = "prefix"

    def corrupt(self, tokens: torch.Tensor, generator: torch.Generator) -> Corrupted:
        prefix = tokens.shape[1] // 2
        targets = torch.full_like(tokens, IGNORE)
        targets[:, prefix - 1:-1] = tokens[:, prefix:]
        return Corrupted(tokens, targets, "prefix", tokens, prefix_len=prefix)

    def expected_supervised_positions(self, seq_len: int) -> float:
        return float(seq_len - seq_len // 2)

    def describe(self, seq_len: int) -> dict:
        return {"parts": f"{seq_len // 2} read, {seq_len - seq_len // 2} predicted"}

    def forward(self, batch: Corrupted) -> Output:
        return lm_forward(self.backbone, batch)

    def flops(self, batch: Corrupted) -> int:
        return lm_flops(self.backbone, batch)

    def expected_flops_per_sequence(self, seq_len: int) -> float:
        return float(self.backbone.flops(1, seq_len, self.expected_supervised_positions(seq_len)).training_step)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(objectives.REGISTRY, "half", HalfPrefixLM)


def test_positions_table_shows_the_new_objective(registered, capsys):
    positions_main(["--objectives", "ar,half", "--seq-len", "32", "--model", "tiny", "--vocab-size", "64", "--json"])
    rows = {row["objective"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["half"]["supervised_positions"] == 16 and rows["half"]["measured_positions"] == 16
    assert rows["half"]["parts"] == "16 read, 16 predicted" and rows["half"]["attention"] == "prefix"


def test_compare_reports_and_probes_the_new_objective(registered, tmp_path):
    out = tmp_path / "cmp"
    compare_main(["--model", "tiny", "--seq-len", "32", "--batch-size", "4", "--budget", "2e8", "--eval-points", "2",
                  "--data", "synthetic:train=64,heldout=16,words=64,states=4", "--quiet", "--objectives", "mlm,half",
                  "--out", str(out)])
    results = json.loads((out / "results.json").read_text())
    half = next(o for o in results["objectives"] if o["objective"] == "half")
    assert half["compute"]["supervised_per_sequence"] == 16
    assert half["floors"] == {} and results["bayes"]["floors"]["half"] == {}
    assert half["probes"]["sees"] == "smoothing" and 0 <= half["probes"]["hidden_state"]["mean"] <= 1
    report = (out / "report.md").read_text()
    assert "| half " in report and "16 read, 16 predicted" in report
