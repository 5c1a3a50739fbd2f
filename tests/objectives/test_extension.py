"""A fifth objective, written in this one file, runs through every bench tool with no change to bench/ (positions,
compare with probes and downstream tasks, downstream --run, perf, the report): the objective answers
what the bench asks (its parts, floors, probe attention, ceiling, report note), the bench never asks who it is."""

import json

import pytest
import torch

import objectives
from backbone import Backbone, preset
from bench.compare import main as compare_main
from bench.downstream import main as downstream_main
from bench.perf import format_table, measure
from bench.positions import main as positions_main
from objectives import IGNORE, Corrupted, Objective, Output
from objectives.base import lm_flops, lm_forward

pytestmark = pytest.mark.slow  # every command end to end on a new objective


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

    @classmethod
    def report_note(cls, metrics: dict[str, str], closed: dict[str, str]) -> str | None:
        return f"predicts the second half at accuracy {metrics['accuracy']}"


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(objectives.REGISTRY, "half", HalfPrefixLM)


def test_positions_table_shows_the_new_objective(registered, capsys):
    positions_main(["--objectives", "ar,half", "--seq-len", "32", "--model", "tiny", "--vocab-size", "64", "--json"])
    rows = {row["objective"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["half"]["supervised_positions"] == 16 and rows["half"]["measured_positions"] == 16
    assert rows["half"]["parts"] == "16 read, 16 predicted" and rows["half"]["attention"] == "prefix"


def test_compare_reports_probes_and_tasks_the_new_objective(registered, tmp_path):
    out = tmp_path / "cmp"
    compare_main(["--model", "tiny", "--seq-len", "32", "--batch-size", "4", "--budget", "2e8", "--eval-points", "2",
                  "--data", "synthetic:train=64,heldout=16,words=64,lexicon=8", "--quiet", "--objectives", "mlm,half",
                  "--seeds", "2",
                  "--downstream", "synthetic:states,size=64,synthetic:topic,size=16",
                  "--finetune-steps", "2", "--finetune-lrs", "1e-3", "--out", str(out)])
    results = json.loads((out / "results.json").read_text())
    half = next(o for o in results["objectives"] if o["objective"] == "half")
    assert half["compute"]["supervised_per_sequence"] == 16
    assert half["floors"] == {} and results["bayes"]["floors"]["half"] == {}
    assert half["probes"]["sees"] == "smoothing" and 0 <= half["probes"]["hidden_state"]["mean"] <= 1
    tagging = {row["objective"]: row for row in results["downstream"]["tasks"][0]["rows"]}
    assert 0 <= tagging["half"]["finetuned"]["mean"] <= 1 and "mean over tokens" in tagging["half"]["pooling"]
    report = (out / "report.md").read_text()
    assert "| half " in report and "16 read, 16 predicted" in report
    assert "`half`: predicts the second half at accuracy" in report  # its own note, below the loss table

    # a task added later, without retraining: the new objective's backbone read back from its checkpoint
    downstream_main(["--run", str(out), "--tasks", "synthetic:topic,size=16", "--finetune-steps", "2",
                     "--finetune-lrs", "1e-3", "--quiet"])
    rebuilt = json.loads((out / "results.json").read_text())
    tasks = {task["task"]: task for task in rebuilt["downstream"]["tasks"]}
    assert set(tasks) == {"synthetic:states,size=64", "synthetic:topic,size=16"}
    assert "half" in {row["objective"] for row in tasks["synthetic:topic,size=16"]["rows"]}


def test_perf_times_the_new_objective_beside_the_others(registered):
    vocab_size, seq_len, batch = 64, 16, 4
    rows, _ = measure(model="tiny", seq_len=seq_len, batch_size=batch, repeats=1, new_tokens=4, vocab_size=vocab_size)
    half = next(row for row in rows if row["name"] == "half")
    vocab = objectives.Vocab.for_tokenizer(vocab_size)
    with torch.device("meta"):
        objective = HalfPrefixLM(Backbone(preset("tiny", vocab.size, max_seq_len=seq_len)), vocab)
    assert half["flops_per_step"] == batch * objective.expected_flops_per_sequence(seq_len)
    assert half["ours_tokens_per_s"] > 0 and "peer_tokens_per_s" not in half  # no Hugging Face peer of its own
    assert "| half " in format_table(rows)
