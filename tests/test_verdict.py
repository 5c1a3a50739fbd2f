import json
import math

import numpy as np
import pytest

from bench.analysis.verdict import (beats_control, compute_multiplier, format_multiplier, gain_over_control, holm,
                                    holm_gains, interpolate_flops, reversed_multiplier, rise_with_compute,
                                    signal_density_ratio, two_way_ci, yardstick_verdict)

BUDGET = 1e12
CHECKPOINTS = BUDGET * np.logspace(-2, 0, 7)  # 1% of the budget to the budget, log-spaced like the runs'


def log_linear(higher_is_better: bool, offset: float = 0.0):
    """Exactly linear in log-FLOPs, so linear-in-log interpolation is exact: accuracy-like rises, loss-like falls."""
    d = 0.05 if higher_is_better else -0.3
    return lambda flops: 1.0 + offset + d * np.log(flops / CHECKPOINTS[0])


def curve_of(value, checkpoints=CHECKPOINTS) -> list[tuple[float, float]]:
    return [(float(f), float(value(f))) for f in checkpoints]


def dumps(result: dict) -> str:
    if "sentence" in result:  # one plain sentence
        assert result["sentence"].endswith(".") and ". " not in result["sentence"]
    return json.dumps(result, allow_nan=False)


# --- Holm ----------------------------------------------------------------------------------------------------------

def test_holm_hand_computed():
    # sorted 0.01, 0.03, 0.04 → 3·0.01 = 0.03, 2·0.03 = 0.06, max(0.06, 1·0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])


def test_holm_none_is_not_a_comparison_and_cap_at_one():
    adjusted = holm([None, 0.01, float("nan"), 0.04, 0.03])
    assert adjusted[0] is None and adjusted[2] is None
    assert adjusted[1:2] + adjusted[3:] == pytest.approx([0.03, 0.06, 0.06])  # m = 3, not 5
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([]) == [] and holm([None]) == [None]


# --- interpolation and the multiplier ------------------------------------------------------------------------------

@pytest.mark.parametrize("higher_is_better", [True, False])
@pytest.mark.parametrize("k", [0.3, 0.5, 0.037])
def test_multiplier_exact_on_log_linear_curves(higher_is_better, k):
    value = log_linear(higher_is_better)
    target = float(value(k * BUDGET))
    assert interpolate_flops(curve_of(value), target, higher_is_better) == ("=", pytest.approx(k * BUDGET, rel=1e-9))
    # seeds offset symmetrically average back to the same mean curve and the same target
    curves = [curve_of(log_linear(higher_is_better, e)) for e in (-0.02, 0.0, 0.02)]
    result = compute_multiplier(curves, [target - 0.01, target + 0.01], BUDGET, higher_is_better, resamples=200)
    assert result["kind"] == "=" and result["multiplier"] == pytest.approx(k, rel=1e-9)
    assert result["ci_low"] < k < result["ci_high"]
    assert result["text"] == format_multiplier(result)
    dumps(result)


def test_multiplier_power_law_within_tolerance():
    # loss = a·F^-b is convex in log F, so linear-in-log interpolation is only approximately right between points
    checkpoints = BUDGET * np.logspace(-3, 0, 13)
    value = lambda flops: 4.0 * (flops / 1e9) ** -0.1  # noqa: E731
    for k in (0.3, 0.5):
        result = compute_multiplier([curve_of(value, checkpoints)], [float(value(k * BUDGET))], BUDGET,
                                    higher_is_better=False)
        assert result["kind"] == "=" and result["multiplier"] == pytest.approx(k, rel=0.02)


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_curves_that_never_meet_give_bounds(higher_is_better):
    value = log_linear(higher_is_better)
    better = 1 if higher_is_better else -1
    beyond, before = float(value(10 * BUDGET)), float(value(0.001 * BUDGET))
    assert interpolate_flops(curve_of(value), beyond, higher_is_better) == (">", pytest.approx(CHECKPOINTS[-1]))
    assert interpolate_flops(curve_of(value), before, higher_is_better) == ("<", pytest.approx(CHECKPOINTS[0]))
    # exactly the first checkpoint's value is an exact answer, not a bound
    assert interpolate_flops(curve_of(value), float(value(CHECKPOINTS[0])), higher_is_better)[0] == "="

    curves = [curve_of(log_linear(higher_is_better, e)) for e in (-0.001, 0.001)]
    over = compute_multiplier(curves, [beyond, beyond + better * 0.01], BUDGET, higher_is_better, resamples=100)
    assert over["kind"] == ">" and over["multiplier"] == pytest.approx(1.0)
    assert over["text"] == "> 1× (not reached within the run)"
    under = compute_multiplier(curves, [before, before - better * 0.01], BUDGET, higher_is_better, resamples=100)
    assert under["kind"] == "<" and under["multiplier"] == pytest.approx(0.01)
    assert under["text"].startswith("< 0.01×")
    dumps(over), dumps(under)


