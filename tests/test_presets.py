import json
import re
from pathlib import Path

import pytest
from scipy.stats import t as scipy_t

from backbone import ConfigError
from bench.analysis import presets as presets_module
from bench.analysis.judges import Evidence, comparable, compare
from bench.analysis.presets import PRESETS, PaperTable, Preset, Variant
from bench.analysis.stats import welch_difference_interval
from bench.cli import run
from bench.compare import main as compare_main, parse_args
from bench.report.frontier import budget_folder
from objectives import parse_objective_list

ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "ANCHORS.md"


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_parses_and_names_its_paper(name):
    preset = PRESETS[name]
    args = parse_args(["--preset", name])
    specs = parse_objective_list(args.objectives)  # every spec is valid
    assert args.seeds == preset.flags["seeds"]
    # where in the paper: a table, a section, or the abstract for claims quoted from it
    assert re.search(r"\d{4}", preset.paper.citation) and re.search(r"Table|Section|abstract", preset.paper.citation)
    assert preset.paper.claim.endswith(".") and preset.paper.setting
    for row, values in preset.paper.rows:
        assert len(values) == len(preset.paper.columns), row
    variants = {variant.name for variant in preset.variants}
    if args.budgets:  # a budget sweep's comparisons are its variants, one folder per budget
        variants = {budget_folder(budget) for budget in args.budgets}
    for label, target in preset.rows:
        variant, _, spec = target.rpartition("/")
        assert spec in specs and (variant in variants if variants else not variant), target
    assert preset.judge.__name__.startswith("judge")


@pytest.mark.skipif(not ANCHORS.is_file(), reason="the workplace's ../shared/ANCHORS.md is not beside this checkout")
@pytest.mark.parametrize("name", list(PRESETS))
def test_every_quoted_paper_value_is_in_the_reference_facts(name):
    anchors = ANCHORS.read_text()
    for row, values in PRESETS[name].paper.rows:
        for value in values:
            if value is None:
                continue
            written = [f"{value:g}", f"{value:.1f}", f"{value:.2f}", f"{value:.2e}".replace("e+", " × 10")]
            mantissa = f"{value:.3g}".split("e")[0]
            assert any(text in anchors for text in written) or mantissa in anchors, (name, row, value)


def test_explicit_flags_override_a_preset_and_its_variants_are_its_own():
    args = parse_args(["--preset", "nsp-sop", "--seeds", "2", "--budget", "1e10"])
    assert args.seeds == 2 and args.budget == 1e10 and args.objectives == "mlm,mlm:pair=nsp,mlm:pair=sop"
    assert args.downstream == "synthetic:same-source,synthetic:order"
    with pytest.raises(ConfigError, match="runs one comparison per --budget"):
        parse_args(["--preset", "electra-efficiency", "--budget", "1e10"])
    with pytest.raises(ConfigError, match="unknown --preset 'bert'"):
        parse_args(["--preset", "bert"])
    with pytest.raises(ConfigError, match="give one of them"):
        parse_args(["--preset", "nsp-sop", "--config", "x.json"])


