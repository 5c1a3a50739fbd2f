"""The frontier's multipliers, crossovers and gain trends on synthetic curves whose answers are known, and the
coverage of their intervals, a truth that is not the fitted form included (the fit's lack of fit)."""

import math

import numpy as np
import pytest
from scipy.stats import t as t_distribution

from bench.analysis.frontier import (LOG_LINEAR, POWER_LAW, Curves, contradicts, crossover, fit_frontier, gain_trend,
                                     multipliers)

BUDGETS = (1e11, 4e11, 1.6e12)  # the sweep this suite runs on 2 cores: a quarter, one and four times the default


def power_law(flops):
    """Saturating toward 1, the ceiling of a share of the Bayes ceiling."""
    return 1 - 0.9 * (np.asarray(flops) / 1e10) ** -0.25


def log_linear(offset, slope):
    return lambda flops: offset + slope * np.log(np.asarray(flops) / 1e10)


def curves(truth, seeds=3, noise=0.0, rng=None, budgets=BUDGETS):
    values = truth(np.array(budgets))[None, :].repeat(seeds, 0)
    if noise:
        values = values + rng.normal(0, noise, values.shape)
    return Curves(budgets, values)


@pytest.mark.parametrize("shift", [0.25, 2.0, 4.0])
def test_a_known_compute_shift_is_the_multiplier_at_every_budget(shift):
    for truth, ceiling, kind in ((power_law, 1.0, POWER_LAW), (log_linear(0.2, 0.05), None, LOG_LINEAR)):
        found = fit_frontier({"base": curves(truth), "other": curves(lambda c, t=truth: t(shift * c))}, ceiling,
                             resamples=50)
        assert found.kind == kind
        rows = multipliers(found, "base", "other")
        assert [row.multiplier for row in rows] == pytest.approx([shift] * 3, rel=1e-9)
        # the baseline's compute shift × B outside the sweep is flagged, never a result
        assert [row.outside for row in rows] == [shift < 1, shift > 4 or shift < 0.25, shift > 1]
        assert all(row.lack_of_fit for row in rows)  # three budgets: the residuals have one degree of freedom


def test_a_known_crossover_within_the_sweep_and_one_the_measured_means_contradict():
    # 0.1 + 0.06 L and 0.3 + 0.02 L meet at L = ln(C / 1e10) = 5, C = e^5 · 1e10 = 1.48e12, inside [1e11, 1.6e12]
    found = fit_frontier({"steep": curves(log_linear(0.1, 0.06)), "flat": curves(log_linear(0.3, 0.02))},
                         resamples=50)
    means = {"steep": [0.1 + 0.06 * math.log(b / 1e10) for b in BUDGETS],
             "flat": [0.3 + 0.02 * math.log(b / 1e10) for b in BUDGETS]}
    meet = crossover(found, "steep", "flat", means)
    assert meet.where == "within" and meet.budget == pytest.approx(math.exp(5) * 1e10, rel=1e-9)
    assert not meet.contradicted  # flat leads at 4e11, steep at 1.6e12: the order flips around 1.48e12
    # the fits cross at 2e11, but the measured means say flat leads on both sides of it: not stated (the report's
    # "cross at 3.54e11" where at 4e11 MLM still led)
    assert contradicts([-1, -1, 1], np.log(BUDGETS), math.log(2e11))
    assert not contradicts([-1, 1, 1], np.log(BUDGETS), math.log(2e11))
    assert contradicts([-1, -1, -1], np.log(BUDGETS), math.log(1e12))


def test_curves_that_meet_only_beyond_the_sweep_or_never():
    beyond = fit_frontier({"steep": curves(log_linear(0.1, 0.06)), "flat": curves(log_linear(0.42, 0.02))},
                          resamples=50)
    meet = crossover(beyond, "steep", "flat")  # at L = 8: C = 2.98e13, past 1.6e12
    assert meet.where == "beyond the sweep" and meet.budget == pytest.approx(math.exp(8) * 1e10, rel=1e-9)
    parallel = fit_frontier({"a": curves(log_linear(0.1, 0.03)), "b": curves(log_linear(0.2, 0.03))}, resamples=50)
    assert crossover(parallel, "a", "b").where == "never"


def test_a_fit_that_does_not_rise_gives_no_multiplier_and_the_power_law_needs_a_ceiling():
    falling = fit_frontier({"base": curves(log_linear(0.5, -0.01)), "other": curves(log_linear(0.2, 0.05))},
                           resamples=50)
    assert all(row.multiplier is None and row.outside for row in multipliers(falling, "base", "other"))
    at_ceiling = curves(lambda c: np.minimum(1.0, power_law(c) + 0.3))
    assert fit_frontier({"a": at_ceiling}, 1.0, resamples=10).kind == LOG_LINEAR
    assert fit_frontier({"a": curves(power_law)}, None, resamples=10).kind == LOG_LINEAR
    with pytest.raises(ValueError, match="same two or more budgets"):
        fit_frontier({"a": curves(power_law), "b": curves(power_law, budgets=BUDGETS[:2])})


