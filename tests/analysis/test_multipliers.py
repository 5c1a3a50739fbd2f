"""bench.analysis.multipliers: the compute multiplier read off mean curves, both readings, and its interval, against
curves whose multiplier is known by construction."""

import math

import numpy as np
import pytest

from bench.analysis.multipliers import KINDS, Curve, crossings, multiplier, reversed_kind
from bench.analysis.uncertainty import Group
from bench.report.wording import multiplier_text

BUDGET = 1e12
CHECKPOINTS = BUDGET * np.logspace(-2, 0, 7)  # 1 % of the budget to the budget, log-spaced like the runs'


def line(offset: float = 0.0, higher: bool = True):
    """Exactly linear in log-FLOPs, so linear-in-log interpolation is exact."""
    slope = 0.05 if higher else -0.3
    return lambda flops: 1.0 + offset + slope * np.log(flops / CHECKPOINTS[0])


def curve(values: list, checkpoints=CHECKPOINTS) -> Curve:
    """Seeds' curves (each a function of FLOPs): a Group per checkpoint and at the budget, the last checkpoint's."""
    points = tuple(Group(np.array([value(f) for value in values], dtype=float)) for f in checkpoints)
    return Curve(np.asarray(checkpoints, dtype=float), points, points[-1])


@pytest.mark.parametrize("higher", [True, False])
@pytest.mark.parametrize("k", [0.3, 0.5, 0.037])
def test_a_known_compute_shift_is_read_exactly(higher, k):
    # the objective at the budget scores what the baseline scores at k × the budget: worth k of its compute
    offsets = (-0.02, 0.0, 0.02)
    base = curve([line(e, higher) for e in offsets])
    other = curve([lambda f, e=e: line(e, higher)(k * BUDGET) + 0 * f for e in offsets])
    found = multiplier(base, other, BUDGET, higher, resamples=300)
    assert found.reading == "direct" and found.kind == "="
    assert found.multiplier == pytest.approx(k, rel=1e-9)
    assert found.ci_low < k < found.ci_high


def test_where_controls_differ_the_multiplier_is_read_off_the_gains():
    """The objective gains what the baseline gains with a third of its compute, but its untrained control starts
    0.2 higher: on the scores it would look worth far more than a third; on the gains it is exactly a third."""
    offsets, k, start = (-0.02, 0.0, 0.02), 1 / 3, 0.2
    base_control, other_control = Group(np.array([0.5, 0.5, 0.5])), Group(np.array([0.5 + start] * 3))
    raw_base = curve([line(e) for e in offsets])
    raw_other = curve([lambda f, e=e: line(e)(k * f) + start for e in offsets])
    on_gains = multiplier(Curve(raw_base.flops, raw_base.points, raw_base.final, base_control),
                          Curve(raw_other.flops, raw_other.points, raw_other.final, other_control), BUDGET,
                          resamples=200)
    assert on_gains.on == "gains" and on_gains.multiplier == pytest.approx(k, rel=1e-9)
    on_scores = multiplier(raw_base, raw_other, BUDGET, resamples=200)
    assert on_scores.on == "scores" and on_scores.multiplier > 3 * k


def test_a_multiplier_the_baseline_never_reaches_is_read_at_its_final_value():
    """The objective is the baseline's curve shifted by 4× in compute: past anything the baseline reached, so the
    direct reading is a bound; its own curve reached the baseline's final value at a quarter of the budget."""
    offsets = (-0.01, 0.0, 0.01)
    base = curve([line(e) for e in offsets])
    other = curve([lambda f, e=e: line(e)(4 * f) for e in offsets])
    found = multiplier(base, other, BUDGET, resamples=300)
    assert found.reading == "reversed" and found.kind == "="
    assert found.multiplier == pytest.approx(4.0, rel=1e-9)
    assert found.ci_low < 4.0 < found.ci_high and found.range == pytest.approx([1.0, 100.0])


def test_a_baseline_that_peaked_and_fell_back_is_charged_its_first_crossing():
    """MLM peaked at 0.833 and ended at 0.798, which the other reached near 5e11: measured from the budget it would
    look 6× as efficient, though MLM got there as early."""
    flops = np.array([1.6e11, 2.9e11, 5.3e11, 9.7e11, 1.8e12, 3.2e12])
    peaked = [0.661, 0.770, 0.833, 0.823, 0.785, 0.798]
    rising = [0.551, 0.689, 0.804, 0.839, 0.859, 0.874]
    as_curve = lambda values: Curve(flops, tuple(Group(np.array([v, v])) for v in values),  # noqa: E731
                                    Group(np.array([values[-1]] * 2)))
    found = multiplier(as_curve(peaked), as_curve(rising), 3.2e12, resamples=20)
    mlm_at = np.exp(np.interp(0.798, [0.770, 0.833], np.log([2.9e11, 5.3e11])))
    other_at = np.exp(np.interp(0.798, [0.689, 0.804], np.log([2.9e11, 5.3e11])))
    assert found.reading == "reversed" and found.multiplier == pytest.approx(mlm_at / other_at, rel=1e-9)


