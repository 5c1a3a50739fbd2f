"""bench.tune: an equal number of trials per objective, on a seed no comparison evaluates, picked on the dev split;
and the default comparison reads what the committed tuning picked."""

import json
from pathlib import Path

import pytest

from bench.common.tuned import TUNED
from bench.orchestration.config import Config
from bench.orchestration.tuned_setting import finetune_rates, setting_of
from bench.tune import TRIAL_RATES, TUNING_SEEDS, candidates, defaults, main, margin, trials, validation_view
from bench.yardsticks.downstream import Downstream, FinetuneConfig
from bench.yardsticks.examples import TaskContext
from bench.yardsticks.tasks import load_task

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--model", "tiny", "--seq-len", "32", "--batch-size", "4", "--budget", "3e8", "--eval-points", "2",
        "--data", "synthetic:train=64,heldout=16,words=64,lexicon=8", "--quiet", "--jobs", "1",
        "--downstream", "synthetic:states,size=64,synthetic:topic,size=16", "--finetune-steps", "2"]


def test_every_objective_gets_as_many_trials_and_electra_tunes_its_rate_with_lambda_and_generator_width():
    assert len(trials("mlm")) == len(trials("ar")) == len(trials("electra")) == len(trials("mlm:rate=0.4"))
    assert trials("ar") == [("ar", rate) for rate in TRIAL_RATES]
    # the paper's setting, λ = 10 and a generator half as wide, each at the two rates below the grid's middle
    assert trials("electra") == [(spec, rate) for spec in ("electra", "electra:disc_weight=10", "electra:gen_width=0.5")
                                 for rate in TRIAL_RATES[1:3]]
    assert trials("electra:disc_weight=10") == [("electra:disc_weight=10", rate) for rate in TRIAL_RATES]  # λ given
    assert trials("ar>mlm@0.25") == [("ar>mlm@0.25", rate) for rate in TRIAL_RATES]


def test_a_pick_s_margin_is_the_paired_difference_over_the_seeds_in_standard_errors():
    best = {"trial": "mlm", "lr": 2e-3, "per_seed": [0.60, 0.62, 0.64]}
    other = {"trial": "mlm", "lr": 4e-3, "per_seed": [0.58, 0.61, 0.60]}
    found = margin(best, other)  # differences 0.02, 0.01, 0.04: mean 0.07/3, variance 7e-4/3 (by hand)
    assert found["difference"] == pytest.approx(0.07 / 3) and found["se"] == pytest.approx((7e-4 / 3 / 3) ** 0.5)
    assert found["in_se"] == pytest.approx((0.07 / 3) / (0.0152753 / 3 ** 0.5), rel=1e-5)
    assert found["over"] == {"objective": "mlm", "lr": 4e-3}
    assert margin(best, {**other, "per_seed": [0.5, None, 0.5]}) is None  # a seed diverged: no paired difference


def test_the_pick_is_made_among_the_trials_that_learned_their_own_task_on_every_seed():
    """A comparison ranks an objective only when every seed learned its own task: the tuning picks by the same rule,
    so a rate whose dev score is higher but whose runs failed their task on a seed is not the default's."""
    row = lambda lr, validation, learned: {"trial": "mlm", "lr": lr, "validation": validation,  # noqa: E731
                                          "learned": learned}
    rows = [row(1e-3, 0.57, False), row(2e-3, 0.60, True), row(4e-3, 0.62, False), row(8e-3, None, None)]
    assert candidates("mlm", rows) == [rows[1]]
    # none learned (ELECTRA at small budgets) or no reference (text): every finished trial
    unlearned = [row(1e-3, 0.5, False), row(2e-3, 0.52, None), row(4e-3, None, None)]
    assert candidates("electra", unlearned) == unlearned[:2]
    with pytest.raises(Exception, match="every trial of mlm diverged"):
        candidates("mlm", [row(1e-3, None, None)])


def test_the_validation_view_reads_the_dev_split_where_the_test_split_was(corpus):
    from bench.data.corpus import Corpus  # noqa: F401  (the fixture's type)

    context = TaskContext(32, corpus.vocab, language=corpus.language)
    task = load_task("synthetic:states,size=64", context)
    view = validation_view(Downstream([task], FinetuneConfig(tuned=(("mlm", task.name, 1e-3),))), (1e-3, 1e-2))
    assert view.tasks[0].test is task.dev and view.tasks[0].dev is task.dev and view.tasks[0].train is task.train
    assert view.config.lrs == (1e-3, 1e-2) and view.config.tuned == ()  # every rate tried, none taken as given


