"""Statistics across seeds: the mean with its Student-t confidence interval (the tables' and the plots' bands)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats


@dataclass(frozen=True)
class Summary:
    mean: float
    half_width: float  # of the confidence interval; NaN with a single seed
    n: int


def summarize(values: list[float], confidence: float = 0.95) -> Summary:
    """Mean ± the half-width of the two-sided t-interval: t_{(1+c)/2, n-1} · s / sqrt(n)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to summarize")
    mean = sum(values) / n
    if n < 2:
        return Summary(mean, float("nan"), n)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return Summary(mean, float(stats.t.ppf((1 + confidence) / 2, n - 1)) * sd / math.sqrt(n), n)