def test_non_monotone_curve_uses_first_crossing():
    flops = [1e9, 1e10, 1e11, 1e12]
    accuracy = [0.1, 0.5, 0.3, 0.7]  # reaches 0.4 between 1e9 and 1e10, again between 1e11 and 1e12
    kind, at = interpolate_flops(list(zip(flops, accuracy)), 0.4, higher_is_better=True)
    assert kind == "=" and math.log10(at) == pytest.approx(9.75)


def test_baseline_seeds_must_share_checkpoints():
    value = log_linear(True)
    shifted = curve_of(value, CHECKPOINTS * 1.1)
    with pytest.raises(ValueError, match="share"):
        compute_multiplier([curve_of(value), shifted], [1.0, 1.1], BUDGET)
    with pytest.raises(ValueError, match="increasing"):
        interpolate_flops([(2.0, 0.1), (1.0, 0.2)], 0.15, True)


def test_one_seed_per_side_has_no_ci():
    value = log_linear(False)
    result = compute_multiplier([curve_of(value)], [float(value(0.5 * BUDGET))], BUDGET, higher_is_better=False)
    assert result["multiplier"] == pytest.approx(0.5)
    assert result["ci_low"] is None and result["ci_high"] is None
    assert result["text"] == "0.5× (one seed: no CI)"
    dumps(result)


def test_ci_is_open_ended_when_resamples_do_not_reach():
    # the target sits just inside the run: about half the resamples never reach it within the run
    value = log_linear(True)
    rng = np.random.default_rng(1)
    curves = [curve_of(log_linear(True, e)) for e in rng.normal(0, 0.01, 6)]
    target = float(value(0.95 * BUDGET))
    result = compute_multiplier(curves, list(target + rng.normal(0, 0.01, 6)), BUDGET, resamples=500)
    assert result["ci_high"] is None and result["ci_high_kind"] == ">"
    assert result["ci_low"] is not None and result["ci_low_kind"] == "="
    assert result["text"].endswith(" to > 1)")
    dumps(result)


def test_bootstrap_ci_covers_the_true_multiplier():
    """Seeds scatter around a known mean curve and a known target: the 95% CI should hold the true multiplier about
    95% of the time (percentile bootstraps run a little short with few seeds)."""
    rng = np.random.default_rng(0)
    true_k, n_seeds, sigma = 0.3, 16, 0.01
    value = log_linear(True)
    target = float(value(true_k * BUDGET))
    covered = 0
    for rep in range(200):
        curves = [curve_of(log_linear(True, e)) for e in rng.normal(0, sigma, n_seeds)]
        finals = list(target + rng.normal(0, sigma, n_seeds))
        result = compute_multiplier(curves, finals, BUDGET, resamples=200, seed=rep)
        assert result["ci_low"] is not None and result["ci_high"] is not None
        covered += result["ci_low"] <= true_k <= result["ci_high"]
    assert 0.85 <= covered / 200 <= 0.99


def test_signal_density_ratio():
    assert signal_density_ratio(63.0, 9.45) == pytest.approx(63 / 9.45)
    with pytest.raises(ValueError):
        signal_density_ratio(1.0, 0.0)


# --- yardstick verdicts --------------------------------------------------------------------------------------------

def test_one_seed_makes_no_claim():
    result = yardstick_verdict("loss", {"mlm": [3.2], "ar": [3.0], "electra": [3.1]}, "mlm", higher_is_better=False)
    assert [r["objective"] for r in result["rows"]] == ["ar", "electra", "mlm"]
    assert result["leader"] == "ar" and not result["separated"]
    assert "no claim can be made" in result["sentence"] and "ar is ahead on this one seed" in result["sentence"]
    assert all(r["ci95"] is None and r["p_vs_baseline"] is None and r["p_holm"] is None for r in result["rows"])
    dumps(result)
    mixed = yardstick_verdict("loss", {"mlm": [3.2], "ar": [3.0, 3.1]}, "mlm", higher_is_better=False)
    assert mixed["sentence"].startswith("With one seed for mlm no claim can be made on loss: ar is ahead")
    dumps(mixed)


