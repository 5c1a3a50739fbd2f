"""The compute multiplier of one objective against another on a yardstick with a curve over FLOPs: how much compute
the other would need to reach this one's value at the budget, read off the mean curves (linear in log-FLOPs between
checkpoints), with a 95 % interval from the bootstrap over seeds and test examples (bench.analysis.uncertainty).

Two readings: direct, the FLOPs the baseline first needs to reach the objective's final value over the budget; and,
where the baseline never gets there within its run, reversed, at the baseline's own final value: the FLOPs the
baseline first needed to reach it over those the objective first needed (the ELECTRA paper's reading; equal to the
direct one where the curves differ by a shift in compute). A resample whose reading is only a bound takes the other
reading's number where it has one, so an end of the interval is open only where neither reading reached it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from bench.analysis.findings import Multiplier
from bench.analysis.uncertainty import RESAMPLES, Group, draws, resampled

# crossing kinds: "=" reached at that many FLOPs; ">" not within the run (the value is the last checkpoint, a lower
# bound); "<" already past it at the first checkpoint (the value, that checkpoint, is an upper bound). A multiplier
# has one more: "?", bounded in opposite senses, so not read (see reversed_kind)
KINDS = ("=", ">", "<", "?")


def reversed_kind(base_kind: np.ndarray, other_kind: np.ndarray) -> np.ndarray:
    """The reversed multiplier's kind (index into KINDS): the baseline's FLOPs at its own final value over the
    objective's. The objective's are a lower bound where it never got there within its run (the multiplier is at
    most its value, "<") and an upper bound where it was already past it at its first checkpoint (at least, ">").
    The baseline's are exact, except where it was already past its own final value at its first checkpoint: only
    an upper bound, so the multiplier is at most its value ("<"), and not even that where the objective's side
    says at least ("?")."""
    at_most, at_least = (base_kind == 2) | (other_kind == 1), other_kind == 2
    return np.where(at_most & at_least, 3, np.where(at_most, 2, np.where(at_least, 1, 0)))


@dataclass(frozen=True)
class Curve:
    """One objective on one yardstick: its checkpoints, a Group per checkpoint and at the budget (the same seeds);
    `control`, its untrained control, where two objectives' controls differ: the curve is then its gain over that
    control (the control's mean, resampled with it), so that what pretraining added is compared, not where each
    attention mode starts."""

    flops: np.ndarray  # (checkpoints,)
    points: tuple[Group, ...]
    final: Group
    control: Group | None = None


def crossings(curves: np.ndarray, log_flops: np.ndarray, targets: np.ndarray,
              higher_is_better: bool) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised first crossing of each curve (row) with its target: (kind index into KINDS, log-FLOPs)."""
    reached = curves >= targets[:, None] if higher_is_better else curves <= targets[:, None]
    first = reached.argmax(axis=1)  # the first crossing: a non-monotone curve is read where it first got there
    rows, prev = np.arange(len(curves)), np.maximum(first - 1, 0)
    v0, v1 = curves[rows, prev], curves[rows, first]
    # first > 0 means the previous point had not reached the target, so v1 != v0; the guard is for first == 0 only
    t = np.where(first > 0, (targets - v0) / np.where(v1 == v0, 1.0, v1 - v0), 0.0)
    log_f = log_flops[prev] + t * (log_flops[first] - log_flops[prev])
    strictly_before = (first == 0) & (curves[:, 0] != targets)  # exactly equal at the first point is an answer
    kind = np.where(~reached.any(axis=1), 1, np.where(strictly_before, 2, 0))
    return kind, np.where(kind == 1, log_flops[-1], np.where(kind == 2, log_flops[0], log_f))


def readings(base: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray], base_flops: np.ndarray,
             other_flops: np.ndarray, budget: float, higher: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per row (the means, or a resample): {"direct" | "reversed": (kind, log multiplier)} from (curves, finals)."""
    (base_curves, base_final), (other_curves, other_final) = base, other
    kind, log_f = crossings(base_curves, np.log(base_flops), other_final, higher)
    found = {"direct": (kind, log_f - math.log(budget))}
    base_kind, log_base = crossings(base_curves, np.log(base_flops), base_final, higher)
    # the baseline's own final value is reached at the budget at the latest, whatever its checkpoints say
    log_base = np.where(base_kind == 1, math.log(budget), np.minimum(log_base, math.log(budget)))
    other_kind, log_other = crossings(other_curves, np.log(other_flops), base_final, higher)
    found["reversed"] = (reversed_kind(base_kind, other_kind), log_base - log_other)
    return found


def means(curve: Curve) -> tuple[np.ndarray, np.ndarray]:
    start = 0.0 if curve.control is None else curve.control.values.mean()
    return (np.array([[g.values.mean() - start for g in curve.points]]), np.array([curve.final.values.mean() - start]))


def resampled_curve(curve: Curve, weights: dict, seeds: np.ndarray,
                    control_seeds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(resamples × checkpoints, resamples): a seed's curve and final value are one run's, resampled together; less
    the control's mean in the same resample (its seeds drawn apart: a control is not paired with a run)."""
    start = 0.0 if curve.control is None else resampled(curve.control, weights, control_seeds)
    return (np.stack([resampled(g, weights, seeds) - start for g in curve.points], axis=1) if curve.control is None
            else np.stack([resampled(g, weights, seeds) for g in curve.points], axis=1) - start[:, None],
            resampled(curve.final, weights, seeds) - start)


FLIPPED = {"=": "=", "<": ">", ">": "<", "?": "?", None: None}


def inverted(found: Multiplier) -> Multiplier:
    """The same multiplier read the other way round (the baseline's worth against the objective): 1 / m, its
    interval 1 / high to 1 / low, each bound's sense flipped. One pair has one number: the answer quotes the table's
    entry this way when its leader is the table's baseline, never a second reading with its own interval."""
    flip = lambda value: None if value is None else 1 / value  # noqa: E731
    # a direct reading (where the baseline reached the objective's final value) read the other way round is where
    # the objective reached the baseline's: the reversed reading of the swapped pair, and the other way about
    return replace(found, objective=found.against, against=found.objective, multiplier=1 / found.multiplier,
                   kind=FLIPPED[found.kind], reading={"direct": "reversed", "reversed": "direct"}[found.reading],
                   bound=None, seeds=found.seeds[::-1], ci_low=flip(found.ci_high),
                   ci_high=flip(found.ci_low), ci_low_kind=FLIPPED[found.ci_high_kind],
                   ci_high_kind=FLIPPED[found.ci_low_kind], range=[1 / found.range[1], 1 / found.range[0]])


def multiplier(base: Curve, other: Curve, budget: float, higher_is_better: bool = True,
               resamples: int = RESAMPLES, seed: int = 0) -> Multiplier:
    """The compute multiplier of `other` against `base` (2: other is worth twice the compute), its reading, and its
    95 % interval: log-multiplier ± t(0.975, fewest seeds − 1) × the bootstrap's SD; an end is open (None) where more
    than 2.5 % of the resamples give only a bound on that side."""
    estimate = readings(means(base), means(other), base.flops, other.flops, budget, higher_is_better)
    reading = "reversed" if estimate["direct"][0][0] == 1 else "direct"
    kind, log_m = (part[0] for part in estimate[reading])
    found = {"multiplier": float(math.exp(log_m)), "kind": KINDS[int(kind)], "reading": reading,
             "on": "scores" if base.control is None else "gains",
             "seeds": [base.final.seeds, other.final.seeds], "ci_low": None, "ci_high": None,
             "ci_low_kind": None, "ci_high_kind": None, "resamples": 0,
             "range": [float(base.flops[0] / budget), float(base.flops[-1] / budget)]}
    if reading == "reversed":  # the bounds of an open reading: the baseline's FLOPs over the objective's last, first
        other_kind, log_other = crossings(means(other)[0], np.log(other.flops), means(base)[1], higher_is_better)
        at_base = math.exp(log_m) * float(np.exp(log_other[0]))
        found["range"] = [at_base / float(other.flops[-1]), at_base / float(other.flops[0])]
        if KINDS[int(kind)] == "<" and other_kind[0] != 1:  # the bound is the baseline's, not the objective's
            found["bound"] = "baseline"
    if min(found["seeds"]) < 2 or resamples < 1:
        return Multiplier(**found)
    controls = [curve.control for curve in (base, other) if curve.control is not None]
    groups = [*base.points, base.final, *other.points, other.final, *controls]
    weights = draws(groups, resamples, seed)
    rng = np.random.default_rng(seed + 1)

    def drawn_seeds(group: Group | None) -> np.ndarray | None:
        return None if group is None else rng.integers(0, group.seeds, (resamples, group.seeds))

    drawn = readings(resampled_curve(base, weights, drawn_seeds(base.final), drawn_seeds(base.control)),
                     resampled_curve(other, weights, drawn_seeds(other.final), drawn_seeds(other.control)),
                     base.flops, other.flops, budget, higher_is_better)
    (kinds, values), (other_kinds, other_values) = drawn.pop(reading), *drawn.values()
    swapped = (kinds != 0) & (other_kinds == 0)  # a bound where the other reading has a number
    kinds, values = np.where(swapped, 0, kinds), np.where(swapped, other_values, values)
    df = min(found["seeds"]) - 1
    half = float(stats.t.ppf(0.975, df)) * float(values.std())
    open_low, open_high = np.isin(kinds, (2, 3)).mean() > 0.025, np.isin(kinds, (1, 3)).mean() > 0.025
    found.update(resamples=resamples, read_the_other_way=float(swapped.mean()), log_se=float(values.std()), df=df,
                 test_sampling=all(g.parts is not None for g in groups),
                 ci_low=None if open_low else float(math.exp(log_m - half)), ci_low_kind="<" if open_low else "=",
                 ci_high=None if open_high else float(math.exp(log_m + half)), ci_high_kind=">" if open_high else "=")
    return Multiplier(**found)