def test_preset_list_names_every_preset(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--preset", "list"])
    assert exit_.value.code == 0
    printed = capsys.readouterr().out
    for name, preset in PRESETS.items():
        assert f"{name}: " in printed and preset.paper.citation in printed


def evidence(values: dict[str, list[float]]) -> Evidence:
    return Evidence({}, {("", spec, "y"): v for spec, v in values.items()})


def test_a_direction_is_reproduced_only_when_the_seeds_separate_it():
    separated = evidence({"a": [0.80, 0.81, 0.82], "b": [0.70, 0.71, 0.72]})
    assert compare(separated, "a > b", "y", ("", "a"), ("", "b"))["outcome"] == "reproduced"
    assert compare(separated, "b > a", "y", ("", "b"), ("", "a"))["outcome"] == "not reproduced"
    noisy = evidence({"a": [0.80, 0.60, 0.90], "b": [0.70, 0.75, 0.65]})
    assert compare(noisy, "a > b", "y", ("", "a"), ("", "b"))["outcome"] == "direction only, not significant"
    assert compare(noisy, "b > a", "y", ("", "b"), ("", "a"))["outcome"].startswith("not reproduced (opposite")
    assert compare(separated, "c > a", "y", ("", "c"), ("", "a"))["outcome"] == "not measured"


def test_a_claim_on_a_yardstick_that_did_not_beat_its_control_is_not_measurable():
    separated = {"a": [0.80, 0.81, 0.82], "b": [0.70, 0.71, 0.72]}
    for measures, outcome in ((False, "not measurable at this scale"), (True, "reproduced"), (None, "reproduced")):
        found = evidence(separated)
        found.results[""] = {"verdict": {"yardsticks": [{"yardstick": "y", "measures_pretraining": measures}]}}
        finding = compare(found, "a > b", "y", ("", "a"), ("", "b"))
        assert finding["outcome"] == outcome
        assert comparable(found, "a ~ b", "y", ("", "a"), ("", "b"))["outcome"] == outcome
    unmeasured = evidence(separated)
    unmeasured.results[""] = {"verdict": {"yardsticks": [{"yardstick": "y", "measures_pretraining": False}]}}
    assert "beats its untrained control" in compare(unmeasured, "a > b", "y", ("", "a"), ("", "b"))["evidence"]


def test_comparable_is_non_inferiority_within_the_margin():
    close = evidence({"a": [0.700, 0.701, 0.702], "b": [0.701, 0.702, 0.703]})  # behind by 0.001, CI ± 0.002
    assert comparable(close, "a ~ b", "y", ("", "a"), ("", "b"), margin=0.02)["outcome"] == "reproduced"
    wide = evidence({"a": [0.5, 0.7, 0.9], "b": [0.6, 0.7, 0.8]})
    assert comparable(wide, "a ~ b", "y", ("", "a"), ("", "b"), margin=0.02)["outcome"].startswith("inconclusive")
    behind = evidence({"a": [0.60, 0.61, 0.62], "b": [0.70, 0.71, 0.72]})
    assert comparable(behind, "a ~ b", "y", ("", "a"), ("", "b"), margin=0.02)["outcome"] == "not reproduced"
    ahead = evidence({"a": [0.80, 0.81, 0.82], "b": [0.70, 0.71, 0.72]})  # better is comparable or better
    assert comparable(ahead, "a ~ b", "y", ("", "a"), ("", "b"), margin=0.02)["outcome"] == "reproduced"


def test_the_difference_interval_is_welchs_by_hand():
    a, b = [0.61, 0.66, 0.58, 0.70], [0.52, 0.55, 0.57]
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    var = lambda v: sum((x - mean(v)) ** 2 for x in v) / (len(v) - 1)  # noqa: E731
    se2 = var(a) / len(a) + var(b) / len(b)
    df = se2 ** 2 / ((var(a) / len(a)) ** 2 / (len(a) - 1) + (var(b) / len(b)) ** 2 / (len(b) - 1))
    half = scipy_t.ppf(0.975, df) * se2 ** 0.5
    low, high = welch_difference_interval(a, b)
    assert (low, high) == pytest.approx((mean(a) - mean(b) - half, mean(a) - mean(b) + half))
    assert all(x != x for x in welch_difference_interval([0.5], b))  # one seed: no interval


SMALL = ["--model", "tiny", "--seq-len", "32", "--eval-points", "2", "--no-probe-curves", "--quiet"]


def test_a_preset_run_writes_the_paper_beside_this_run(tmp_path):
    out = tmp_path / "static"
    run(compare_main, ["--preset", "static-vs-dynamic", "--budget", "3e9", "--seeds", "2", "--data",
                       "synthetic:train=64,heldout=160", *SMALL, "--out", str(out)])
    results = json.loads((out / "results.json").read_text())
    paper = results["paper"]
    assert paper["preset"] == "static-vs-dynamic" and [f["outcome"] for f in paper["findings"]][0] == "setting"
    assert {row["spec"] for row in paper["ours"]} == {"mlm", "mlm:static=10"}
    for row in paper["ours"]:  # our numbers are the verdict's numbers
        verdict = next(y for y in results["verdict"]["yardsticks"] if y["yardstick"] == "hidden_state_share")
        mine = next(r for r in verdict["rows"] if r["objective"] == row["spec"])
        assert row["hidden_state_share"]["mean"] == pytest.approx(mine["mean"])
    report = (out / "report.md").read_text()
    assert "## Paper versus this run" in report and "78.7" in report and "Liu et al. 2019 (RoBERTa)" in report
    assert report.index("## Paper versus this run") < report.index("## Verdict")


def test_a_preset_with_variants_runs_one_comparison_each(tmp_path, monkeypatch):
    budgets = Preset("two-budgets", "mlm at two budgets", {"objectives": "mlm", "seeds": 2},
                     PaperTable("Nobody 2024, Table 1", "More is better.", ("score",), (("small", (1.0,)),), "none"),
                     (("small", "small/mlm"), ("large", "large/mlm")), ("hidden_state_share",),
                     lambda evidence: [compare(evidence, "large > small", "hidden_state_share", ("large", "mlm"),
                                               ("small", "mlm"))],
                     variants=(Variant("small", {"budget": 2e9}), Variant("large", {"budget": 4e9})))
    monkeypatch.setitem(presets_module.PRESETS, "two-budgets", budgets)
    out = tmp_path / "budgets"
    run(compare_main, ["--preset", "two-budgets", "--data", "synthetic:train=64,heldout=160", *SMALL, "--out",
                       str(out)])
    for name, budget in (("small", 2e9), ("large", 4e9)):
        assert json.loads((out / name / "results.json").read_text())["budget_flops"] == budget
    paper = json.loads((out / "results.json").read_text())["paper"]
    assert [row["variant"] for row in paper["ours"]] == ["small", "large"]
    assert paper["findings"][0]["outcome"] != "not measured"
    report = (out / "report.md").read_text()
    assert "[small](small/report.md)" in report and "Nobody 2024" in report


def test_the_electra_efficiency_budgets_are_quarter_one_and_four_times_the_default():
    from bench.analysis.judges import BUDGETS
    from bench.compare import DEFAULT_BUDGET
    assert dict(BUDGETS) == {"quarter": DEFAULT_BUDGET / 4, "default": DEFAULT_BUDGET, "four-times": 4 * DEFAULT_BUDGET}
    assert "mlm:rate=0.4" in PRESETS["electra-efficiency"].flags["objectives"].split(",")


def test_a_preset_over_a_budget_sweep_judges_every_budget_and_the_frontier(tmp_path, monkeypatch):
    sweep = Preset("sweep", "mlm and ar at two budgets", {"objectives": "mlm,ar", "budgets": "2e9,4e9", "seeds": 2},
                   PaperTable("Nobody 2024, Table 1", "More is better.", ("score",), (("small", (1.0,)),), "none"),
                   (("small", "budget-2e+09/mlm"), ("large", "budget-4e+09/mlm")), ("hidden_state_share",),
                   lambda evidence: [compare(evidence, "large > small", "hidden_state_share",
                                             ("budget-4e+09", "mlm"), ("budget-2e+09", "mlm"))],
                   frontier_pairs=(("mlm", "ar"),))
    monkeypatch.setitem(presets_module.PRESETS, "sweep", sweep)
    out = tmp_path / "sweep"
    run(compare_main, ["--preset", "sweep", "--data", "synthetic:train=64,heldout=160", *SMALL, "--out", str(out)])
    frontier = json.loads((out / "results.json").read_text())["frontier"]
    assert frontier["budgets"] == [2e9, 4e9]
    paper = frontier["paper"]
    assert [row["variant"] for row in paper["ours"]] == ["budget-2e+09", "budget-4e+09"]
    assert paper["findings"][0]["outcome"] != "not measured"  # the judge read both budgets' comparisons
    crossing = [f for f in paper["findings"] if f["claim"] == "where mlm and ar cross (hidden_state_share)"]
    assert len(crossing) == 1 and crossing[0]["outcome"] in ("measured", "not measurable at this scale")
    report = (out / "report.md").read_text()
    assert "## Paper versus this run" in report and "# The efficiency frontier" in report


def test_the_mlm_against_clm_judge_reads_every_budget():
    from bench.analysis.judges import CLM_PEERS, CLM_YARDSTICK, judge_clm
    values = {}
    for variant, shift in (("budget-1e+09", 0.0), ("budget-4e+09", 0.1)):
        for spec, level in zip(CLM_PEERS, (0.6, 0.5, 0.7, 0.65, 0.61, 0.59)):
            values[(variant, spec, CLM_YARDSTICK)] = [level + shift + d for d in (-0.01, 0.0, 0.01)]
    findings = judge_clm(Evidence({"budget-4e+09": {}, "budget-1e+09": {}}, values))
    claims = [f["claim"] for f in findings]
    assert claims[0] == "MLM (40 %) beats CLM at equal FLOPs (1e+09)" and len(claims) == 2 * 4 + 1
    outcome = {f["claim"]: f["outcome"] for f in findings}
    assert outcome["MLM (40 %) beats CLM at equal FLOPs (4e+09)"] == "not reproduced"  # CLM is ahead here
    assert outcome["CLM → MLM (ar>mlm:rate=0.4@0.25) beats MLM alone at equal FLOPs (1e+09)"] == "reproduced"
    assert outcome["CLM is the more data-efficient: it leads MLM at the smallest budget (1e+09)"] == "reproduced"


def test_on_text_the_mlm_against_clm_judge_reads_the_labelled_tasks():
    from bench.analysis.judges import judge_clm
    values = {("budget-1e+09", spec, name): [level + d for d in (-0.01, 0.0, 0.01)]
              for name in ("order (finetuned)", "order (frozen)")
              for spec, level in (("mlm:rate=0.4", 0.6), ("ar", 0.5))}
    evidence = Evidence({"budget-1e+09": {}}, values)
    assert evidence.read_on(("hidden_state_share",)) == ["order (finetuned)", "order (frozen)"]
    findings = {f["claim"]: f["outcome"] for f in judge_clm(evidence)}
    assert findings["MLM (40 %) beats CLM at equal FLOPs (1e+09, order (finetuned))"] == "reproduced"
    assert not any("frozen" in claim for claim in findings)  # the fine-tuned task is the claim's yardstick


def test_the_electra_judge_reads_electras_own_curve_where_mlms_run_never_got_there():
    from bench.analysis.judges import judge_electra
    bound = {"objective": "electra", "yardstick": "replaced_word_share", "multiplier": 1.0, "kind": ">",
             "text": "> 1× (not reached within the run)"}
    readings = {"quarter": {**bound, "reversed": {"multiplier": 5.0, "kind": "=", "text": "5×"}},
                "default": {**bound, "reversed": {"multiplier": 1.1, "kind": "=", "text": "1.1×"}},
                "four-times": bound}
    results = {variant: {"verdict": {"multipliers": [m], "signal_density_ratio": {"electra": 7.4}}}
               for variant, m in readings.items()}
    found = {f["claim"]: f["outcome"] for f in judge_electra(Evidence(results)) if "multiplier" in f["claim"]}
    claim = "ELECTRA's compute multiplier over MLM is about 4× or more ({}, replaced_word_share)"
    assert found[claim.format("2e+11")] == "reproduced"  # 5× read off ELECTRA's own curve
    assert found[claim.format("8e+11")] == "not reproduced"
    assert found[claim.format("3.2e+12")].startswith("inconclusive (at least this much: MLM's run never reached")