def test_tie_is_not_significant():
    values = {"mlm": [0.50, 0.60, 0.55], "ar": [0.56, 0.51, 0.61]}
    result = yardstick_verdict("tagging", values, "mlm", label="tagging accuracy")
    assert result["leader"] == "ar"
    assert "cannot be told apart" in result["sentence"] and "not significant" in result["sentence"]
    assert "tagging accuracy" in result["sentence"] and not result["separated"]
    dumps(result)


def test_clear_win_is_significant_after_holm():
    values = {"mlm": [3.50, 3.52, 3.51], "ar": [3.00, 3.02, 3.01], "electra": [3.49, 3.53, 3.50]}
    result = yardstick_verdict("loss", values, "mlm", higher_is_better=False)
    rows = {r["objective"]: r for r in result["rows"]}
    assert result["leader"] == "ar" and rows["ar"]["rank"] == 1 and rows["mlm"]["p_vs_baseline"] is None
    assert rows["ar"]["p_holm"] == pytest.approx(min(1.0, 2 * rows["ar"]["p_vs_baseline"]))  # the smaller of two p
    assert result["sentence"].startswith("ar leads on loss by 0.5 over the baseline mlm")
    assert "significant at 0.05 after Holm" in result["sentence"] and "not significant" not in result["sentence"]
    assert result["separated"]
    assert rows["ar"]["ci_low"] == pytest.approx(rows["ar"]["mean"] - rows["ar"]["ci95"])
    dumps(result)


def test_baseline_leading_is_compared_with_the_best_challenger():
    values = {"mlm": [0.90, 0.91, 0.92], "ar": [0.60, 0.61, 0.62], "span": [0.70, 0.71, 0.72]}
    result = yardstick_verdict("tagging", values, "mlm")
    assert result["leader"] == "mlm" and [r["rank"] for r in result["rows"]] == [1, 2, 3]
    assert result["sentence"].startswith("mlm leads on tagging by 0.2 over span")
    dumps(result)


def test_separated_needs_gap_beyond_both_cis():
    close = yardstick_verdict("x", {"a": [1.0, 1.2, 1.1], "b": [1.15, 1.25, 1.05]}, "a")
    far = yardstick_verdict("x", {"a": [1.0, 1.2, 1.1], "b": [2.15, 2.25, 2.05]}, "a")
    assert not close["separated"] and far["separated"]


def test_verdict_rejects_bad_input():
    with pytest.raises(ValueError, match="baseline"):
        yardstick_verdict("x", {"a": [1.0]}, "b")
    with pytest.raises(ValueError, match="finite"):
        yardstick_verdict("x", {"a": [1.0, float("nan")]}, "a")


# --- the gain over the untrained control -------------------------------------------------------------------------

def test_gain_over_control_by_hand():
    from scipy.stats import t as t_distribution

    values, control = [0.80, 0.82, 0.84], [0.50, 0.52, 0.51]
    gain = gain_over_control(values, control, ceiling=1.0)
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    var = lambda v: sum((x - mean(v)) ** 2 for x in v) / (len(v) - 1)  # noqa: E731
    se2 = var(values) / 3 + var(control) / 3
    df = se2 ** 2 / ((var(values) / 3) ** 2 / 2 + (var(control) / 3) ** 2 / 2)
    difference = 0.82 - 0.51
    half = t_distribution.ppf(0.975, df) * se2 ** 0.5
    assert gain["gain"] == pytest.approx(difference) and gain["control_mean"] == pytest.approx(0.51)
    assert (gain["ci_low"], gain["ci_high"]) == pytest.approx((difference - half, difference + half))
    assert gain["p"] == pytest.approx(2 * t_distribution.sf(difference / se2 ** 0.5, df))
    assert gain["share_of_gain"] == pytest.approx(0.31 / 0.49)  # (0.82 − 0.51) / (1 − 0.51)
    assert gain_over_control(values, control)["share_of_gain"] is None  # no ceiling known
    assert gain_over_control([0.3], [0.2])["p"] is None  # one seed: nothing to test
    family = [gain, gain_over_control([0.5, 0.52, 0.51], control)]
    holm_gains(family)
    assert [g["p_holm"] for g in family] == pytest.approx(holm([g["p"] for g in family]))
    assert beats_control(family[0]) and not beats_control(family[1])