def test_a_baseline_already_past_its_final_value_at_its_first_checkpoint_gives_only_a_bound():
    """The baseline starts at 0.62 and ends at 0.60; the other ends above anything the baseline reached, so the
    reading is reversed, at 0.60. The baseline got there at its first checkpoint or before, so the multiplier (its
    FLOPs there over the other's, 1e10 / 1e11) is at most 0.1; where the other was past 0.60 at its own first
    checkpoint too, it is not even bounded."""
    flops = np.logspace(10, 12, 5)
    as_curve = lambda values: Curve(flops, tuple(Group(np.array([v, v + 0.001])) for v in values),  # noqa: E731
                                    Group(np.array([values[-1], values[-1] + 0.001])))
    peaked = as_curve([0.62, 0.50, 0.55, 0.58, 0.60])
    found = multiplier(peaked, as_curve([0.40, 0.50, 0.60, 0.70, 0.80]), 1e12, resamples=50)
    assert found.reading == "reversed" and found.kind == "<" and found.bound == "baseline"
    assert found.multiplier == pytest.approx(0.1, rel=0.05) and found.ci_low is None
    assert "the other was already past its own final value" in multiplier_text(found)
    unread = multiplier(peaked, as_curve([0.65, 0.70, 0.75, 0.78, 0.80]), 1e12, resamples=50)
    assert unread.kind == "?" and multiplier_text(unread).startswith("not measurable")
    assert unread.ci_low is None and unread.ci_high is None
    # base: exact (0), not within the run (1, read at the budget: exact), past it at the first checkpoint (2)
    base, other = np.repeat([0, 1, 2], 3), np.tile([0, 1, 2], 3)
    assert [KINDS[k] for k in reversed_kind(base, other)] == ["=", "<", ">", "=", "<", ">", "<", "<", "?"]


def test_one_seed_gives_no_interval_and_bounds_are_bounds():
    base = curve([line()])
    found = multiplier(base, curve([lambda f: line()(0.5 * BUDGET) + 0 * f]), BUDGET)
    assert found.multiplier == pytest.approx(0.5) and found.ci_low_kind is None
    kind, at = crossings(np.array([[0.1, 0.5, 0.3, 0.7]]), np.log([1e9, 1e10, 1e11, 1e12]), np.array([0.4]), True)
    assert kind[0] == 0 and math.log10(math.exp(at[0])) == pytest.approx(9.75)  # the first crossing
    before = multiplier(base, curve([lambda f: line()(1e-3 * BUDGET) + 0 * f]), BUDGET)
    assert before.kind == "<" and before.multiplier == pytest.approx(0.01)


def test_the_bootstraps_spread_is_the_standard_error_of_the_seeds_means():
    """On exactly linear curves the log-multiplier is linear in the seeds' means, so its standard error is known:
    √(s_base²/n + s_other²/n) / slope. Seeds drawn with replacement spread a mean by only √((n − 1)/n) of that
    (0.89 with five seeds: 95 % intervals that cover 93 %); the bootstrap must give the full one."""
    rng = np.random.default_rng(3)
    base_offsets, other_offsets = rng.normal(0, 0.01, 5), rng.normal(0, 0.01, 5)
    base = curve([line(e) for e in base_offsets])
    other = curve([lambda f, e=e: line()(0.3 * BUDGET) + e + 0 * f for e in other_offsets])
    found = multiplier(base, other, BUDGET, resamples=8000, seed=1)
    exact = math.sqrt(base_offsets.var(ddof=1) / 5 + other_offsets.var(ddof=1) / 5) / 0.05
    assert found.reading == "direct" and found.log_se / exact == pytest.approx(1.0, abs=0.03)


def test_the_interval_covers_a_known_multiplier():
    """Seeds scatter around a known mean curve and a known target: the interval holds the true multiplier 95 % of
    the time or more (t × SD on the log scale, not percentiles)."""
    rng, true_k, covered, trials = np.random.default_rng(0), 0.3, 0, 150
    for trial in range(trials):
        base = curve([line(e) for e in rng.normal(0, 0.01, 5)])
        other = curve([lambda f, e=e: line()(true_k * BUDGET) + e + 0 * f for e in rng.normal(0, 0.01, 5)])
        found = multiplier(base, other, BUDGET, resamples=200, seed=trial)
        covered += found.ci_low <= true_k <= found.ci_high
    assert covered / trials >= 0.93
