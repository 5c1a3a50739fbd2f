"""The budget sweep (`bench.compare --budgets`): one comparison per budget, resumable, and the frontier on top
(bench.analysis.budgets), checked on scores with a known compute shift written into real comparison records."""

import copy
from dataclasses import replace
import json

import numpy as np
import pytest
from PIL import Image

from backbone import ConfigError
from bench.analysis.budgets import frontier_results
from bench.analysis.findings import from_json, to_json
from bench.analysis.results import load_results
from bench.analysis.summaries import Sweep
from bench.analysis.frontier import POWER_LAW
from bench.compare import main
from bench.report.frontier import write_frontier_report

pytestmark = pytest.mark.slow  # budget sweeps end to end

TINY = ["--model", "tiny", "--seq-len", "32", "--batch-size", "4", "--eval-points", "1", "--quiet",
        "--data", "synthetic:train=64,heldout=16,words=64,lexicon=8", "--objectives", "mlm,ar",
        "--downstream", "synthetic:states,size=64,synthetic:topic,size=16", "--finetune-steps", "2",
        "--finetune-lrs", "1e-3"]
BUDGETS = (1e8, 4e8, 1.6e9)
TIMINGS = ("wall_seconds", "train_seconds", "tokens_per_second", "probe_seconds", "downstream_seconds", "revision")


def truth(flops):
    """A share of the ceiling that saturates toward 1 as a power law in compute."""
    return 1 - 0.9 * (np.asarray(flops) / 1e6) ** -0.2


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """One small comparison with probes: the records the known scores below are written into."""
    out = tmp_path_factory.mktemp("probed") / "report"
    main([*TINY, "--budget", "1e8", "--seeds", "3", "--no-probe-curves", "--out", str(out)])
    return json.loads((out / "results.json").read_text())


STATES = "synthetic:states,size=64"


def with_known_scores(results: dict, budget: float, shift: dict[str, float]) -> dict:
    """The comparison as if it had run at `budget`: each objective's frozen score on the states task is
    truth(shift · budget) (± a little per seed), and its verdict finds both beating their controls there."""
    found = copy.deepcopy(results)
    # the fit's ceiling is the best reader's: the truth saturates toward it
    ceiling = max(next(t for t in found["tasks"] if t["task"] == STATES)["ceilings"].values())
    for run in found["runs"]:
        run["downstream"][STATES]["frozen"] = {"score": float(ceiling * truth(shift[run["objective"]] * budget)
                                                              + 0.002 * (run["seed"] - 1))}
    for item in found["verdict"]["yardsticks"]:
        item["measures_pretraining"] = item["yardstick"] == f"{STATES} (frozen)"
        for gain in item["gains"]:
            known = 0.1 if item["measures_pretraining"] else 0.0
            gain.update(estimate=known, ci_low=known - 0.05, ci_high=known + 0.05, p_holm=0.001)
    found["budget_flops"] = budget
    return found


