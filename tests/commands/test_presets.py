import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from scipy.stats import t as scipy_t

from backbone import ConfigError
from bench.analysis import presets as presets_module
from bench.analysis.budgets import budget_folder
from bench.analysis.findings import Family, Multiplier, Unread, Verdict, Wins, from_json, to_json
from bench.analysis.judges import Evidence, claim, claim_outcome, judge, multiplier_claim
from bench.analysis.paper_findings import Paper, PaperFinding
from bench.analysis.presets import PRESETS, PaperTable, Preset, Variant
from bench.common.cli import run
from bench.compare import main as compare_main, parse_config
from objectives import parse_objective_list
from tests.analysis.records import results

SOURCES = Path(__file__).resolve().parents[2] / "docs" / "sources.md"  # the published figures, with their sources


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_parses_and_names_its_paper(name):
    preset = PRESETS[name]
    config = parse_config(["--preset", name])
    specs = parse_objective_list(config.training.objectives)  # every spec is valid
    assert config.training.seeds == preset.flags["seeds"] >= 5
    # where in the paper: a table, a section, or the abstract for claims quoted from it
    assert re.search(r"\d{4}", preset.paper.citation) and re.search(r"Table|Section|abstract", preset.paper.citation)
    assert preset.paper.claim and preset.paper.setting
    for row, values in preset.paper.rows:
        assert len(values) == len(preset.paper.columns), row
    variants = {variant.name for variant in preset.variants}
    if config.training.budgets:  # a budget sweep's comparisons are its variants, one folder per budget
        variants = {budget_folder(budget) for budget in config.training.budgets}
    for label, target in preset.rows:
        variant, _, spec = target.rpartition("/")
        assert spec in specs and (variant in variants if variants else not variant), target
    assert preset.judge.__name__.startswith("judge")


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_quoted_paper_value_stands_in_docs_sources_with_its_paper(name):
    """A preset's report prints the paper's numbers beside this run's: each must be in the project's own list of
    published figures (docs/sources.md), under its paper, as written there."""
    sources, paper = SOURCES.read_text(), PRESETS[name].paper
    author = paper.citation.split()[0]  # "Devlin", "Raffel", "Gisserot-Boukhlef", ...
    assert author in sources, (name, author)
    quoted = [value for _, values in paper.rows for value in values if value is not None]
    # the claim and the setting print numbers too ("79.9 vs 75.1 at 1.4e18 FLOPs"), besides section numbers
    quoted += [float(text) for text in re.findall(r"(?<![\w.])(?<!Section )\d+\.\d+(?:e\d+)?|(?<![\w.])\d+e\d+",
                                                  paper.claim + " " + paper.setting)]
    for value in quoted:
        written = {f"{value:g}".replace("e+", "e"), f"{value:.1f}", f"{value:.2f}"}
        assert any(re.search(rf"(?<![\d.]){re.escape(text)}(?![\d])", sources) for text in written), (name, value)


def test_explicit_flags_override_a_preset_and_its_variants_are_its_own():
    config = parse_config(["--preset", "nsp-sop", "--seeds", "2", "--budget", "1e10"])
    assert config.training.seeds == 2 and config.training.budget == 1e10
    assert config.training.objectives == "mlm,mlm:pair=nsp,mlm:pair=sop" and config.output.preset == "nsp-sop"
    assert config.yardsticks.downstream == "synthetic:states,synthetic:topic,synthetic:same-source,synthetic:order"
    with pytest.raises(ConfigError, match="runs one comparison per --budget"):
        parse_config(["--preset", "electra-efficiency", "--budget", "1e10"])
    with pytest.raises(ConfigError, match="unknown --preset 'bert'"):
        parse_config(["--preset", "bert"])
    with pytest.raises(ConfigError, match="give one of them"):
        parse_config(["--preset", "nsp-sop", "--config", "x.json"])


