"""The report stage on the golden comparison (tests/fixtures/comparison.json): what it writes and where the answer
sits, checked as behaviour (files, order, the numbers it carries), not as wording."""

import copy
from dataclasses import replace
import json
import re

import numpy as np
import pytest
from PIL import Image

from bench.analysis.claims import holm_interval
from bench.analysis.results import load_results
from bench.report.markdown import render, write_report
from bench.report.plots import plot_loss
from bench.report.wording import estimate_text, multiplier_text, p_text
from tests.analysis.records import run
from tests.helpers import GOLDEN

def test_the_report_writes_results_plots_and_markdown_that_link_only_existing_files(tmp_path):
    stored = json.loads(GOLDEN.read_text())
    report = write_report(tmp_path, load_results(copy.deepcopy(stored)))
    text = report.read_text()
    assert json.loads((tmp_path / "results.json").read_text()) == stored  # what it read is what it keeps
    linked = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert "gains_forest.png" in linked and "loss_vs_flops.png" in linked
    for name in linked:
        with Image.open(tmp_path / name) as image:
            assert image.size[0] > 100 and image.size[1] > 100


def test_the_answer_comes_first_and_carries_the_analysis_numbers(golden_results):
    results = golden_results
    text = render(results, [])
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings[0] == "Answer" and headings.index("Answer") < headings.index("Verdict")
    answer = text.split("## Answer", 1)[1].split("\n## ", 1)[0]
    leader = results.answer.leader
    if leader is not None:
        assert leader in answer
    if results.answer.multiplier:
        assert multiplier_text(results.answer.multiplier, reading="direct") in answer
    main = results.verdict.item(results.verdict.main)
    for gain in main.gains:  # each gain over its control, with its Holm p and the interval that agrees with it
        low, high = holm_interval(gain)
        assert estimate_text(gain.estimate, low, high, signed=True) in text
        assert p_text(gain.p_holm) in text


def test_every_objective_is_in_the_results_section(golden_results):
    results = golden_results
    at_budget = render(results, []).split("## 4.", 1)[1]
    rows = re.findall(r"^\| (\S+) +\|", at_budget.split("###", 1)[0], flags=re.M)
    assert rows[1:] == [summary.objective for summary in results.objectives]  # after the header row


def test_the_same_runs_draw_the_same_plot(tmp_path):
    # seaborn's bands are a bootstrap over the seeds: unseeded, every rendering of the same runs drew another PNG
    rng = np.random.default_rng(0)
    runs = [replace(r, curve=tuple(replace(point, metrics={"loss": float(loss)})
                                   for point, loss in zip(r.curve, rng.random(len(r.curve)))))
            for r in (run("mlm", seed, {"states": 0.8}, rng) for seed in range(5))]
    for name in ("first", "second"):
        plot_loss(runs, tmp_path / f"{name}.png")
    assert (tmp_path / "first.png").read_bytes() == (tmp_path / "second.png").read_bytes()


def test_less_compute_is_said_only_of_an_interval_above_one():
    from bench.analysis.findings import Answer, Family, Multiplier, Scale
    from bench.report.wording import answer_sentence

    def said(value, low, high, reading="direct"):
        m = Multiplier(multiplier=value, kind="=", reading=reading, seeds=[0, 1], ci_low=low, ci_high=high,
                       ci_low_kind="t", ci_high_kind="t", resamples=10, range=[0.01, 100.0])
        return answer_sentence(Answer(yardstick="y", label="y", leader="a", did_not_beat_control=[],
                                      beat_control=["a", "b"], scale=Scale(parameters=1, tokens=1.0, flops=1.0),
                                      separated=True, not_separated_from=[], runner_up="b", multiplier=m,
                                      family=Family("f", 1)))

    assert "would need 3× (2–4.5)" in said(3.0, 2.0, 4.5)
    for value, low, high in ((2.0, 0.58, 6.5), (0.71, 0.2, 2.4), (0.5, 0.3, 0.8)):  # holds 1, or lies below it
        text = said(value, low, high)
        assert "less compute" not in text and "would need" not in text and "no saving in compute" in text


