"""bench.analysis.uncertainty: the interval of a mean and of a difference, over seeds and test examples, against
hand arithmetic (Student's t, Welch) and a simulation whose truth is known."""

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit

from bench.analysis.uncertainty import Group, Part, difference, mean


def test_without_hits_per_example_a_mean_is_the_t_interval_and_a_difference_is_welch():
    a, b = np.array([0.5, 0.6, 0.55, 0.7, 0.65]), np.array([0.3, 0.35, 0.32, 0.4, 0.33])
    found = mean(Group(a))
    half = stats.t.ppf(0.975, 4) * a.std(ddof=1) / math.sqrt(5)
    assert (found.ci_low, found.ci_high) == pytest.approx((a.mean() - half, a.mean() + half))
    welch = stats.ttest_ind(a, b, equal_var=False)
    found = difference(Group(a), Group(b))
    assert found.p == pytest.approx(welch.pvalue) and not found.test_sampling
    assert (found.ci_low, found.ci_high) == pytest.approx(tuple(welch.confidence_interval()))
    one = mean(Group(np.array([0.5])))
    assert one.ci_low is None and one.p is None


def test_seeds_without_spread_still_carry_the_test_sets_binomial_error():
    # every seed got the same 300 of 1,000 examples right: the seeds agree, yet the score rests on 1,000 examples,
    # whose binomial SE is sqrt(0.3 · 0.7 / 1000) = 0.0145
    hits = np.zeros((4, 1000), dtype=int)
    hits[:, :300] = 1
    group = Group(np.full(4, 0.3), (Part("test", hits, np.ones(1000, dtype=int)),))
    found = mean(group, resamples=4000)
    assert found.se == pytest.approx(math.sqrt(0.3 * 0.7 / 1000), rel=0.08)
    assert found.test_sampling and found.ci_low < 0.3 - 0.02 < 0.3 + 0.02 < found.ci_high
    assert mean(Group(np.full(4, 0.3))).se == 0  # what seeds alone would claim


def test_a_shared_test_set_cancels_in_a_difference():
    # two groups that got exactly the same examples right: their difference is 0 with no test-set error at all
    hits = np.random.default_rng(0).integers(0, 2, (3, 500))
    group = Group(hits.mean(1), (Part("test", hits, np.ones(500, dtype=int)),))
    found = difference(group, group)
    assert found.estimate == 0 and found.se == pytest.approx(math.sqrt(2 * hits.mean(1).var(ddof=1) / 3))


def test_scored_positions_weigh_each_example_by_its_units():
    # two examples: 3 of 4 positions right and 0 of 1: the score is 3 / 5, not the mean of 0.75 and 0
    hits, units = np.array([[3, 0], [3, 0]]), np.array([4, 1])
    group = Group(np.array([0.6, 0.6]), (Part("test", hits, units),))
    assert mean(group).estimate == pytest.approx(0.6)


def simulate(rng, mu, item_logits, seeds, seed_sd):
    p = expit(mu + rng.normal(0, seed_sd, seeds)[:, None, None] + item_logits[None])
    return (rng.random(p.shape) < p).sum(-1)  # (seeds, examples): hits per example


@pytest.mark.parametrize("seed_sd, item_sd, seeds", [(0.1, 1.0, 5), (0.5, 1.0, 5), (0.3, 1.5, 3)])
def test_the_intervals_cover_a_known_truth_where_seeds_alone_do_not(seed_sd, item_sd, seeds):
    """Simulated backbones: a seed effect and, shared by every backbone, test examples of varying difficulty
    (logit-normal), 4 scored positions each. The truth is the population's mean accuracy (and the difference of two
    populations'); each trial draws a fresh test set and fresh seeds. The intervals with the test examples resampled
    cover the truth at 95 % or more; the seeds-only interval of a mean covers less where the test set's shared
    difficulty dominates."""
    rng = np.random.default_rng(0)
    population = lambda mu: expit(mu + rng.normal(0, seed_sd, 400_000) + rng.normal(0, item_sd, 400_000)).mean()  # noqa
    truth_a, truth_b = population(1.0), population(0.7)
    trials, covered, covered_difference, covered_seeds_only = 150, 0, 0, 0
    for _ in range(trials):
        items = rng.normal(0, item_sd, (200, 4))
        a, b = simulate(rng, 1.0, items, seeds, seed_sd), simulate(rng, 0.7, items, seeds, seed_sd)
        units = np.full(200, 4)
        ga = Group(a.sum(1) / 800, (Part("test", a, units),))
        gb = Group(b.sum(1) / 800, (Part("test", b, units),))
        m, d, plain = mean(ga, 500), difference(ga, gb, 500), mean(Group(ga.values))
        covered += m.ci_low <= truth_a <= m.ci_high
        covered_difference += d.ci_low <= truth_a - truth_b <= d.ci_high
        covered_seeds_only += plain.ci_low <= truth_a <= plain.ci_high
    assert covered / trials >= 0.93 and covered_difference / trials >= 0.93
    if seed_sd < item_sd / 5:  # the test set's own luck dominates: seeds alone under-cover
        assert covered_seeds_only / trials < covered / trials