def test_rise_with_compute_is_spearmans_rho_by_hand():
    assert rise_with_compute([0, 1, 2, 3], [0.1, 0.2, 0.3, 0.4]) == pytest.approx(1.0)
    assert rise_with_compute([0, 1, 2, 3], [0.4, 0.3, 0.2, 0.1]) == pytest.approx(-1.0)
    # ranks 1 3 2 4 against 1 2 3 4: 1 − 6 Σd² / (n (n² − 1)) = 1 − 6 · 2 / 60
    assert rise_with_compute([0, 1, 2, 3], [0.1, 0.3, 0.2, 0.4]) == pytest.approx(0.8)
    assert rise_with_compute([0, 1, 2], [0.5, 0.5, 0.5]) is None and rise_with_compute([0, 1], [0.1, 0.2]) is None


def _runs(spec: str, finals: list[float], control: str = "untrained, bidirectional") -> list[dict]:
    return [{"objective": spec, "seed": seed, "control": control, "probes": {"component": value, "sees": "smoothing"},
             "curve": [{"checkpoint": 1e10, "probes": {"component": value - 0.1}},
                       {"checkpoint": 1e11, "probes": {"component": value}}]}
            for seed, value in enumerate(finals)]


def test_a_yardstick_no_objective_moves_ranks_nothing():
    from bench.analysis.results import verdict

    controls = {"untrained, bidirectional": [{"control": "untrained, bidirectional", "seed": seed,
                                              "probes": {"component": value, "sees": "smoothing"}}
                                             for seed, value in enumerate([0.50, 0.52, 0.51])]}
    moved = {"mlm": _runs("mlm", [0.70, 0.72, 0.71]), "electra": _runs("electra", [0.80, 0.82, 0.81])}
    found = verdict(moved, "mlm", {"component": 0.9}, [], 1e11, controls)
    component = found["yardsticks"][0]
    assert component["yardstick"] == "component" and component["measures_pretraining"] is True
    assert [m["objective"] for m in found["multipliers"]] == ["electra"]
    assert found["pretraining"]["paid"] and found["pretraining"]["sentence"].startswith("Pretraining paid")
    assert component["gains"][0]["share_of_gain"] == pytest.approx((0.71 - 0.51) / (0.9 - 0.51))
    assert component["gains"][0]["rise"] == pytest.approx(1.0)  # 0.51 at 0 FLOPs, 0.61, 0.71
    unmoved = {"mlm": _runs("mlm", [0.50, 0.53, 0.51]), "electra": _runs("electra", [0.52, 0.50, 0.51])}
    found = verdict(unmoved, "mlm", {"component": 0.9}, [], 1e11, controls)
    component = found["yardsticks"][0]
    assert component["measures_pretraining"] is False and found["multipliers"] == []
    assert "does not measure pretraining" in component["sentence"]
    assert found["pretraining"]["paid"] is False and "did not pay" in found["pretraining"]["sentence"]
    # one seed: nothing can be tested, which is not the same as "did not pay"
    one = verdict({"mlm": _runs("mlm", [0.9])}, "mlm", {}, [], 1e11,
                  {"untrained, bidirectional": controls["untrained, bidirectional"][:1]})
    assert one["yardsticks"][0]["measures_pretraining"] is None and one["pretraining"]["paid"] is None
    assert one["pretraining"]["sentence"].startswith("With one seed")


def test_a_gain_where_lower_is_better_is_the_fall_below_the_control():
    values, control = [0.20, 0.22, 0.24], [0.50, 0.52, 0.51]
    lower = gain_over_control(values, control, ceiling=0.0, higher_is_better=False)
    higher = gain_over_control(values, control, ceiling=0.0)
    assert lower["gain"] == pytest.approx(0.51 - 0.22) and lower["gain"] == pytest.approx(-higher["gain"])
    assert (lower["ci_low"], lower["ci_high"]) == pytest.approx((-higher["ci_high"], -higher["ci_low"]))
    assert lower["p"] == higher["p"] and lower["share_of_gain"] == pytest.approx(0.29 / 0.51)  # of 0.51 down to 0
    holm_gains([lower])
    assert beats_control(lower)