def test_a_multiplier_without_an_interval_states_no_point():
    from bench.analysis.findings import Multiplier
    from bench.report.wording import multiplier_text

    one_seed = Multiplier(multiplier=6.7, kind="=", reading="direct", seeds=[1, 1], ci_low=None, ci_high=None,
                          ci_low_kind=None, ci_high_kind=None, resamples=0, range=[0.05, 1.0])
    assert multiplier_text(one_seed) == "not estimable (one seed: no interval)"


def test_a_frontier_states_a_fitted_quantity_only_with_an_interval_inside_its_sweep():
    from bench.analysis.findings import NOT_MEASURABLE, Crossover, Placed
    from bench.analysis.summaries import MultiplierAt
    from bench.report.frontier import crossover_text, frontier_multiplier_text, meets_text

    budgets = [1e11, 4e11, 1.6e12]
    crossing = lambda low, high: Crossover(pair=["mlm", "ar"], where="within", budget=3e11, ci_low=low,  # noqa: E731
                                           ci_high=high, lack_of_fit=True, contradicted=False)
    assert crossover_text(crossing(2e11, 5e11), budgets) == ("mlm and ar cross at 3e+11 FLOPs (95 % CI 2e+11–5e+11), "
                                                             "within the sweep [1e+11, 1.6e+12] FLOPs.")
    for low, high in ((0.02, 1.7e22), (None, None), (2e11, float("inf"))):  # reaching outside, open, unbounded
        text = crossover_text(crossing(low, high), budgets)
        assert "not estimable" in text and "no crossover is stated" in text and "cross at" not in text
    # a crossing that is not measurable, or that the measured means contradict, still gives its place only with an
    # interval inside the sweep: never the bare point
    for change in ({"outcome": NOT_MEASURABLE}, {"contradicted": True}):
        inside_sweep = crossover_text(replace(crossing(2e11, 5e11), **change), budgets)
        assert "3e+11 FLOPs (95 % CI 2e+11–5e+11)" in inside_sweep and "cross at" not in inside_sweep
        for low, high in ((0.02, 1.7e22), (None, None)):
            text = crossover_text(replace(crossing(low, high), **change), budgets)
            assert "not estimable within the sweep" in text and "3e+11" not in text and "cross at" not in text
    # a preset's claim about the crossing quotes it as the frontier does (mlm-vs-clm once quoted 5.97e+11 FLOPs with
    # an interval from 2e-56 to 2e+79)
    from bench.analysis.paper_findings import CrossoverFinding
    from bench.report.paper import finding_text
    claim = lambda meet: CrossoverFinding(claim="where mlm and ar cross", kind="crossover",  # noqa: E731
                                          outcome=NOT_MEASURABLE, crossover=meet, objectives=["mlm", "ar"],
                                          yardstick="neutral")
    assert finding_text(claim(crossing(2e11, 5e11)), budgets) == "the fits meet at 3e+11 FLOPs (95 % CI 2e+11–5e+11)"
    assert finding_text(claim(crossing(2.1e-56, 1.7e79)), budgets) == (
        "where the fits meet is not estimable within the sweep [1e+11, 1.6e+12] FLOPs (the crossing has a 95 % "
        "interval (2.1e-56–1.7e+79) that reaches outside it)")
    meets = lambda low, high: Placed(where="within", budget=1.22e11, ci_low=low, ci_high=high,  # noqa: E731
                                     lack_of_fit=False)
    assert meets_text(meets(1.1e11, 1.4e11), budgets) == "1.22e+11 FLOPs (95 % CI 1.1e+11–1.4e+11)"
    assert "1.22e+11" not in meets_text(meets(None, None), budgets)
    assert "1.22e+11" not in meets_text(meets(5e10, 1.4e11), budgets)
    row = lambda low, high: MultiplierAt(budget=4e11, multiplier=0.29, ci_low=low, ci_high=high,  # noqa: E731
                                         lack_of_fit=False, outside=False)
    assert frontier_multiplier_text(row(0.1, 0.8)) == "0.29× (0.1–0.8)"
    assert "0.29" not in frontier_multiplier_text(row(None, None)) and "not estimable" in frontier_multiplier_text(
        row(None, None))