def test_the_frontier_reads_every_budgets_runs_and_finds_a_known_compute_shift(probed, tmp_path):
    by_budget = {budget: load_results(with_known_scores(probed, budget, {"mlm": 1.0, "ar": 2.0})) for budget in BUDGETS}
    frontier = frontier_results(by_budget, "mlm", resamples=200)
    assert frontier.budgets == list(BUDGETS) and frontier.objectives == ["mlm", "ar"]
    items = {item.yardstick: item for item in frontier.yardsticks}
    states = items[f"{STATES} (frozen)"]
    assert states.fit.fit == POWER_LAW and states.measures_pretraining == [True] * 3 and states.fit.lack_of_fit
    assert states.seeds == {"mlm": [0, 1, 2], "ar": [0, 1, 2]}
    ceiling = max(next(t for t in probed["tasks"] if t["task"] == STATES)["ceilings"].values())
    assert [m.mean for m in states.means["ar"]] == pytest.approx(ceiling * truth(2 * np.array(BUDGETS)),
                                                                       rel=1e-9)
    # ar reaches at B what mlm reaches at 2B: the multiplier is 2 at every budget, inside its interval
    rows = states.fit.multipliers["ar"]
    assert [row.multiplier for row in rows] == pytest.approx([2.0] * 3, rel=1e-6)
    assert all(row.ci_low <= 2.0 <= row.ci_high for row in rows[:2])
    assert [row.outside for row in rows] == [False, False, True]  # 2 × 1.6e9 lies beyond the sweep
    assert [meet.where for meet in states.fit.crossovers] == ["never"]  # a pure shift: parallel fits
    # the controls are set beside the curves; a yardstick that measures no pretraining, or mirrors, gets no fit
    assert set(states.controls) == {"untrained, bidirectional", "untrained, causal"}
    assert all(len(b) == 3 for b in states.beats_control.values())
    assert items[f"{STATES} (finetuned)"].fit is None and items["hidden_state_share"].fit is None
    assert items["hidden_state_share"].mirrors == ["mlm", "ar"]
    # each objective's gain over its own control, and its trend (the verdict's gains, as written above)
    gains = states.gains["ar"]
    assert gains.control == "untrained, causal" and len(gains.per_budget) == 3
    # a seed that diverged at one budget leaves the curve, not a hole in it
    by_budget[4e8] = replace(by_budget[4e8], runs=[run for run in by_budget[4e8].runs
                                                   if (run.objective, run.seed) != ("ar", 1)])
    dropped = {i.yardstick: i for i in frontier_results(by_budget, "mlm", resamples=50).yardsticks}
    assert dropped[f"{STATES} (frozen)"].seeds["ar"] == [0, 2]

    report = write_frontier_report(tmp_path, frontier).read_text()
    assert "| ar " in report and "2× (" in report and "outside the sweep" in report and "*untrained, causal*" in report
    assert "power law toward the ceiling" in report and "never meet" in report and "gain per decade" in report
    for png in ("frontier.png", "gains.png"):
        assert f"]({png})" in report
        with Image.open(tmp_path / png) as image:
            image.verify()
    written = json.loads((tmp_path / "results.json").read_text())["frontier"]
    assert written["budgets"] == list(BUDGETS)
    assert to_json(from_json(Sweep, written)) == written  # the layout reads back to the same record


def test_a_budget_sweep_is_one_comparison_per_budget_and_an_interrupted_one_resumes(tmp_path):
    sweep = [*TINY, "--no-probes", "--seeds", "1", "--budgets", "2e8,1e8"]
    main([*sweep, "--out", str(tmp_path / "straight")])
    straight = tmp_path / "straight"
    budgets = [json.loads((straight / name / "results.json").read_text())["budget_flops"]
               for name in ("budget-1e+08", "budget-2e+08")]
    assert budgets == [1e8, 2e8]
    # each budget's runs end their own schedule at their own budget: not a checkpoint of the longer one
    runs = {b: json.loads((straight / f"budget-{b:g}" / "results.json").read_text())["runs"] for b in (1e8, 2e8)}
    assert runs[1e8][0]["steps"] < runs[2e8][0]["steps"]
    assert json.loads((straight / "results.json").read_text())["frontier"]["budgets"] == [1e8, 2e8]
    assert "# The efficiency frontier" in (straight / "report.md").read_text()
    # killed after its first budget: --resume keeps that comparison and runs the second
    main([*TINY, "--no-probes", "--seeds", "1", "--budget", "1e8", "--out", str(tmp_path / "killed" / "budget-1e+08")])
    with pytest.raises(ConfigError, match="pass --resume"):
        main([*sweep, "--out", str(tmp_path / "killed")])
    main([*sweep, "--out", str(tmp_path / "killed"), "--resume"])
    strip = lambda results: [{k: v for k, v in run.items() if k not in TIMINGS} for run in results["runs"]]  # noqa
    for name in ("budget-1e+08", "budget-2e+08"):
        assert strip(json.loads((tmp_path / "killed" / name / "results.json").read_text())) == \
            strip(json.loads((straight / name / "results.json").read_text()))
    # and the frontier on top is rebuilt from the budget folders: the same as the uninterrupted sweep's, but for
    # the setup's wall times
    top = lambda out: {key: value for key, value in json.loads((out / "results.json").read_text())[  # noqa: E731
        "frontier"].items() if key != "setup"}
    assert top(tmp_path / "killed") == top(straight) and top(straight)["budgets"] == [1e8, 2e8]


@pytest.mark.parametrize("flags, message", [
    (["--budgets", "1e8"], "two or more different budgets"),
    (["--budgets", "1e8,1e8"], "two or more different budgets"),
    (["--budgets", "1e8,-2"], "every budget must be a positive number"),
    (["--budgets", "1e8,big"], "is not a comma-separated list"),
])
def test_a_wrong_budget_list_is_one_line(flags, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        main([*TINY, *flags])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_budget_and_budgets_together_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="--budget and --budgets"):
        main([*TINY, "--budget", "1e8", "--budgets", "1e8,2e8", "--out", str(tmp_path)])