@pytest.mark.slow
def test_a_tuning_picks_each_trial_and_rate_by_its_dev_score_over_the_seeds(tmp_path):
    main([*TINY, "--out", str(tmp_path), "--ladder-max", "1.2e9", "--transfer", "2"])
    found = json.loads((tmp_path / "results.json").read_text())
    # ELECTRA's budget ladder: doubled budgets until every seed's discriminator closes half its gap, or the top
    rungs = found["electra_ladder"]
    assert [rung["budget"] for rung in rungs] == [3e8, 6e8, 1.2e9][:len(rungs)] and rungs
    for rung in rungs:
        assert rung["seeds"] == list(TUNING_SEEDS) and len(rung["closed"]) == 3
        assert rung["learned"] == all(share is not None and share >= 0.5 for share in rung["closed"])
    assert not any(rung["learned"] for rung in rungs[:-1]) and (rungs[-1]["learned"] or len(rungs) == 3)
    assert "When ELECTRA learns its own task" in (tmp_path / "report.md").read_text()
    assert found["seeds"] == list(TUNING_SEEDS) and found["setting"]["model"] == "tiny"
    counts = {spec: len(tuned["trials"]) for spec, tuned in found["objectives"].items()}
    assert set(counts) == {"mlm", "ar", "electra"} and len(set(counts.values())) == 1
    for tuned in found["objectives"].values():
        scored = [row for row in tuned["trials"] if row["validation"] is not None]
        for row in scored:  # each seed's share of its own task's range, and the comparisons' rule on it
            assert len(row["closed"]) == len(TUNING_SEEDS) and row["learned"] == (min(row["closed"]) >= 0.5)
        scored = [row for row in scored if row["learned"]] or scored  # picked among those that learned their task
        best = max(row["validation"] for row in scored)
        first = next(row for row in scored if row["validation"] == best)
        assert tuned["picked"] == {"objective": first["trial"], "lr": first["lr"]}
        for row in scored:  # the validation score: each seed's average over the tasks on dev, averaged
            assert len(row["per_seed"]) == len(TUNING_SEEDS)
            assert row["validation"] == pytest.approx(sum(row["per_seed"]) / len(row["per_seed"]))
            assert row["validation"] == pytest.approx(sum(row["tasks"].values()) / len(row["tasks"]))
        runner_up = max((row for row in scored if row is not first), key=lambda row: row["validation"])
        assert tuned["margin"]["over"] == {"objective": runner_up["trial"], "lr": runner_up["lr"]}
        for task, rate in tuned["finetune"].items():
            dev = tuned["finetune_dev"][task]
            assert dev[f"{rate:g}"] == max(dev.values()) and len(tuned["finetune_each_seed"][task]) == 3
    # the transfer check: each pick and its neighbours in rate, again at twice the budget
    transfer = found["transfer"]
    assert transfer["budget"] == 6e8 and set(transfer["checks"]) == set(found["objectives"])
    for spec, check in transfer["checks"].items():
        assert check["picked"] == found["objectives"][spec]["picked"]
        assert {row["trial"] for row in check["rows"]} == {check["picked"]["objective"]} and 2 <= len(check["rows"]) <= 3
    trial_dirs = sorted(path.name for path in (tmp_path / "trials").iterdir() if path.name != "ladder")
    assert trial_dirs and all(any(f"seed{seed}" in name for seed in TUNING_SEEDS) for name in trial_dirs)
    assert min(TUNING_SEEDS) >= 1000  # seeds no comparison evaluates
    assert "(picked)" in (tmp_path / "report.md").read_text()
    assert "Do the picks hold at 6e+08 FLOPs?" in (tmp_path / "report.md").read_text()
    assert set(defaults(found)["finetune"]) >= {"untrained, bidirectional", "untrained, causal"}
    with pytest.raises(SystemExit):  # not the default setting: its picks cannot become the default's
        from bench.common.cli import run
        run(main, [*TINY, "--out", str(tmp_path / "again"), "--write-defaults"])