def test_preset_list_names_every_preset(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_config(["--preset", "list"])
    assert exit_.value.code == 0
    printed = capsys.readouterr().out
    for name, preset in PRESETS.items():
        assert f"{name}: " in printed and preset.paper.citation in printed


def judged(finals: dict, controls: dict, claims) -> tuple[dict[str, PaperFinding], Family]:
    """The findings of `claims(evidence)` on a hand-made comparison (tests/analysis/records.py), by claim, and
    their family."""
    found, named = judge(claims(Evidence({"": results(finals, controls)})), "test claims")
    return {f.claim: f for f in found}, named


@pytest.mark.slow
def test_a_claim_is_reproduced_only_where_holm_separates_it_and_both_beat_their_controls():
    finals = {"a": {"t1": 0.9, "t2": 0.9}, "b": {"t1": 0.75, "t2": 0.75}, "c": {"t1": 0.5, "t2": 0.5},
              "d": {"t1": 0.76, "t2": 0.74}}
    found, named = judged(finals, {"t1": 0.5, "t2": 0.5}, lambda e: [
        claim(e, "a > b", e.main(), ("", "a"), ("", "b")), claim(e, "b > a", e.main(), ("", "b"), ("", "a")),
        claim(e, "b > d", e.main(), ("", "b"), ("", "d")), claim(e, "a > c", e.main(), ("", "a"), ("", "c")),
        claim(e, "e > a", e.main(), ("", "e"), ("", "a"))])
    assert found["a > b"].outcome == "reproduced" and found["b > a"].outcome == "not reproduced"
    assert found["b > d"].outcome == "not separated"
    assert found["a > c"].outcome == "not measurable"  # c does not beat its untrained control
    assert found["e > a"].outcome == "not measured"
    # the not-measurable claim counts in the family as tested with p = 1 (the gate does not shrink it); the claim
    # about a setting that never ran does not
    assert named.size == 4 and found["a > b"].p_holm >= found["a > b"].p
    assert found["a > b"].objectives == ["a", "b"] and found["a > b"].yardstick == "neutral_average_frozen"


@pytest.mark.slow
def test_comparable_is_non_inferiority_within_the_margin():
    finals = {"a": {"t1": 0.80, "t2": 0.80}, "b": {"t1": 0.80, "t2": 0.80}, "c": {"t1": 0.60, "t2": 0.60}}
    found, _ = judged(finals, {"t1": 0.4, "t2": 0.4}, lambda e: [
        claim(e, "a ~ b", e.main(), ("", "a"), ("", "b"), "comparable"),
        claim(e, "c ~ b", e.main(), ("", "c"), ("", "b"), "comparable")])
    assert found["a ~ b"].outcome == "reproduced" and found["a ~ b"].margin == pytest.approx(0.04, rel=0.05)
    # c's shortfall is far beyond the margin, its whole interval with it: the data contradict the claim
    assert found["c ~ b"].outcome == "not reproduced" and found["c ~ b"].ci_high < -found["c ~ b"].margin


def test_a_multiplier_claim_is_tested_on_the_log_scale_against_its_factor(golden_results):
    def evidence(m: dict) -> Evidence:
        found = Verdict(baseline="mlm", main="neutral_average_frozen", yardsticks=[],
                        multipliers=[from_json(Multiplier | Unread, m)], wins=Wins(0, {}), signal_density_ratio={})
        return Evidence({v: replace(golden_results, verdict=found, runs=[])
                         for v in ("quarter", "default", "four-times")})
    base = {"objective": "electra", "against": "mlm", "yardstick": "neutral_average_frozen"}
    read = {"kind": "=", "reading": "direct", "seeds": [5, 5], "ci_low": 5.0, "ci_high": 12.0, "ci_low_kind": "=",
            "ci_high_kind": "=", "resamples": 2000, "range": [0.01, 1.0], "df": 4}
    five = multiplier_claim(evidence({**base, **read, "multiplier": 8.0, "log_se": 0.1}), "x", "default", "electra",
                            "mlm", 4)
    assert five.p == pytest.approx(scipy_t.sf(math.log(2) / 0.1, 4))
    judged_at = lambda p_holm, high: claim_outcome(  # noqa: E731
        replace(five, p_holm=p_holm, multiplier=replace(five.multiplier, ci_high=high)))
    assert judged_at(0.01, 12.0) == "reproduced" and judged_at(0.5, 12.0) == "inconclusive"
    assert judged_at(0.5, 3.9) == "not reproduced"  # the whole interval below the factor: contradicted, not unclear
    unmeasured = evidence({**base, "outcome": "not measurable"})
    assert multiplier_claim(unmeasured, "x", "default", "electra", "mlm", 4).outcome == "not measurable"


SMALL = ["--model", "tiny", "--seq-len", "32", "--eval-points", "2", "--quiet", "--no-probes", "--downstream",
         "synthetic:states,size=32,synthetic:topic,size=32", "--finetune-steps", "3", "--finetune-lrs", "1e-3"]


@pytest.mark.slow
def test_a_preset_run_writes_the_paper_beside_this_run(tmp_path):
    out = tmp_path / "static"
    run(compare_main, ["--preset", "static-vs-dynamic", "--budget", "3e9", "--seeds", "2", "--data",
                       "synthetic:train=64,heldout=160", *SMALL, "--out", str(out)])
    found = json.loads((out / "results.json").read_text())
    paper = found["paper"]
    assert to_json(from_json(Paper, paper)) == paper  # the paper's layout reads back to the same record
    assert paper["preset"] == "static-vs-dynamic" and [f["outcome"] for f in paper["findings"]][0] == "setting"
    assert {row["spec"] for row in paper["ours"]} == {"mlm", "mlm:static=10"}
    assert paper["family"]["family"] == "static-vs-dynamic: the paper's claims"
    for row in paper["ours"]:  # our numbers are the verdict's numbers
        verdict = next(y for y in found["verdict"]["yardsticks"] if y["yardstick"] == "neutral_average_frozen")
        mine = next(r for r in verdict["rows"] if r["objective"] == row["spec"])
        assert row["neutral_average_frozen"]["mean"] == pytest.approx(mine["estimate"])
    for finding in paper["findings"][1:]:  # every claim: both sides named, on a yardstick, with its outcome
        assert finding["objectives"] and finding["yardstick"] and "p_holm" in finding or finding["p"] is None
    report = (out / "report.md").read_text()
    assert "## Paper versus this run" in report and "78.7" in report and "Liu et al. 2019 (RoBERTa)" in report
    assert report.index("## Paper versus this run") < report.index("## Verdict")


@pytest.mark.slow
def test_a_preset_with_variants_runs_one_comparison_each(tmp_path, monkeypatch):
    budgets = Preset("two-budgets", "mlm at two budgets", {"objectives": "mlm", "seeds": 2},
                     PaperTable("Nobody 2024, Table 1", "More is better.", ("score",), (("small", (1.0,)),), "none"),
                     (("small", "small/mlm"), ("large", "large/mlm")),
                     lambda evidence: [claim(evidence, "large > small", evidence.main(), ("large", "mlm"),
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


@pytest.mark.slow
def test_a_preset_over_a_budget_sweep_judges_every_budget_and_the_frontier(tmp_path, monkeypatch):
    sweep = Preset("sweep", "mlm and ar at two budgets", {"objectives": "mlm,ar", "budgets": "2e9,4e9", "seeds": 2},
                   PaperTable("Nobody 2024, Table 1", "More is better.", ("score",), (("small", (1.0,)),), "none"),
                   (("small", "budget-2e+09/mlm"), ("large", "budget-4e+09/mlm")),
                   lambda evidence: [claim(evidence, "large > small", evidence.main(), ("budget-4e+09", "mlm"),
                                           ("budget-2e+09", "mlm"))],
                   frontier_pairs=(("mlm", "ar"),))
    monkeypatch.setitem(presets_module.PRESETS, "sweep", sweep)
    out = tmp_path / "sweep"
    run(compare_main, ["--preset", "sweep", "--data", "synthetic:train=64,heldout=160", *SMALL, "--out", str(out)])
    frontier = json.loads((out / "results.json").read_text())["frontier"]
    assert frontier["budgets"] == [2e9, 4e9]
    paper = frontier["paper"]
    assert to_json(from_json(Paper, paper)) == paper  # crossovers included
    assert [row["variant"] for row in paper["ours"]] == ["budget-2e+09", "budget-4e+09"]
    assert paper["findings"][0]["outcome"] != "not measured"  # the judge read both budgets' comparisons
    crossing = [f for f in paper["findings"] if f["claim"] == "where mlm and ar cross (neutral_average_frozen)"]
    assert len(crossing) == 1 and crossing[0]["kind"] == "crossover"
    report = (out / "report.md").read_text()
    assert "## Paper versus this run" in report and "# The efficiency frontier" in report


@pytest.mark.slow
def test_the_mlm_against_clm_judge_reads_every_budget():
    from bench.analysis.judges import CLM_PEERS, judge_clm
    tasks = {"t1": 0.5, "t2": 0.5}
    comparisons = {variant: results({spec: {t: level + shift for t in tasks}
                                     for spec, level in zip(CLM_PEERS, (0.75, 0.6, 0.85, 0.8, 0.76, 0.74))}, tasks,
                                    seed=i)
                   for i, (variant, shift) in enumerate((("budget-1e+09", 0.0), ("budget-4e+09", 0.1)))}
    found, named = judge(judge_clm(Evidence(comparisons)), "clm")
    claims = {f.claim: f for f in found}
    assert list(claims)[0] == "MLM (40 %) beats CLM at equal FLOPs (1e+09)" and len(claims) == 2 * 4 + 1
    assert named.size == 9 and all(f.yardstick == "neutral_average_frozen" for f in found)  # the main yardstick
    assert claims["MLM (40 %) beats CLM at equal FLOPs (4e+09)"].outcome == "not reproduced"  # CLM is ahead
    assert claims["CLM is the more data-efficient: it leads MLM at the smallest budget (1e+09)"].outcome == \
        "reproduced"