def test_plot_bands_are_the_tables_t_intervals():
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    from bench.analysis.results import stat
    from bench.report.plots import BAND

    values = [0.50, 0.55, 0.61, 0.58, 0.52]
    expected = stat(values)
    assert BAND(pd.Series(values)) == pytest.approx((expected.mean - expected.ci95, expected.mean + expected.ci95))
    assert BAND(pd.Series([0.4])) == (0.4, 0.4)  # one seed: no interval, the band is the point
    figure, axes = plt.subplots()
    sns.lineplot(pd.DataFrame({"x": [1] * 5 + [2] * 5, "y": values + [v + 0.1 for v in values]}), x="x", y="y",
                 errorbar=BAND, ax=axes)
    band = axes.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(expected.mean - expected.ci95) and band.max() == pytest.approx(
        expected.mean + expected.ci95 + 0.1)
    plt.close(figure)


def test_a_presets_setting_and_this_runs_are_worded_from_their_facts():
    from bench.analysis.paper_findings import Setting
    from bench.report.paper import setting_text, this_run

    def setting(measured: str, values: dict) -> Setting:
        return Setting(claim="c", kind="setting", outcome="setting", measured=measured, values=values)

    assert setting_text(setting("passes", {"": [12.345]})) == \
        "this run: 12.3 passes over the training windows per run (mean)"
    assert setting_text(setting("passes", {})) == "this run: no finished run"
    assert setting_text(setting("pair_accuracy", {"mlm:pair=nsp": [0.91234], "mlm:pair=sop": [0.5]})) == \
        "mlm:pair=nsp 0.912; mlm:pair=sop 0.500"
    assert setting_text(setting("pair_accuracy", {})) == "no pair objective finished"
    assert setting_text(setting("positions", {"schedule mlm": [123456.0, 7890.4]})) == \
        "per run, mean over seeds: schedule mlm 123,456 token positions (7,890 supervised)"
    paper = type("Paper", (), dict(model="mini", budget_flops=5e11, comparison_budgets={"a": 1e11, "b": 4e11},
                                   corpus="synthetic", corpus_description="an embedded language", seeds=5))
    assert this_run(paper) == ("mini; budget 5e+11 FLOPs per run (per comparison: a 1e+11, b 4e+11); synthetic: an "
                               "embedded language; 5 seeds")
    assert "per comparison" not in this_run(type("One", (paper,), {"comparison_budgets": {}}))


def test_the_setup_says_never_swept_only_of_a_spec_the_tuning_never_tried(tmp_path):
    """The tuning behind the defaults tries ELECTRA at λ = 10 and at λ = 50 and keeps the pick alone in tuned.json: a
    comparison of the setting it did not pick must not say it was never swept while reports/tuning holds its
    trials."""
    from bench.common.tuned import TUNED, provenance, swept_specs
    from bench.orchestration.config import Config
    from bench.report.setup import rates_source

    tuning = json.loads((GOLDEN.parents[2] / "reports" / "tuning" / "results.json").read_text())
    tried = {trial["trial"] for tuned in tuning["objectives"].values() for trial in tuned["trials"]}
    assert {"electra", "electra:disc_weight=10"} <= tried and set(swept_specs()) == tried
    unpicked = "electra:disc_weight=10" if "electra:disc_weight=10" not in TUNED["objectives"] else "electra"
    lr = Config().training.lr
    found = provenance(lr, lr, TUNED["setting"], ["mlm", "ar", unpicked, "ar>mlm@0.25"])
    assert found["swept_not_picked"] == [unpicked] and found["never_swept"] == ["ar>mlm@0.25"]
    text = rates_source(found)
    assert f"swept but not picked: {unpicked};" in text and "never swept: ar>mlm@0.25;" in text
    assert f"never swept: {unpicked}" not in text
    # without the tuning's record only its picks are known to have been tried
    picks_only = provenance(lr, lr, TUNED["setting"], [unpicked], swept=swept_specs(tmp_path / "report.md"))
    assert picks_only["never_swept"] == [unpicked] and picks_only["swept_not_picked"] == []
    # a results.json written before the distinction reads as it was written
    old = {key: value for key, value in provenance(lr, lr, TUNED["setting"], ["mlm:rate=0.4"]).items()
           if key != "swept_not_picked"}
    assert rates_source(old).endswith("never swept: mlm:rate=0.4, which take their name's or the common rate; run "
                                      "python -m bench.tune for rates of its own)")


