"""The one claim rule of every verdict, preset and frontier: a comparison of A and B is judged only where both beat
their own untrained control on that yardstick (otherwise it is "not measurable"), and every outcome comes from a
Holm-corrected p within a family that is named and whose size is stated.

A family is a list of tests that answer one question together (the gains over the controls on one yardstick; the
comparisons between objectives on it; a preset's claims). Holm's step-down keeps the chance of any false claim in the
family under ALPHA.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Protocol, TypeVar

from bench.analysis.findings import AHEAD, BEHIND, NOT_MEASURABLE, NOT_SEPARATED, Comparison, Family, Gain
from bench.analysis.paper_findings import ClaimTest, MultiplierTest

__all__ = ["ALPHA", "AHEAD", "BEHIND", "NOT_MEASURABLE", "NOT_SEPARATED", "beats_control", "family", "holm",
           "measurable", "outcome", "significant"]

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
