"""How sure a score is: a bootstrap over seeds and, across all of them at once, over the test examples.

Every backbone of a comparison is scored on the same test examples, so a test set that happened to be easy lifts all
of them alike: the spread over seeds alone leaves that out (a probe scored on ~1,000 positions has a binomial SE near
0.013, more than most seed-to-seed spreads here). Each resample draws the seeds of every group afresh and one set of
test examples (clusters: a window or an example, with all its scored positions) shared by every group, and recomputes
each score as hits over units on the drawn examples. A difference of two groups on the same test set is thereby paired
in its examples, as it should be: their common luck cancels.

Intervals are the estimate ± t(0.975, df) × the bootstrap's standard deviation, never percentiles: with five seeds a
percentile interval under-covers (tests/analysis/test_uncertainty.py measures both). df is n − 1 for one group and
Welch–Satterthwaite's from the seeds' own spread for a difference; p-values invert the same t.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

RESAMPLES = 2000


@dataclass(frozen=True)
class Part:
    """One test set's share of a score: hits and units per test example (seeds × examples), weighted. A score is
    Σ weight · Σ hits / Σ units over its parts (one part for a task; one per task for an average over tasks)."""

    clusters: str  # the test set's name: resamples draw one set of its examples for every group
    hits: np.ndarray  # (seeds, examples)
    units: np.ndarray  # (examples,) the scored positions of each example
    weight: float = 1.0


@dataclass(frozen=True)
class Group:
    """The seeds of one objective (or one untrained control) on one yardstick: each seed's value, and, where the
    score is a mean over scored positions, its hits per test example."""

    values: np.ndarray  # (seeds,)
    parts: tuple[Part, ...] | None = None  # None: the test set's sampling is unknown (a metric that is not a mean)

    @property
    def seeds(self) -> int:
        return len(self.values)


def draws(groups: list[Group], resamples: int = RESAMPLES, seed: int = 0) -> dict[str, np.ndarray]:
    """One resampling plan for `groups`: per test set, its examples' multiplicities in each resample (resamples ×
    examples), shared by every score and difference read from these groups."""
    sizes = {part.clusters: part.units.shape[0] for group in groups for part in group.parts or ()}
    return multiplicities(tuple(sizes.items()), resamples, seed)


@functools.lru_cache(maxsize=8)
def multiplicities(sizes: tuple[tuple[str, int], ...], resamples: int, seed: int) -> dict[str, np.ndarray]:
    """The draws themselves, made once per plan: a verdict reads the same test sets dozens of times, and drawing
    2,000 multinomials over 2,000 examples takes most of a second. Read-only, as every reader shares them. As floats
    (whole numbers, so every sum of them is exact) so that weighting hits by them is a BLAS product, not numpy's far
    slower integer one."""
    rng = np.random.default_rng(seed)
    found = {name: rng.multinomial(size, np.full(size, 1 / size), size=resamples).astype(np.float64)
             for name, size in sizes}
    for drawn in found.values():
        drawn.setflags(write=False)
    return found


def stretched(drawn: np.ndarray, centre: np.ndarray, seeds: int) -> np.ndarray:
    """Means of `seeds` values drawn with replacement, spread about the mean of all of them (`centre`) by
    √(n/(n − 1)): such means vary by (n − 1)/n · s²/n, not the s²/n a t interval is built on, so with five seeds
    their SD alone would make every interval 11 % too narrow (t × SD covering about 93 %, not 95 %). Stretched, a
    mean's resamples vary by exactly s²/n, as the analytic intervals here assume (the rescaled bootstrap)."""
    return drawn if seeds < 2 else centre + math.sqrt(seeds / (seeds - 1)) * (drawn - centre)


def resampled(group: Group, weights: dict, seeds: np.ndarray) -> np.ndarray:
    """(resamples,) the group's mean score in each resample: the test examples drawn as `weights` say, the seeds as
    `seeds` say, the seeds' spread stretched to s²/n (stretched)."""
    if group.parts is None:
        return stretched(group.values[seeds].mean(1), group.values.mean(), group.seeds)
    total = np.zeros(len(seeds))
    for part in group.parts:
        drawn = weights[part.clusters]  # (resamples, examples)
        per_seed = (part.hits @ drawn.T) / np.maximum(part.units @ drawn.T, 1)  # (seeds, resamples)
        # about the mean of every seed on the same drawn examples: only the seeds' part of the spread is stretched
        total += part.weight * stretched(np.take_along_axis(per_seed.T, seeds, axis=1).mean(1), per_seed.mean(0),
                                         group.seeds)
    return total


