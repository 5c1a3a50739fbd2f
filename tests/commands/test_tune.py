"""bench.tune: an equal number of trials per objective, on a seed no comparison evaluates, picked on the dev split;
and the default comparison reads what the committed tuning picked."""

import json
from pathlib import Path

import pytest

from bench.config import Config
from bench.tune import (LADDER_SEEDS, TRIAL_RATES, TUNING_SEED, defaults, main, trials,
                        validation_view)
from bench.tuned import TUNED, finetune_rates, setting_of
from bench.yardsticks.downstream import Downstream, FinetuneConfig
from bench.yardsticks.examples import TaskContext
from bench.yardsticks.tasks import load_task

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--model", "tiny", "--seq-len", "32", "--batch-size", "4", "--budget", "3e8", "--eval-points", "2",
        "--data", "synthetic:train=64,heldout=16,words=64,states=4", "--quiet", "--jobs", "1",
        "--downstream", "synthetic:states,size=64,synthetic:component,size=16", "--finetune-steps", "2"]


def test_every_objective_gets_as_many_trials_and_electra_tunes_its_rate_with_lambda():
    assert len(trials("mlm")) == len(trials("ar")) == len(trials("electra")) == len(trials("mlm:rate=0.4"))
    assert trials("ar") == [("ar", rate) for rate in TRIAL_RATES]
    assert {spec for spec, _ in trials("electra")} == {"electra", "electra:disc_weight=10"}
    assert trials("electra") == [(spec, rate) for spec in ("electra:disc_weight=10", "electra")
                                 for rate in TRIAL_RATES[:3]]  # λ with the lower half of the rates
    assert trials("electra:disc_weight=10") == [("electra:disc_weight=10", rate) for rate in TRIAL_RATES]  # λ given
    assert trials("ar>mlm@0.25") == [("ar>mlm@0.25", rate) for rate in TRIAL_RATES]


def test_the_validation_view_reads_the_dev_split_where_the_test_split_was(corpus):
    from bench.data.corpus import Corpus  # noqa: F401  (the fixture's type)

    context = TaskContext(32, corpus.vocab, language=corpus.language)
    task = load_task("synthetic:states,size=64", context)
    view = validation_view(Downstream([task], FinetuneConfig(tuned=(("mlm", task.name, 1e-3),))), (1e-3, 1e-2))
    assert view.tasks[0].test is task.dev and view.tasks[0].dev is task.dev and view.tasks[0].train is task.train
    assert view.config.lrs == (1e-3, 1e-2) and view.config.tuned == ()  # every rate tried, none taken as given


@pytest.mark.slow
def test_a_tuning_picks_each_trial_and_rate_by_its_dev_score(tmp_path):
    main([*TINY, "--out", str(tmp_path), "--ladder-max", "1.2e9"])
    found = json.loads((tmp_path / "results.json").read_text())
    # ELECTRA's budget ladder: doubled budgets until every seed's discriminator closes half its gap, or the top
    rungs = found["electra_ladder"]
    assert [rung["budget"] for rung in rungs] == [3e8, 6e8, 1.2e9][:len(rungs)] and rungs
    for rung in rungs:
        assert rung["seeds"] == list(LADDER_SEEDS) and len(rung["closed"]) == 3
        assert rung["learned"] == all(share is not None and share >= 0.5 for share in rung["closed"])
    assert not any(rung["learned"] for rung in rungs[:-1]) and (rungs[-1]["learned"] or len(rungs) == 3)
    assert all(min(LADDER_SEEDS) >= TUNING_SEED for _ in rungs)  # seeds no comparison evaluates
    assert "When ELECTRA learns its own task" in (tmp_path / "report.md").read_text()
    assert found["seed"] == TUNING_SEED and found["setting"]["model"] == "tiny"
    counts = {spec: len(tuned["trials"]) for spec, tuned in found["objectives"].items()}
    assert set(counts) == {"mlm", "ar", "electra"} and len(set(counts.values())) == 1
    for tuned in found["objectives"].values():
        scored = [row for row in tuned["trials"] if row["validation"] is not None]
        best = max(row["validation"] for row in scored)
        first = next(row for row in scored if row["validation"] == best)
        assert tuned["picked"] == {"objective": first["trial"], "lr": first["lr"]}
        for row in scored:  # the validation score is the tasks' average on dev
            assert row["validation"] == pytest.approx(sum(row["tasks"].values()) / len(row["tasks"]))
        for task, rate in tuned["finetune"].items():
            dev = tuned["finetune_dev"][task]
            assert dev[f"{rate:g}"] == max(dev.values())
    trial_dirs = sorted(path.name for path in (tmp_path / "trials").iterdir() if path.name != "ladder")
    assert trial_dirs and all(f"seed{TUNING_SEED}" in name for name in trial_dirs)  # never an evaluated seed
    assert "(picked)" in (tmp_path / "report.md").read_text()
    assert set(defaults(found)["finetune"]) >= {"untrained, bidirectional", "untrained, causal"}
    with pytest.raises(SystemExit):  # not the default setting: its picks cannot become the default's
        from bench.cli import run
        run(main, [*TINY, "--out", str(tmp_path / "again"), "--write-defaults"])


