"""The one claim rule of every verdict, preset and frontier: a comparison of A and B is judged only where both beat
their own untrained control on that yardstick (otherwise it is "not measurable"), and every outcome comes from a
Holm-corrected p within a family that is named and whose size is stated.

A family is a list of tests that answer one question together (the gains over the controls on one yardstick; the
comparisons between objectives on it; a preset's claims). Holm's step-down keeps the chance of any false claim in the
family under ALPHA.
"""

from __future__ import annotations

import math

ALPHA = 0.05

# outcomes of a comparison of A and B (outcome())
AHEAD, BEHIND, NOT_SEPARATED, NOT_MEASURABLE = "ahead", "behind", "not separated", "not measurable"


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


def family(name: str, tests: list[dict]) -> dict:
    """Holm-adjust the tests' "p" into "p_holm" (in place) and name the family: {"family", "size"}, its size being the
    number of tests that have a p-value."""
    for test, adjusted in zip(tests, holm([t.get("p") for t in tests])):
        test["p_holm"], test["family"] = adjusted, name
    return {"family": name, "size": sum(t.get("p") is not None for t in tests)}


def significant(test: dict | None) -> bool:
    return bool(test) and test.get("p_holm") is not None and test["p_holm"] < ALPHA


def beats_control(gain: dict | None) -> bool:
    """A gain over the untrained control, positive and significant within its family."""
    return bool(gain) and gain["estimate"] > 0 and significant(gain)


def measurable(gains: dict[str, dict], first: str, second: str) -> bool:
    """Whether A and B may be compared on a yardstick: both beat their own untrained control on it."""
    return beats_control(gains.get(first)) and beats_control(gains.get(second))


def outcome(test: dict) -> str:
    """A judged comparison's outcome for its first objective: ahead or behind (Holm p < ALPHA), else not separated;
    "not measurable" where it was not judged."""
    if test.get("outcome") == NOT_MEASURABLE:
        return NOT_MEASURABLE
    if not significant(test):
        return NOT_SEPARATED
    return AHEAD if test["estimate"] > 0 else BEHIND