def test_an_interval_beside_a_holm_outcome_excludes_0_exactly_when_holm_rejects():
    """Issue 59's two cases: downstream-docs printed AR's gain as +0.023 (+0.001 to +0.045) beside "does not beat its
    control" (Holm p 0.12), mlm-vs-clm MLM 40 % against CLM as +0.020 (+0.001 to +0.038) beside "not separated"
    (Holm p 0.48). Every interval the reports print beside a Holm outcome must agree with it."""
    from bench.analysis.claims import family, significant
    from bench.analysis.findings import Gain
    from bench.analysis.paper_findings import ClaimTest
    from bench.report.paper import finding_text
    from scipy import stats

    rng = np.random.default_rng(0)
    for _ in range(200):  # families of 1 to 8 tests, p-values spread over the range where outcomes turn
        size = int(rng.integers(1, 9))
        df, se = rng.uniform(3, 60, size), rng.uniform(0.005, 0.05, size)
        estimate = rng.normal(0, 3, size) * se
        tests = [Gain(objective=f"o{i}", control="c", estimate=float(e), ci_low=None, ci_high=None,
                      p=float(2 * stats.t.sf(abs(e) / s_, d)), se=float(s_), df=float(d), test_sampling=True,
                      share_of_gain=None) for i, (e, s_, d) in enumerate(zip(estimate, se, df))]
        for test in family("f", tests)[0]:
            low, high = holm_interval(test)
            assert (low > 0 or high < 0) == significant(test), test
            unadjusted = stats.t.ppf(0.975, test.df) * test.se
            assert high - low >= 2 * unadjusted - 1e-12  # never narrower than the 95 % interval
    # the second case, as the preset's evidence prints it
    claim = ClaimTest(claim="MLM (40 %) beats CLM", kind="beats", objectives=["mlm:rate=0.4", "ar"],
                      yardstick="neutral_average_frozen", mirrors=[], estimate=0.0197, ci_low=0.001, ci_high=0.038,
                      p=0.0369, se=0.0093, df=43.0, test_sampling=True, means=[0.708, 0.688], p_holm=0.48,
                      outcome="not separated")
    text = finding_text(claim, [])
    low, high = (float(x) for x in re.search(r"difference \+0.020 \(([-+.\d]+) to ([-+.\d]+)\)", text).groups())
    assert low < 0 < high and "Holm p = 0.48" in text
    comparable = replace(claim, kind="comparable", margin=0.035, outcome="reproduced", p_holm=0.01)
    assert "(+0.001 to +0.038) (95 %, unadjusted)" in finding_text(comparable, [])


def test_the_verdict_tables_print_holm_adjusted_intervals_of_gains_and_comparisons():
    """On the committed downstream-docs results: a gain whose unadjusted 95 % interval lies above 0 but which Holm
    does not call (mlm's and ar's on `replaced`, fine-tuned) is printed with its Holm-adjusted interval, which holds
    0; a gain that beats its control, with one that does not."""
    from bench.analysis.claims import beats_control

    root = GOLDEN.parents[2]
    results = load_results(json.loads((root / "reports" / "downstream-docs" / "results.json").read_text()))
    text = render(results, [])
    assert "gain over control (Holm-adjusted CI)" in text and "gain over control (95 % CI)" not in text
    for item in results.verdict.yardsticks:
        for gain in item.gains:
            low, high = holm_interval(gain)
            assert estimate_text(gain.estimate, low, high, signed=True) in text
            if gain.estimate > 0:  # a gain beats its control exactly where its printed interval lies above 0
                assert (low > 0) == beats_control(gain)
    # the case the issue found: a reader saw an interval excluding 0 under a sentence that says "does not beat"
    unadjusted_above_zero = [gain for item in results.verdict.yardsticks for gain in item.gains
                             if gain.ci_low > 0 and not beats_control(gain)]
    assert unadjusted_above_zero
    for gain in unadjusted_above_zero:
        low, high = holm_interval(gain)
        assert low < 0 and estimate_text(gain.estimate, low, high, signed=True) in text
        assert estimate_text(gain.estimate, gain.ci_low, gain.ci_high, signed=True) not in text