def bent(flops):
    """Not the fitted form: a sigmoid in log-FLOPs, whose line through three budgets misses the middle one."""
    return 0.3 + 0.5 / (1 + np.exp(-1.5 * (np.log(np.asarray(flops)) - math.log(3e11))))


@pytest.mark.parametrize("truth", [power_law, bent])
def test_the_multipliers_interval_covers_the_true_one_even_where_the_form_is_wrong(truth):
    """Seeds scatter around a known curve and its copy shifted by 2 in compute: the true multiplier is 2 at every
    budget. Where the truth is the fitted form, the seed bootstrap alone covers it; where it is not (`bent`), the
    fitted lines miss and only the interval widened by the lack of fit still covers 2 at the middle budget."""
    rng, hits, reps = np.random.default_rng(1), 0, 200
    for rep in range(reps):
        found = fit_frontier({"base": curves(truth, 5, 0.01, rng), "other": curves(lambda c: truth(2.0 * c), 5, 0.01,
                                                                                   rng)},
                             1.0 if truth is power_law else None, resamples=300, seed=rep)
        row = multipliers(found, "base", "other")[1]
        hits += row.ci_low is not None and row.ci_low <= 2.0 <= row.ci_high
    assert hits / reps >= 0.93


def test_the_seed_bootstrap_of_a_trend_has_the_standard_error_of_the_seeds_mean():
    """Two budgets (no lack of fit): the fitted slope is the mean of the seeds' own slopes, its standard error
    s/√n, and the interval t(0.975, n − 1) × that. Seeds drawn with replacement spread it by only √((n − 1)/n)."""
    rng, budgets = np.random.default_rng(4), (1e11, 1e12)
    scores = 0.5 + np.array([0.0, 0.02]) + rng.normal(0, 0.01, (5, 2))
    found = gain_trend(budgets, scores, rng.normal(0.4, 0.01, 5), resamples=8000)
    slopes = (scores[:, 1] - scores[:, 0]) / math.log(10)  # per log-FLOP
    half = (found.per_decade_ci[1] - found.per_decade_ci[0]) / 2
    exact = t_distribution.ppf(0.975, 4) * slopes.std(ddof=1) / math.sqrt(5) * math.log(10)
    assert found.per_decade == pytest.approx(slopes.mean() * math.log(10), rel=1e-9)
    assert half / exact == pytest.approx(1.0, abs=0.03)


def test_stretched_resamples_never_pass_the_ceiling_of_a_power_law():
    """Two seeds, one of them close to the ceiling: stretched as scores, a quarter of the resampled means would pass
    0.95, where log(ceiling − s) is not defined, and no multiplier would get an interval. Stretched on the fitted
    scale, every resample has a line."""
    budgets = BUDGETS[:2]  # no lack of fit: the seeds alone give the interval
    found = fit_frontier({"base": Curves(budgets, np.array([[0.60, 0.80], [0.64, 0.93]])),
                          "other": Curves(budgets, np.array([[0.66, 0.86], [0.70, 0.92]]))}, 0.95, resamples=400)
    assert found.kind == POWER_LAW
    assert all(np.isfinite(part).all() for lines in found.lines.values() for part in lines)
    assert all(row.ci_low is not None for row in multipliers(found, "base", "other"))


def test_a_gain_trend_carries_its_lack_of_fit():
    """Three budgets: a gain that is 0.02 per decade with the seeds in perfect agreement, but whose middle budget
    sits 0.03 off the line. The seeds alone would give the slope no width; the residual interval (t with one
    degree of freedom, 12.7 × the slope's standard error) is wide, and the reported interval is never narrower."""
    budgets = (1e11, 1e12, 1e13)
    line = 0.5 + 0.02 * np.log10(np.array(budgets) / 1e12)
    scores = (line + np.array([0.0, 0.03, 0.0]))[None, :].repeat(3, 0)
    found = gain_trend(budgets, scores, np.array([0.49, 0.5, 0.51]), resamples=2000)
    assert found.per_decade == pytest.approx(0.02, rel=1e-9) and found.lack_of_fit
    x = np.log(budgets) - np.log(budgets).mean()
    residuals = scores[0] - np.polyval(np.polyfit(np.log(budgets), scores[0], 1), np.log(budgets))
    slope_se = math.sqrt(residuals @ residuals / 1 / (x @ x)) * math.log(10)
    low, high = found.per_decade_ci
    assert high - low >= 0.95 * 2 * 12.706 * slope_se  # the percentiles of the t(1) draws, ~ t(0.975, 1) × SE
    # the fitted gain is their mean, 0.01, at 1e12 and falls 0.02 a decade: it meets the control half a decade below
    assert found.meets.where == "within" and found.meets.budget == pytest.approx(10 ** 11.5, rel=1e-9)
    falling = gain_trend(budgets, (1 - line)[None, :].repeat(3, 0) - 0.45, np.array([0.0, 0.0, 0.01]),
                         resamples=100)
    assert falling.per_decade < 0 and falling.meets.where == "never"
    two = gain_trend((1e11, 1e12), scores[:, :2], np.array([0.49, 0.5, 0.51]), resamples=100)
    assert not two.lack_of_fit  # two budgets leave no residual: the report says the form must be taken on trust
