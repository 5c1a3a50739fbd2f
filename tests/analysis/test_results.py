"""bench.analysis.results and bench.report as layers of their own: hand-made run records in, the numbers and tables
out, each checked against arithmetic done here."""

import json
import math
from dataclasses import replace

import pytest

from backbone import ConfigError
from bench.analysis.findings import Stat, to_json
from bench.analysis.results import (SCHEMA, Measured, build_results, compute_summary, final_metrics, load_results,
                                    loss_summary, stat)
from bench.analysis.summaries import Compute, Floor, ObjectiveSummary, Results
from bench.common.files import write_json
from bench.report.markdown import worded
from bench.report.sections import compute_section, loss_table
from bench.report.tables import fmt, table
from bench.training.records import RUN_SCHEMA, ControlRecord, RunRecord, from_json
from bench.training.runs import finished_result

from tests.helpers import GOLDEN


def run_record(objective: str, seed: int, loss: float, accuracy: float, train_seconds: float) -> RunRecord:
    curve = [{"checkpoint": 1e9, "step": 5, "flops": 1e9, "tokens": 640, "supervised_positions": 96,
              "metrics": {"loss": 2.5, "accuracy": 0.2}, "probes": {"hidden_state": 0.3},
              "downstream": {"synthetic:tagging": 0.4}},
             {"checkpoint": 2e9, "step": 10, "flops": 2e9, "tokens": 1280, "supervised_positions": 192,
              "metrics": {"loss": loss, "accuracy": accuracy}, "probes": {"hidden_state": 0.5},
              "downstream": {"synthetic:tagging": 0.6}}]
    return from_json({
        "schema": RUN_SCHEMA, "objective": objective, "seed": seed, "attention": "bidirectional", "lr": 1e-3,
        "control": "untrained, bidirectional", "signals": ["mask_token"], "sees": "smoothing", "revision": "test",
        "threads": 1, "steps": 10, "flops": 2e9, "tokens": 1280, "supervised_positions": 192, "phases": [],
        "cooldown_steps": 2, "cooldown_flops": 4e8, "supervised_per_sequence": 12.0, "flops_per_step": 2e8, "wall_seconds": train_seconds + 3.0,
        "train_seconds": train_seconds, "tokens_per_second": 1280 / train_seconds, "parameters": 100,
        "backbone_parameters": 90, "expected_supervised_per_sequence": 12.0, "expected_flops_per_sequence": 1e7,
        "curve": curve, "probe_seconds": 1.5}, "a test's run")


def test_a_run_s_final_metrics_are_its_objective_s_own_never_counters_probes_or_tasks():
    assert final_metrics(run_record("mlm", 0, 1.75, 0.625, 4.0)) == {"loss": 1.75, "accuracy": 0.625}