def test_every_task_metric_has_a_direction_and_a_task_mixing_two_is_refused(monkeypatch):
    from bench.yardsticks import metrics
    from bench.yardsticks.metrics import METRICS, Metric, direction
    assert set(METRICS) == {"accuracy", "f1", "macro_f1", "mcc", "span_f1"}
    assert all(METRICS[name].higher_is_better for name in METRICS) and direction(("f1", "accuracy")) is True
    assert [name for name, metric in METRICS.items() if metric.tagging_only] == ["span_f1"]
    monkeypatch.setitem(metrics.METRICS, "error_rate", Metric("error_rate", lambda *a: 0.0, higher_is_better=False))
    assert direction(("error_rate",)) is False
    with pytest.raises(ValueError, match="different directions"):
        direction(("accuracy", "error_rate"))


def test_a_task_where_lower_is_better_ranks_and_gains_in_its_direction():
    from bench.analysis.results import verdict

    def runs(spec, finals, control="untrained, bidirectional"):
        return [{"objective": spec, "seed": seed, "control": control,
                 "downstream": {"t": {"frozen": {"score": value}, "finetuned": {"score": value}}},
                 "curve": [{"checkpoint": 1e10, "downstream": {"t": value + 0.1}},
                           {"checkpoint": 1e11, "downstream": {"t": value}}]} for seed, value in enumerate(finals)]

    controls = {"untrained, bidirectional": [{"control": "untrained, bidirectional", "seed": seed,
                                              "downstream": {"t": {"frozen": {"score": v}, "finetuned": {"score": v}}}}
                                             for seed, v in enumerate([0.50, 0.52, 0.51])]}
    grouped = {"mlm": runs("mlm", [0.30, 0.31, 0.32]), "electra": runs("electra", [0.20, 0.21, 0.22])}
    found = verdict(grouped, "mlm", {}, [], 1e11, controls,
                    tasks=[{"task": "t", "higher_is_better": False, "bayes_ceiling": None}])
    frozen = next(y for y in found["yardsticks"] if y["yardstick"] == "t (frozen)")
    assert frozen["higher_is_better"] is False and frozen["rows"][0]["objective"] == "electra"  # the lowest first
    assert frozen["measures_pretraining"] is True and all(g["gain"] > 0 for g in frozen["gains"])
    assert all(g["rise"] == pytest.approx(1.0) for g in frozen["gains"])  # falling, from the control, is rising


def test_a_multiplier_the_baseline_never_reaches_is_read_off_the_other_curve():
    """The other objective is the baseline's curve shifted by 4× in compute: at the budget it is past anything the
    baseline reached, so the direct reading is a bound, and its own curve reached the baseline's final value at a
    quarter of the budget: 4× (the ELECTRA paper's reading), the two readings equal for a pure shift."""
    value = log_linear(True)
    offsets = (-0.01, 0.0, 0.01)
    baseline = [curve_of(log_linear(True, e)) for e in offsets]
    other = [curve_of(lambda flops, e=e: log_linear(True, e)(4 * flops)) for e in offsets]
    other_final = [float(value(4 * BUDGET)) + e for e in offsets]
    baseline_final = [float(value(BUDGET)) + e for e in offsets]
    direct = compute_multiplier(baseline, other_final, BUDGET, resamples=200)
    assert direct["kind"] == ">"
    found = reversed_multiplier(baseline, other, baseline_final, BUDGET, resamples=200)
    assert found["kind"] == "=" and found["multiplier"] == pytest.approx(4.0, rel=1e-9)
    assert found["ci_low"] < 4.0 < found["ci_high"] and found["range"] == pytest.approx([1.0, 100.0])
    assert found["text"] == format_multiplier(found, reversed_reading=True) and found["text"].startswith("4×")
    direct["reversed"] = found
    assert format_multiplier(direct) == \
        f"> 1× (not reached within the run); at the baseline's final value: {found['text']}"
    dumps(direct)
    # past the baseline's value at its own first checkpoint: a lower bound, said as one
    early = reversed_multiplier(baseline, other, [float(value(CHECKPOINTS[0]))] * 3, BUDGET, resamples=50)
    assert early["kind"] == ">" and early["text"].endswith("× (reached at its first checkpoint)")


