"""The one claim rule of every verdict, preset and frontier: a comparison of A and B is judged only where both beat
their own untrained control on that yardstick (otherwise it is "not measurable"), and every outcome comes from a
Holm-corrected p within a family that is named and whose size is stated.

A family is a list of tests that answer one question together (the gains over the controls on one yardstick; the
comparisons between objectives on it; a preset's claims). Holm's step-down keeps the chance of any false claim in the
family under ALPHA. An interval printed beside a two-sided test's outcome is the one that agrees with it
(holm_interval): it excludes 0 exactly when the test rejects.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Protocol, TypeVar

from scipy import stats

from bench.analysis.findings import AHEAD, BEHIND, NOT_MEASURABLE, NOT_SEPARATED, Comparison, Family, Gain
from bench.analysis.paper_findings import ClaimTest, MultiplierTest

__all__ = ["ALPHA", "AHEAD", "BEHIND", "NOT_MEASURABLE", "NOT_SEPARATED", "beats_control", "family", "holm",
           "holm_interval", "measurable", "outcome", "significant"]

ALPHA = 0.05

T = TypeVar("T", Gain, Comparison, ClaimTest, MultiplierTest)  # the tests Holm is applied to


class Tested(Protocol):
    """A test after Holm: a Gain, a Comparison, a sweep's GainAt."""

    estimate: float
    p_holm: float | None


def finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1); None passes through and is not counted
    as a comparison."""
    present = [(p, i) for i, p in enumerate(p_values) if finite_or_none(p) is not None]
    adjusted: list[float | None] = [None] * len(p_values)
    m, running = len(present), 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        # the running max keeps the adjusted values in the same order as the raw ones (the step-down rule)
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def family(name: str, tests: list[T], untested: int = 0) -> tuple[list[T], Family]:
    """The tests with their "p" Holm-adjusted into "p_holm" and the family named, and the family: its size is the
    number of tests that have a p-value, plus `untested` ones counted as tested with p = 1 (a comparison the gate
    left not measurable: the family is fixed by what was compared, not by what the data let through)."""
    adjusted_p = holm([t.p for t in tests] + [1.0] * untested)[:len(tests)]
    adjusted = [replace(test, p_holm=p_holm, family=name) for test, p_holm in zip(tests, adjusted_p)]
    return adjusted, Family(name, sum(t.p is not None for t in tests) + untested)


def holm_interval(test: object) -> tuple[float | None, float | None]:
    """The interval that agrees with a two-sided test's Holm outcome: estimate ± t(1 − a/2, df) · se at a = ALPHA ·
    p / p_holm, the level Holm's step-down applied to this test (p_holm / p, between 1 and the family's size, is the
    factor it multiplied p by; the first step's is Bonferroni's). Its p inverts the same t, so the interval excludes 0
    exactly when p_holm < ALPHA; each is at least a 95 % interval. (None, None) where the test has none: one seed, no
    Holm p, or a record without its standard error (a sweep's written before these intervals)."""
    p, p_holm, se, df = (getattr(test, name, None) for name in ("p", "p_holm", "se", "df"))
    if p is None or p_holm is None or se is None or df is None or not df >= 1 or not math.isfinite(se):
        return None, None
    estimate = test.estimate  # type: ignore[attr-defined]
    if se == 0:
        return estimate, estimate
    level = ALPHA * (p / p_holm if p > 0 and p_holm > 0 else 1.0)  # p = 0: rejected at any level t can reach
    half = float(stats.t.ppf(1 - level / 2, df)) * se
    return estimate - half, estimate + half


def significant(test: Tested | None) -> bool:
    return test is not None and test.p_holm is not None and test.p_holm < ALPHA


def beats_control(gain: Tested | None) -> bool:
    """A gain over the untrained control, positive and significant within its family."""
    return gain is not None and gain.estimate > 0 and significant(gain)


def measurable(gains: dict[str, Gain], first: str, second: str) -> bool:
    """Whether A and B may be compared on a yardstick: both beat their own untrained control on it."""
    return beats_control(gains.get(first)) and beats_control(gains.get(second))


def outcome(test: Tested) -> str:
    """A judged comparison's outcome for its first objective: ahead or behind (Holm p < ALPHA), else not separated."""
    if not significant(test):
        return NOT_SEPARATED
    return AHEAD if test.estimate > 0 else BEHIND