def test_the_default_comparison_reads_the_committed_tuning():
    """bench/tuned.json is what the committed tuning report picked, none at an edge of its grid, and the default
    comparison's objectives, peak rates and fine-tuning rates are its."""
    committed = json.loads((ROOT / "reports" / "tuning" / "results.json").read_text())
    assert TUNED == defaults(committed) and TUNED["setting"] == setting_of(Config())
    default = Config()
    assert default.training.objectives == TUNED["objectives"] and default.training.lr == TUNED["lr"]
    for tuned in committed["objectives"].values():
        assert tuned["at_edge"] is None and tuned["finetune_at_edge"] == {}
    assert all(not tuned["finetune_at_edge"] for tuned in committed["controls"].values())
    rates = finetune_rates(default)
    assert {(reader, task) for reader, task, _ in rates} == {
        (reader, task) for reader, tasks in TUNED["finetune"].items() for task in tasks}
    assert finetune_rates(default.with_flags(budget=1e12)) == ()  # another setting: the grid, chosen on dev


def test_a_reader_is_fine_tuned_at_its_tuned_rate_only():
    config = FinetuneConfig(lrs=(1e-3, 3e-3, 1e-2), tuned=(("mlm", "synthetic:states", 3e-3),
                                                            ("untrained, causal", "synthetic:states", 1e-2)))
    assert config.rates_for("mlm", "synthetic:states") == (3e-3,)
    assert config.rates_for("untrained, causal", "synthetic:states") == (1e-2,)
    assert config.rates_for("ar", "synthetic:states") == config.rates_for(None, "x") == (1e-3, 3e-3, 1e-2)


def test_a_fine_tuning_pick_is_at_an_edge_unless_it_is_the_rate_that_barely_moves_a_backbone():
    from bench.tune import BARELY_MOVES, FINETUNE_RATES, finetune_picks

    grid = [f"{rate:g}" for rate in FINETUNE_RATES]
    falling = {"task": {rate: 1.0 - i / 10 for i, rate in enumerate(grid)}}  # fine-tuning only hurts
    rising = {"task": {rate: i / 10 for i, rate in enumerate(grid)}}
    inside = {"task": {rate: -abs(i - 3) for i, rate in enumerate(grid)}}
    assert finetune_picks(falling)["finetune"] == {"task": BARELY_MOVES} == {"task": min(FINETUNE_RATES)}
    assert finetune_picks(falling)["finetune_at_edge"] == {} and finetune_picks(inside)["finetune_at_edge"] == {}
    assert finetune_picks(rising)["finetune_at_edge"] == {"task": "highest"}


def test_the_command_line_is_checked_and_recorded(tmp_path, capsys, monkeypatch):
    from bench.cli import run
    from bench.tune import build_parser

    assert "--write-defaults" in build_parser().format_help() and "--budget" in build_parser().format_help()
    with pytest.raises(SystemExit) as stopped:
        run(main, ["--write-defaults", "--budgett", "1"])
    assert stopped.value.code == 2 and "unrecognized arguments: --budgett" in capsys.readouterr().err
    tops = []
    monkeypatch.setattr("bench.tune.tune", lambda config, top: tops.append(top) or {
        "setting": {}, "revision": "r", "seed": 0, "finetune_rates": [1e-3], "objectives": {}, "controls": {}})
    monkeypatch.setattr("sys.argv", ["tune", "--out", str(tmp_path), "--quiet", "--ladder-max", "2e12"])
    main(None)
    recorded = json.loads((tmp_path / "results.json").read_text())["command"]
    assert recorded == f"python -m bench.tune --out {tmp_path} --quiet --ladder-max 2e12" and tops == [2e12]
    assert f"| command      | `{recorded}` |" in (tmp_path / "report.md").read_text()


def test_the_fine_tuning_steps_have_one_default():
    from bench.compare import parse_config
    from bench.config import Config
    from bench.yardsticks.downstream import DEFAULT_STEPS

    assert Config().yardsticks.finetune_steps == DEFAULT_STEPS == parse_config([]).yardsticks.finetune_steps


def test_one_comparison_fine_tunes_every_backbone_one_way():
    """Tuned rates only where every reader (each objective and each control) has one on every task: a comparison
    that adds an objective the tuning never tried fine-tunes everyone over the grid (issue 59 item 3: the same control
    scored 0.398 at its tuned rate and 0.343 over the grid within one preset)."""
    from bench.planning import one_protocol

    tuned = (("mlm", "states", 1e-3), ("mlm", "agreement", 3e-3), ("untrained, bidirectional", "states", 3e-3),
             ("untrained, bidirectional", "agreement", 1e-2))
    readers = ["mlm", "untrained, bidirectional"]
    assert one_protocol(tuned, readers, ["states", "agreement"]) == tuned
    assert one_protocol(tuned, [*readers, "span"], ["states", "agreement"]) == ()  # span was never tuned
    assert one_protocol(tuned, readers, ["states", "topic"]) == ()  # nor was any reader on topic
    assert one_protocol(tuned, [*readers, "untrained, causal"], ["states"]) == ()  # ar's control, say