def test_stat_is_the_t_interval_worked_by_hand():
    values = [1.0, 2.0, 4.0]
    mean, sd = 7 / 3, math.sqrt(((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 2)
    found = stat(values)
    assert found.mean == pytest.approx(mean) and found.n == 3
    assert found.ci95 == pytest.approx(4.302653 * sd / math.sqrt(3), rel=1e-6)
    assert stat([0.5]) == Stat(mean=0.5, ci95=None, n=1) and stat([]) is None


def test_compute_summary_means_over_seeds_and_splits_the_wall_time():
    runs = [run_record("mlm", 0, 1.5, 0.5, 4.0), run_record("mlm", 1, 1.7, 0.7, 6.0)]
    summary = compute_summary(runs)
    assert summary.train_seconds == 5.0 and summary.checkpoint_seconds == 3.0
    assert summary.final_seconds == 1.5  # the probes; no downstream tasks ran
    assert summary.flops_per_token == 2e9 / 1280 and summary.flops_per_supervised == 2e9 / 192


def test_loss_summary_closes_the_learnable_range_from_unigram_to_floor():
    runs = [run_record("ar", 0, 1.5, 0.5, 4.0), run_record("ar", 1, 2.0, 0.7, 6.0)]
    summary = loss_summary(runs, floors={"loss": 1.0}, unigram={"loss": 3.0})
    assert summary["loss"].mean == 1.75 and summary["metrics"] == {"accuracy": stat([0.5, 0.7])}
    floor = summary["floors"]["loss"]
    assert floor.excess.mean == 0.75  # (0.5 + 1.0) / 2
    assert floor.closed.mean == pytest.approx((0.75 + 0.5) / 2)  # (3 − 1.5) / 2 and (3 − 2) / 2


def test_report_tables_are_the_results_numbers_formatted():
    assert fmt(Stat(mean=0.12345, ci95=0.01, n=3)) == "0.123 ± 0.010" and fmt(None) == ""
    assert fmt(Stat(mean=0.5, ci95=None, n=1), 2) == "0.50"
    assert table([["a", "1.50"]], ["x", "y"]).splitlines() == ["| x   | y    |", "|-----|------|", "| a   | 1.50 |"]
    runs = [run_record("mlm", 0, 1.5, 0.5, 4.0), run_record("mlm", 1, 1.7, 0.7, 6.0)]
    compute = replace(compute_summary(runs), tokens_per_second=256.0)
    results = golden_with([summary("mlm", {"accuracy": [0.5, 0.7]}, {}, compute=compute, loss=[1.5, 1.7])])
    section = compute_section(results)
    # evaluations: (3 s checkpoints + 1.5 s final) × 2 seeds = 9 s of 9 + 10 s training
    assert "The evaluations took 9 s of the runs' 19 s (47 %)" in section
    row = next(line for line in section.splitlines() if line.startswith("| mlm"))
    assert [cell.strip() for cell in row.strip("|").split("|")] == [
        "mlm", "2", "2e+08", "1.562e+06", "1.042e+07", "10.0", "1280", "192", "2e+09", "4e+08", "5.0", "3.0", "1.5",
        "256"]
    losses = next(line for line in loss_table(results).splitlines() if line.startswith("| mlm"))
    assert f"| {fmt(stat([1.5, 1.7]), 4)} " in losses and "accuracy 0.600 ± " in losses


def test_records_of_another_layout_are_refused_not_misread(tmp_path):
    with pytest.raises(ConfigError, match="schema 1, not 4"):
        load_results({"runs": []})
    golden = json.loads(GOLDEN.read_text())
    with pytest.raises(ConfigError, match="does not hold the results of schema 4"):
        load_results({**golden, "verdict": {"baseline": "mlm"}})  # a verdict without its fields
    flat = {"objective": "mlm", "curve": [{"checkpoint": 1e9, "step": 5, "loss": 2.5}]}  # before the rows had parts
    write_json(tmp_path / "result.json", flat)
    with pytest.raises(ConfigError, match=f"schema 1, not {RUN_SCHEMA}"):
        finished_result(tmp_path)
    write_json(tmp_path / "result.json", {**flat, "schema": RUN_SCHEMA})  # the schema named, its fields not there
    with pytest.raises(ConfigError, match="does not hold a RunRecord"):
        finished_result(tmp_path)
    assert finished_result(tmp_path / "absent") is None


def test_records_read_back_field_for_field_in_the_order_they_were_written(tmp_path):
    """The one loader and the writer are inverses: every run and control of a real comparison's results.json
    (the golden fixture) comes back from result.json as it was, keys in the same order."""
    golden = json.loads(GOLDEN.read_text())
    for written in [*golden["runs"], *golden["controls"]]:
        write_json(tmp_path / "result.json", written)
        record = finished_result(tmp_path)
        assert isinstance(record, RunRecord if "objective" in written else ControlRecord)
        assert json.dumps(record.to_json()) == json.dumps(written)
    assert [point.checkpoint for point in from_json(golden["runs"][0], "").curve] == [
        row["checkpoint"] for row in golden["runs"][0]["curve"]]


def test_each_objective_speaks_of_its_own_metrics_and_the_report_names_none():
    from bench.report.sections import objective_notes

    results = golden_with([
        summary("mlm", {"accuracy": [0.4, 0.5]}, {}),
        summary("electra:rate=0.25", {"discriminator_auc": [0.8, 0.9], "discriminator_loss": [0.3, 0.3],
                                      "label_entropy": [0.5, 0.5], "replaced_fraction": [0.2, 0.2],
                                      "discriminator_accuracy": [0.85, 0.87], "trivial_accuracy": [0.8, 0.8],
                                      "generator_accuracy": [0.3, 0.4], "discriminator_bayes_loss": [0.2, 0.2],
                                      "discriminator_closed": [0.3, 0.35], "discriminator_precision": [0.7, 0.8],
                                      "discriminator_recall": [0.4, 0.5]}, {"generator_loss": Floor(floor=1.0, unigram=2.0, value=None, excess=None, closed=stat([0.612]))}),
        summary("gone", {"accuracy": [0.1]}, {})])  # a results.json of an objective no longer registered
    text = objective_notes(results)
    assert "`mlm`" not in text and "`gone`" not in text
    assert text.startswith(f"\n\n`electra:rate=0.25`: discriminator loss {fmt(stat([0.3, 0.3]))} against "
                           f"{fmt(stat([0.5, 0.5]))}, the entropy of its labels")
    assert (f"Bayes reference discriminator for the same generator and windows reaches {fmt(stat([0.2, 0.2]))}: the "
            f"discriminator closed {fmt(stat([0.3, 0.35]))} of the gap" in text)
    assert f"precision of \"replaced\" is {fmt(stat([0.7, 0.8]))} and its recall {fmt(stat([0.4, 0.5]))}" in text
    assert f"ROC AUC {fmt(stat([0.8, 0.9]))} (0.5 is chance)" in text
    assert "closed 0.61 of its learnable range" in text and f"reached {fmt(stat([0.3, 0.4]))} accuracy" in text
    assert objective_notes(golden_with([summary("ar", {"accuracy": [0.3]}, {})])) == ""


def test_the_golden_results_json_rebuilds_to_itself():
    # what bench.downstream --run does before adding a task: read the measurements back, build the results again
    stored = json.loads(GOLDEN.read_text())
    assert stored["schema"] == SCHEMA, "a stale fixture: python tests/fixtures/make_comparison.py"
    rebuilt = worded(build_results(Measured.from_results(load_results(stored))))  # the answer's sentence, as written
    assert without_seconds(to_json(rebuilt)) == without_seconds(stored)


def golden_with(objectives: list[ObjectiveSummary]) -> Results:
    """The golden comparison's results with these objective summaries (two seeds)."""
    return replace(load_results(json.loads(GOLDEN.read_text())), objectives=objectives, seeds=2)


def summary(spec: str, metrics: dict[str, list[float]], floors: dict[str, Floor], compute: Compute | None = None,
            loss: list[float] | None = None) -> ObjectiveSummary:
    return ObjectiveSummary(objective=spec, seeds=2, compute=compute, control="untrained, bidirectional",
                            loss=stat(loss or []), metrics={k: stat(v) for k, v in metrics.items()}, floors=floors,
                            probes=None)


def without_seconds(value):
    if isinstance(value, dict):
        return {k: without_seconds(v) for k, v in value.items() if "seconds" not in k}
    return [without_seconds(v) for v in value] if isinstance(value, list) else value


def test_an_objective_learned_its_task_when_every_seed_closed_half_of_its_own_range():
    from bench.analysis.results import own_task

    def with_metrics(record, metrics):
        return replace(record, curve=[*record.curve[:-1], replace(record.curve[-1], metrics=metrics)])

    mlm = [run_record("mlm", seed, loss, 0.5, 4.0) for seed, loss in enumerate([1.2, 1.1, 1.45])]
    # unigram 2.0, floor 1.0: shares 0.8, 0.9 and 0.55; 12 positions per sequence hold (2 − 1) · 12 nats to learn
    task = own_task(mlm, {"loss": 1.0}, {"loss": 2.0}, {"supervised_positions": 12.0})
    assert task.metric == "loss" and task.closed_each == pytest.approx([0.8, 0.9, 0.55])
    assert task.learnable_per_sequence == pytest.approx(12.0) and task.learned
    # the mean (0.63) clears the line, one seed (0.4) does not: not learned, by the one rule
    assert not own_task([*mlm[:2], run_record("mlm", 3, 1.6, 0.5, 4.0)], {"loss": 1.0}, {"loss": 2.0}, None).learned
    # ELECTRA's task is its discriminator's: its labels' entropy to the Bayes reference, at every position
    electra = [with_metrics(run_record("electra", seed, 0.3, 0.9, 4.0),
                            {"loss": 9.0, "generator_loss": 1.5, "label_entropy": entropy,
                             "discriminator_bayes_loss": bayes, "discriminator_closed": closed})
               for seed, (entropy, bayes, closed) in enumerate([(0.4, 0.2, 0.6), (0.42, 0.22, 0.7)])]
    task = own_task(electra, {"generator_loss": 1.0}, {"generator_loss": 2.0}, {"discriminator_positions": 64})
    assert (task.metric, task.trivial, task.bayes) == ("discriminator_loss", pytest.approx(0.41), pytest.approx(0.21))
    assert task.learnable_per_sequence == pytest.approx(0.2 * 64) and task.learned
    assert own_task(mlm, {}, {}, None) is None  # no Bayes reference (span corruption, text): not known


def test_on_text_electra_learned_its_task_by_its_discriminators_auc_against_trained_discriminators():
    from bench.analysis.results import CHANCE_AUC, TRAINED_DISCRIMINATOR_AUC, own_task

    def electra(aucs):
        return [replace(record, curve=[*record.curve[:-1], replace(record.curve[-1], metrics={
            "loss": 9.0, "discriminator_auc": auc, "label_entropy": 0.4})])
            for record, auc in zip([run_record("electra", seed, 0.3, 0.9, 4.0) for seed in range(len(aucs))], aucs)]

    # text: no floors at all. Chance 0.5 to trained discriminators' 0.94: half the range is AUC 0.72, on every seed
    task = own_task(electra([0.83, 0.94]), {}, {}, None)
    assert (task.metric, task.trivial, task.bayes) == ("discriminator_auc", CHANCE_AUC, TRAINED_DISCRIMINATOR_AUC)
    assert task.closed_each == pytest.approx([0.75, 1.0]) and task.learned and task.learnable_per_sequence is None
    assert not own_task(electra([0.577, 0.9]), {}, {}, None).learned  # one seed near chance: not learned
    # on the embedded language its Bayes reference decides; an ablation without one, beside a generator floor, is
    # not judged by the text rule
    assert own_task(electra([0.9]), {"generator_loss": 1.0}, {"generator_loss": 2.0}, None) is None