def test_the_default_comparison_reads_the_committed_tuning():
    """bench/common/tuned.json is what the committed tuning report picked, none at an edge of its grid, and the default
    comparison's objectives, peak rates and fine-tuning rates are its."""
    committed = json.loads((ROOT / "reports" / "tuning" / "results.json").read_text())
    assert TUNED == defaults(committed) and TUNED["setting"] == setting_of(Config())
    default = Config()
    assert default.training.objectives == TUNED["objectives"] and default.training.lr == TUNED["lr"]
    # no pick at an edge of its grid, but for an objective that learns its own task at no budget of the ladder: its
    # trials rank backbones that failed their task, and the report flags the edge (ELECTRA tries two rates a setting)
    never_learned = {"electra"} if not any(rung["learned"] for rung in committed.get("electra_ladder", [])) else set()
    for spec, tuned in committed["objectives"].items():
        assert tuned["at_edge"] is None or spec in never_learned, spec
        assert tuned["finetune_at_edge"] == {}, spec
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
    falling = [{"task": {rate: 1.0 - i / 10 for i, rate in enumerate(grid)}}]  # fine-tuning only hurts
    rising = [{"task": {rate: i / 10 for i, rate in enumerate(grid)}}]
    inside = [{"task": {rate: -abs(i - 3) for i, rate in enumerate(grid)}}]
    assert finetune_picks(falling)["finetune"] == {"task": BARELY_MOVES} == {"task": min(FINETUNE_RATES)}
    assert finetune_picks(falling)["finetune_at_edge"] == {} and finetune_picks(inside)["finetune_at_edge"] == {}
    assert finetune_picks(rising)["finetune_at_edge"] == {"task": "highest"}
    # over seeds: the rate whose dev score averaged over the seeds is best, each seed's own pick beside it
    seeds = [{"task": {"0.001": 0.70, "0.003": 0.60}}, {"task": {"0.001": 0.50, "0.003": 0.62}},
             {"task": {"0.001": 0.72, "0.003": 0.61}}]
    found = finetune_picks(seeds)
    assert found["finetune"] == {"task": 1e-3} and found["finetune_dev"]["task"]["0.001"] == pytest.approx(0.64)
    assert found["finetune_each_seed"] == {"task": [1e-3, 3e-3, 1e-3]}


def test_the_command_line_is_checked_and_recorded(tmp_path, capsys, monkeypatch):
    from bench.common.cli import run
    from bench.tune import build_parser

    assert "--write-defaults" in build_parser().format_help() and "--budget" in build_parser().format_help()
    with pytest.raises(SystemExit) as stopped:
        run(main, ["--write-defaults", "--budgett", "1"])
    assert stopped.value.code == 2 and "unrecognized arguments: --budgett" in capsys.readouterr().err
    for factor in ("-1", "nan"):
        with pytest.raises(SystemExit) as stopped:
            run(main, ["--transfer", factor, "--out", str(tmp_path / "never")])
        assert stopped.value.code == 2 and "give a positive factor of the budget" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()
    tops = []
    monkeypatch.setattr("bench.tune.tune", lambda config, top, transfer: tops.append(top) or {
        "setting": {}, "revision": "r", "seeds": [0], "finetune_rates": [1e-3], "objectives": {}, "controls": {}})
    monkeypatch.setattr("sys.argv", ["tune", "--out", str(tmp_path), "--quiet", "--ladder-max", "2e12"])
    main(None)
    recorded = json.loads((tmp_path / "results.json").read_text())["command"]
    assert recorded == f"python -m bench.tune --out {tmp_path} --quiet --ladder-max 2e12" and tops == [2e12]
    assert f"| command      | `{recorded}` |" in (tmp_path / "report.md").read_text()


def test_the_fine_tuning_steps_have_one_default():
    from bench.compare import parse_config
    from bench.orchestration.config import Config
    from bench.yardsticks.downstream import DEFAULT_STEPS

    assert Config().yardsticks.finetune_steps == DEFAULT_STEPS == parse_config([]).yardsticks.finetune_steps


def test_one_comparison_fine_tunes_every_backbone_one_way():
    """Tuned rates only where every reader (each objective and each control) has one on every task: a comparison
    that adds an objective the tuning never tried fine-tunes everyone over the grid (issue 59 item 3: the same control
    scored 0.398 at its tuned rate and 0.343 over the grid within one preset)."""
    from bench.orchestration.planning import one_protocol

    tuned = (("mlm", "states", 1e-3), ("mlm", "agreement", 3e-3), ("untrained, bidirectional", "states", 3e-3),
             ("untrained, bidirectional", "agreement", 1e-2))
    readers = ["mlm", "untrained, bidirectional"]
    assert one_protocol(tuned, readers, ["states", "agreement"]) == tuned
    assert one_protocol(tuned, [*readers, "span"], ["states", "agreement"]) == ()  # span was never tuned
    assert one_protocol(tuned, readers, ["states", "topic"]) == ()  # nor was any reader on topic
    assert one_protocol(tuned, [*readers, "untrained, causal"], ["states"]) == ()  # ar's control, say
