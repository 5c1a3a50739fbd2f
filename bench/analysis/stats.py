"""Statistics across seeds: mean with a Student-t confidence interval, and Welch's test against a baseline (its
p-value, and the confidence interval of the difference it tests)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats


@dataclass(frozen=True)
class Summary:
    mean: float
    half_width: float  # of the confidence interval; NaN with a single seed
    n: int

    def format(self, digits: int = 3) -> str:
        if math.isnan(self.half_width):
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}"


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


def welch_p_value(values: list[float], baseline: list[float]) -> float:
    """Two-sided p-value of Welch's unequal-variance t-test; NaN when either side has fewer than two values or
    both have no spread."""
    if len(values) < 2 or len(baseline) < 2:
        return float("nan")
    result = stats.ttest_ind(values, baseline, equal_var=False)
    return float(result.pvalue)


def welch_difference_interval(values: list[float], baseline: list[float],
                              confidence: float = 0.95) -> tuple[float, float]:
    """The two-sided confidence interval of mean(values) − mean(baseline) that Welch's test inverts (Welch-
    Satterthwaite degrees of freedom); (NaN, NaN) when either side has fewer than two values or there is no spread."""
    if len(values) < 2 or len(baseline) < 2:
        return float("nan"), float("nan")
    interval = stats.ttest_ind(values, baseline, equal_var=False).confidence_interval(confidence)
    return float(interval.low), float(interval.high)