def seed_variance(group: Group) -> float:
    """s²/n: the variance of the seeds' mean when the test set is held fixed (nan with one seed)."""
    return float(group.values.var(ddof=1)) / group.seeds if group.seeds > 1 else float("nan")


def t_interval(estimate: float, spread: float, df: float) -> tuple[float | None, float | None, float | None]:
    """(low, high, two-sided p against 0) of estimate ± t(0.975, df) · spread; Nones where df < 1 (one seed)."""
    if not df >= 1 or not math.isfinite(spread):
        return None, None, None
    half = float(stats.t.ppf(0.975, df)) * spread
    p = (1.0 if estimate == 0 else 0.0) if spread == 0 else float(2 * stats.t.sf(abs(estimate) / spread, df))
    return estimate - half, estimate + half, p


@dataclass(frozen=True)
class Estimate:
    estimate: float
    ci_low: float | None
    ci_high: float | None
    p: float | None  # two-sided, against 0 (a difference's test); None for a single group's mean
    se: float
    df: float | None
    test_sampling: bool  # whether the test examples were resampled too

    def record(self) -> dict:
        return {"estimate": self.estimate, "ci_low": self.ci_low, "ci_high": self.ci_high, "p": self.p,
                "se": self.se, "df": self.df if self.df is None or math.isfinite(self.df) else None,
                "test_sampling": self.test_sampling}


def item_variance(groups: list[Group], signs: list[float], resamples: int, seed: int) -> tuple[float, int]:
    """The variance of Σ sign · mean(group) over resampled test examples, every seed kept (the test set's own
    sampling, shared by every group), and the fewest examples of a test set (its degrees of freedom + 1)."""
    weights = draws(groups, resamples, seed)
    kept = [np.broadcast_to(np.arange(group.seeds), (resamples, group.seeds)) for group in groups]
    total = sum(sign * resampled(group, weights, seeds) for group, sign, seeds in zip(groups, signs, kept))
    return float(np.var(total)), min(w.shape[1] for w in weights.values())


def combined(seed_parts: list[tuple[float, int]], groups: list[Group], signs: list[float], resamples: int,
             seed: int) -> tuple[float, float]:
    """(standard error, df): the seeds' variances (each with n − 1 df) plus, where every group has its hits per test
    example, the test set's (its examples − 1 df), joined by Welch–Satterthwaite."""
    variance = sum(v for v, _ in seed_parts)
    denominator = sum(v ** 2 / (n - 1) for v, n in seed_parts if n > 1 and v > 0)
    if all(group.parts is not None for group in groups):
        items, examples = item_variance(groups, signs, resamples, seed)
        variance += items
        denominator += items ** 2 / max(examples - 1, 1)
    if any(n < 2 for _, n in seed_parts):
        return float("nan"), float("nan")
    df = variance ** 2 / denominator if denominator > 0 else float(min(n for _, n in seed_parts) - 1)
    return math.sqrt(variance), df


def mean(group: Group, resamples: int = RESAMPLES, seed: int = 0) -> Estimate:
    """The group's mean score with its 95 % interval."""
    spread, df = combined([(seed_variance(group), group.seeds)], [group], [1.0], resamples, seed)
    low, high, _ = t_interval(float(group.values.mean()), spread, df)
    return Estimate(float(group.values.mean()), low, high, None, spread, df, group.parts is not None)


def difference(a: Group, b: Group, resamples: int = RESAMPLES, seed: int = 0) -> Estimate:
    """mean(a) − mean(b) with its 95 % interval and two-sided p, the test examples paired (drawn once for both)."""
    return contrast([a, b], [1.0, -1.0], resamples, seed)


def contrast(groups: list[Group], signs: list[float], resamples: int = RESAMPLES, seed: int = 0) -> Estimate:
    """Σ sign · mean(group) with its 95 % interval and two-sided p, the test examples drawn once for every group:
    a difference (a − b), or a difference of gains ((a − its control) − (b − its control)). Each group's seeds
    count as independent of the others', so a run and its own control (which share an initialisation) are not
    paired: their interval is, if anything, wide."""
    spread, df = combined([(seed_variance(g), g.seeds) for g in groups], groups, signs, resamples, seed)
    estimate = float(sum(sign * g.values.mean() for g, sign in zip(groups, signs)))
    low, high, p = t_interval(estimate, spread, df)
    return Estimate(estimate, low, high, p, spread, df, all(g.parts is not None for g in groups))