def test_a_baseline_that_peaked_and_fell_back_is_charged_its_first_crossing_not_the_budget():
    """MLM in the electra-efficiency preset at 3.2e12 peaked at 0.833 and ended at 0.798, which ELECTRA reached near
    5e11: measured from the budget ELECTRA would look 6× as efficient, though MLM got there as early."""
    flops = [1.6e11, 2.9e11, 5.3e11, 9.7e11, 1.8e12, 3.2e12]
    peaked = [list(zip(flops, [0.661, 0.770, 0.833, 0.823, 0.785, 0.798]))] * 2
    rising = [list(zip(flops, [0.551, 0.689, 0.804, 0.839, 0.859, 0.874]))] * 2
    found = reversed_multiplier(peaked, rising, [0.798, 0.798], 3.2e12, resamples=20)
    mlm_at = np.exp(np.interp(0.798, [0.770, 0.833], np.log([2.9e11, 5.3e11])))
    electra_at = np.exp(np.interp(0.798, [0.689, 0.804], np.log([2.9e11, 5.3e11])))
    assert found["kind"] == "=" and found["multiplier"] == pytest.approx(mlm_at / electra_at, rel=1e-9)
    assert found["multiplier"] < 1.0 and found["baseline_flops"] == pytest.approx(mlm_at, rel=1e-9)


def test_an_end_one_reading_leaves_open_is_closed_by_the_other():
    """The default's ELECTRA ends just ahead of MLM: MLM's run never reaches its value, so the report reads both
    curves at MLM's final value; in the resamples of seeds where ELECTRA ends behind, that reading has no number
    (ELECTRA never got there) and the direct one has. Each resample takes the number of the reading that has one:
    checked against a loop over the same draws, one resample at a time, through interpolate_flops."""
    offsets = (-0.03, 0.0, 0.03)
    baseline = [curve_of(log_linear(True, e)) for e in offsets]
    other = [curve_of(lambda flops, e=e: log_linear(True, e)(1.1 * flops)) for e in offsets]
    base_final, other_final = [c[-1][1] for c in baseline], [c[-1][1] for c in other]
    assert compute_multiplier(baseline, other_final, BUDGET, resamples=0)["kind"] == ">"
    alone = reversed_multiplier(baseline, other, base_final, BUDGET, resamples=500)
    assert alone["multiplier"] == pytest.approx(1.1, rel=1e-9) and alone["ci_low"] is None  # open below
    both = two_way_ci(baseline, other, base_final, other_final, BUDGET, reading="reversed", resamples=500)
    assert 0 < both["read_the_other_way"] < 1 and both["ci_low"] < 1.0 < 1.1 < both["ci_high"]

    rng = np.random.default_rng(0)  # the draws two_way_ci makes, in its order
    base_idx, other_idx = rng.integers(0, 3, (500, 3)), rng.integers(0, 3, (500, 3))
    values = []
    for b, o in zip(base_idx, other_idx):
        base_curve = [(f, np.mean([baseline[i][k][1] for i in b])) for k, (f, _) in enumerate(baseline[0])]
        other_curve = [(f, np.mean([other[i][k][1] for i in o])) for k, (f, _) in enumerate(other[0])]
        target = np.mean([base_final[i] for i in b])
        base_kind, base_at = interpolate_flops(base_curve, target, True)
        other_kind, other_at = interpolate_flops(other_curve, target, True)
        if other_kind == "=":
            values.append(min(base_at, BUDGET) / other_at)
        else:  # ELECTRA never reached MLM's final value here: how much compute MLM needed to reach ELECTRA's
            kind, at = interpolate_flops(base_curve, np.mean([other_final[i] for i in o]), True)
            assert kind == "="
            values.append(at / BUDGET)
    assert [both["ci_low"], both["ci_high"]] == pytest.approx(np.percentile(values, [2.5, 97.5]), rel=1e-9)
    assert both["ci_high"] == pytest.approx(alone["ci_high"], rel=1e-12)  # the same draws: the closed end stays

    # where no resample needs the other reading the CI is the reading's own
    shifted = [curve_of(lambda flops, e=e: log_linear(True, e)(4 * flops)) for e in (-0.01, 0.0, 0.01)]
    close = [curve_of(log_linear(True, e)) for e in (-0.01, 0.0, 0.01)]
    four = reversed_multiplier(close, shifted, [c[-1][1] for c in close], BUDGET, resamples=200)
    same = two_way_ci(close, shifted, [c[-1][1] for c in close], [c[-1][1] for c in shifted], BUDGET,
                      reading="reversed", resamples=200)
    assert same["read_the_other_way"] == 0 and (same["ci_low"], same["ci_high"]) == (four["ci_low"], four["ci_high"])
    assert two_way_ci(close[:1], shifted, [1.0], [1.0], BUDGET) == {}  # one baseline seed: no CI
    with pytest.raises(ValueError, match="reading"):
        two_way_ci(close, shifted, [1.0], [1.0], BUDGET, reading="sideways")
