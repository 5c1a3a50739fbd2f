"""Verdicts a reader can act on: who leads each yardstick and whether that is significant, and how much compute the
baseline would need to match another objective (the compute multiplier, with a bootstrap CI over seeds).

Everything returned is plain JSON: numbers that do not exist (a CI from one seed, a p-value with nothing to compare)
are None, never NaN, so `json.dumps(..., allow_nan=False)` always works.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

from bench.analysis.stats import summarize, welch_difference_interval, welch_p_value

ALPHA = 0.05
# crossing kinds: "=" the baseline reaches the target at that many FLOPs; ">" not within the run (the value is the
# last checkpoint, a lower bound); "<" already past it at the first checkpoint (the value, that checkpoint, is an
# upper bound)
_KINDS = ("=", ">", "<")


def _finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def holm(p_values: list[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (step-down, monotone, capped at 1); None (or NaN) passes through and is not
    counted as a comparison."""
    present = [(p, i) for i, p in enumerate(p_values) if _finite_or_none(p) is not None]
    adjusted: list[float | None] = [None] * len(p_values)
    m, running = len(present), 0.0
    for rank, (p, i) in enumerate(sorted(present)):
        # the running max keeps the adjusted values in the same order as the raw ones (the step-down rule)
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def signal_density_ratio(positions_other: float, positions_baseline: float) -> float:
    """Supervised positions per sequence of the other objective over the baseline's (e.g. AR vs MLM at 15%: ~6.7)."""
    if positions_baseline <= 0:
        raise ValueError(f"the baseline supervises {positions_baseline} positions per sequence; need > 0")
    return positions_other / positions_baseline


# --- which objective leads a yardstick ---------------------------------------------------------------------------

def _rows(values: dict[str, list[float]], baseline: str, higher_is_better: bool) -> list[dict]:
    raw_p = {}
    for spec, seeds in values.items():
        if spec == baseline:
            continue
        with warnings.catch_warnings():  # scipy warns when both sides have no spread; the p-value is still defined
            warnings.simplefilter("ignore", RuntimeWarning)
            raw_p[spec] = _finite_or_none(welch_p_value(seeds, values[baseline]))
    adjusted = dict(zip(raw_p, holm(list(raw_p.values()))))
    rows = []
    for spec, seeds in values.items():
        s = summarize(seeds)
        half = _finite_or_none(s.half_width)
        rows.append({"objective": spec, "seeds": s.n, "mean": s.mean, "ci95": half,
                     "ci_low": None if half is None else s.mean - half,
                     "ci_high": None if half is None else s.mean + half,
                     "p_vs_baseline": raw_p.get(spec), "p_holm": adjusted.get(spec)})
    # sorted() is stable: equal means keep the objective order, so the baseline wins exact ties
    rows = sorted(rows, key=lambda r: -r["mean"] if higher_is_better else r["mean"])
    for rank, row in enumerate(rows, 1):
        row["rank"] = rank
    return rows


def _g(x: float) -> str:
    return f"{x:.4g}"


def _p(p: float) -> str:
    return "p < 0.0001" if p < 1e-4 else f"p = {p:.2g}"


def _sentence(rows: list[dict], baseline: str, label: str, higher_is_better: bool) -> str:
    leader = rows[0]
    if len(rows) == 1:
        return f"Only {leader['objective']} was measured on {label}: there is nothing to compare."
    # The difference we state is the one Holm tested: the leader against the baseline, or, when the baseline leads,
    # the best challenger against it.
    other = rows[1] if leader["objective"] == baseline else next(r for r in rows if r["objective"] == baseline)
    challenger = other if leader["objective"] == baseline else leader
    diff = abs(leader["mean"] - other["mean"])
    side = "higher" if higher_is_better else "lower"
    means = f"{_g(leader['mean'])} vs {_g(other['mean'])}, {side} is better"
    vs = "the baseline " + other["objective"] if other["objective"] == baseline else other["objective"]
    one_seed = [r["objective"] for r in rows if r["seeds"] < 2]
    if one_seed:
        prefix = ("With one seed per objective" if len(one_seed) == len(rows)
                  else f"With one seed for {', '.join(one_seed)}")
        where = "on this one seed" if len(one_seed) == len(rows) else "on the point estimates"
        return (f"{prefix} no claim can be made on {label}: {leader['objective']} is ahead {where} by "
                f"{_g(diff)} over {vs} ({means}).")
    p = challenger["p_holm"]
    if p is not None and p < ALPHA:
        return (f"{leader['objective']} leads on {label} by {_g(diff)} over {vs} ({means}), significant at "
                f"{ALPHA} after Holm correction ({_p(p)}).")
    p_text = "no spread to test" if p is None else f"{_p(p)} after Holm correction"
    return (f"{leader['objective']} and {vs} cannot be told apart on {label}: {leader['objective']} is ahead by "
            f"{_g(diff)} ({means}) but the difference is not significant at {ALPHA} ({p_text}).")


def yardstick_verdict(name: str, values: dict[str, list[float]], baseline: str, higher_is_better: bool = True,
                      label: str | None = None) -> dict:
    """Rows best first (mean, t-CI, Welch p vs the baseline, Holm-adjusted p, rank), the leader, whether best and
    worst are separated beyond their CIs, and one plain sentence saying who leads and whether it is significant."""
    if baseline not in values:
        raise ValueError(f"baseline {baseline!r} is not among the objectives {list(values)}")
    for spec, seeds in values.items():
        if not seeds or not all(math.isfinite(v) for v in seeds):
            raise ValueError(f"{name}: {spec} needs one or more finite values, got {seeds}")
    rows = _rows(values, baseline, higher_is_better)
    best, worst = rows[0], rows[-1]
    separated = (len(rows) > 1 and best["ci95"] is not None and worst["ci95"] is not None
                 and abs(best["mean"] - worst["mean"]) > best["ci95"] + worst["ci95"])
    return {"yardstick": name, "higher_is_better": higher_is_better, "baseline": baseline, "rows": rows,
            "leader": best["objective"], "separated": separated,
            "sentence": _sentence(rows, baseline, label or name, higher_is_better)}


# --- what pretraining bought: the gain over the untrained control -----------------------------------------------

def gain_over_control(values: list[float], control: list[float], ceiling: float | None = None,
                      higher_is_better: bool = True) -> dict:
    """An objective's gain on a yardstick over its own untrained control (the backbones its runs start from): the
    difference of means, Welch's 95 % CI of it and p-value (None with fewer than two values a side, or no spread),
    and the share of the available gain closed, (mean − control) / (ceiling − control), where a ceiling is known and
    lies beyond the control. Where lower is better the gain is control − mean (a gain is always an improvement).
    p_holm is filled in by `holm_gains` over the whole family."""
    if not values or not control:
        raise ValueError("a gain needs values on both sides")
    mean, control_mean = sum(values) / len(values), sum(control) / len(control)
    with warnings.catch_warnings():  # scipy warns when both sides have no spread; the numbers are still defined
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = welch_difference_interval(values, control)
        p = _finite_or_none(welch_p_value(values, control))
    sign = 1.0 if higher_is_better else -1.0
    if not higher_is_better:
        low, high = -high, -low
    gain, available = sign * (mean - control_mean), None if ceiling is None else sign * (ceiling - control_mean)
    return {"gain": gain, "ci_low": _finite_or_none(low), "ci_high": _finite_or_none(high), "p": p,
            "p_holm": None, "control_mean": control_mean,
            "share_of_gain": gain / available if available and available > 0 else None}


def holm_gains(gains: list[dict]) -> None:
    """Holm-adjust the gains' p-values across the family (every objective on every yardstick), in place."""
    for gain, adjusted in zip(gains, holm([g["p"] for g in gains])):
        gain["p_holm"] = adjusted


def beats_control(gain: dict) -> bool:
    return gain["gain"] > 0 and gain["p_holm"] is not None and gain["p_holm"] < ALPHA


def rise_with_compute(flops: list[float], values: list[float]) -> float | None:
    """Spearman's ρ of a mean curve against its FLOPs (0 for the untrained control): 1 when it only rises; None for
    a flat curve or fewer than three points."""
    if len(values) < 3 or len(set(values)) < 2:
        return None
    return _finite_or_none(float(stats.spearmanr(flops, values)[0]))


# --- the compute multiplier --------------------------------------------------------------------------------------

def _crossings(curves: np.ndarray, log_flops: np.ndarray, targets: np.ndarray,
               higher_is_better: bool) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised first crossing of each curve (row) with its target: (kind index into _KINDS, log-FLOPs)."""
    reached = curves >= targets[:, None] if higher_is_better else curves <= targets[:, None]
    first = reached.argmax(axis=1)  # the first crossing, so non-monotone curves are read as they first got there
    any_reached = reached.any(axis=1)
    rows = np.arange(len(curves))
    prev = np.maximum(first - 1, 0)
    v0, v1 = curves[rows, prev], curves[rows, first]
    # first > 0 means the previous point had not reached the target, so v1 != v0; the guard is for first == 0 only
    t = np.where(first > 0, (targets - v0) / np.where(v1 == v0, 1.0, v1 - v0), 0.0)
    log_f = log_flops[prev] + t * (log_flops[first] - log_flops[prev])
    strictly_before = (first == 0) & (curves[:, 0] != targets)  # exactly equal at the first point is an exact answer
    kind = np.where(~any_reached, 1, np.where(strictly_before, 2, 0))
    log_f = np.where(kind == 1, log_flops[-1], np.where(kind == 2, log_flops[0], log_f))
    return kind, log_f


def interpolate_flops(curve: list[tuple[float, float]], target: float, higher_is_better: bool) -> tuple[str, float]:
    """FLOPs at which the curve first reaches target, linear in log-FLOPs between checkpoints: ("=", flops), or
    (">", last checkpoint) when never reached, or ("<", first checkpoint) when already past it at the first."""
    flops, values = _check_curve(curve)
    kind, log_f = _crossings(values[None, :], np.log(flops), np.array([float(target)]), higher_is_better)
    return _KINDS[int(kind[0])], float(np.exp(log_f[0]))


def _check_curve(curve: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    points = np.asarray(curve, dtype=float)
    if points.ndim != 2 or points.shape[1] != 2 or len(points) == 0:
        raise ValueError("a curve is a non-empty list of (flops, value) points")
    if not np.isfinite(points).all() or (points[:, 0] <= 0).any() or (np.diff(points[:, 0]) <= 0).any():
        raise ValueError("a curve needs finite values at positive, strictly increasing FLOPs")
    return points[:, 0], points[:, 1]


def _baseline_matrix(baseline_curves: list[list[tuple[float, float]]]) -> tuple[np.ndarray, np.ndarray]:
    """(checkpoint FLOPs, seeds × checkpoints values); seeds must share their checkpoints, or means mix budgets."""
    if not baseline_curves:
        raise ValueError("no baseline curves")
    checked = [_check_curve(c) for c in baseline_curves]
    flops = checked[0][0]
    for other, _ in checked[1:]:
        if len(other) != len(flops) or not np.allclose(other, flops, rtol=1e-6, atol=0.0):
            raise ValueError("baseline seeds must share their FLOP checkpoints")
    return flops, np.stack([values for _, values in checked])


def _bootstrap_ci(kinds: np.ndarray, multipliers: np.ndarray) -> dict:
    """Percentile 95% CI of the resampled multipliers. Bounds sort to the ends on their own (a "<" is the first
    checkpoint, below every exact crossing; a ">" the last, above every one), so the percentiles are taken over all
    resamples; an end is open when more than 2.5% of the resamples are bounds on that side."""
    low, high = np.percentile(multipliers, [2.5, 97.5])
    open_low, open_high = (kinds == 2).mean() > 0.025, (kinds == 1).mean() > 0.025
    return {"ci_low": None if open_low else float(low), "ci_low_kind": "<" if open_low else "=",
            "ci_high": None if open_high else float(high), "ci_high_kind": ">" if open_high else "="}


def compute_multiplier(baseline_curves: list[list[tuple[float, float]]], other_final: list[float], budget: float,
                       higher_is_better: bool = True, resamples: int = 2000, seed: int = 0) -> dict:
    """FLOPs the baseline needs (mean curve over seeds, linear in log-FLOPs) to reach the other objective's mean
    value at the budget, over the budget: 2 means the other objective is worth twice the compute. Kind ">" / "<"
    when the crossing lies past the run's last / before its first checkpoint (the value is then that bound). The CI
    resamples baseline seeds and other seeds independently; it needs two or more seeds on each side."""
    flops, matrix = _baseline_matrix(baseline_curves)
    finals = np.asarray(other_final, dtype=float)
    if len(finals) == 0 or not np.isfinite(finals).all():
        raise ValueError(f"the other objective needs one or more finite final values, got {other_final}")
    if not budget > 0:
        raise ValueError(f"budget must be positive, got {budget}")
    log_flops = np.log(flops)
    kind, log_f = _crossings(matrix.mean(axis=0)[None, :], log_flops, finals.mean(keepdims=True), higher_is_better)
    result = {"multiplier": float(np.exp(log_f[0]) / budget), "kind": _KINDS[int(kind[0])],
              "target": float(finals.mean()), "budget": float(budget),
              "range": [float(flops[0] / budget), float(flops[-1] / budget)],
              "seeds": [len(matrix), len(finals)], "resamples": 0,
              "ci_low": None, "ci_low_kind": None, "ci_high": None, "ci_high_kind": None}
    if len(matrix) >= 2 and len(finals) >= 2 and resamples > 0:
        rng = np.random.default_rng(seed)
        base_idx = rng.integers(0, len(matrix), size=(resamples, len(matrix)))
        other_idx = rng.integers(0, len(finals), size=(resamples, len(finals)))
        kinds, log_fs = _crossings(matrix[base_idx].mean(axis=1), log_flops, finals[other_idx].mean(axis=1),
                                   higher_is_better)
        result.update(_bootstrap_ci(kinds, np.exp(log_fs) / budget), resamples=resamples)
    result["text"] = format_multiplier(result)
    return result


# the objective's crossing read as the reversed multiplier's kind: never reached (">") bounds it from above ("<"),
# already past at its first checkpoint ("<") from below (">")
_REVERSED = np.array([0, 2, 1])


def _reversed_log_ratio(base_means: np.ndarray, base_flops: np.ndarray, other_means: np.ndarray,
                        other_flops: np.ndarray, targets: np.ndarray, budget: float,
                        higher_is_better: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: (the objective's crossing kind, the baseline's log-FLOPs at the target, the log of their ratio)."""
    base_kind, log_base = _crossings(base_means, np.log(base_flops), targets, higher_is_better)
    # its final value is reached at the budget at the latest, whatever its checkpoints say
    log_base = np.where(base_kind == 1, np.log(budget), np.minimum(log_base, np.log(budget)))
    other_kind, log_other = _crossings(other_means, np.log(other_flops), targets, higher_is_better)
    return other_kind, log_base, log_base - log_other


def reversed_multiplier(baseline_curves: list[list[tuple[float, float]]],
                        other_curves: list[list[tuple[float, float]]], baseline_final: list[float], budget: float,
                        higher_is_better: bool = True, resamples: int = 2000, seed: int = 0) -> dict:
    """Where the baseline's run never reaches the other objective's value (kind ">"), the other reading, at the
    baseline's own final value: the FLOPs the baseline first needed to reach it over the FLOPs the objective first
    needed (mean curves, linear in log-FLOPs). It is the ELECTRA paper's reading ("matches RoBERTa with a quarter of
    the compute"), equal to the direct one where the two curves are one curve shifted in log-FLOPs. The baseline's
    side is its first crossing, not the budget: a baseline that peaked and fell back would otherwise hand the other
    objective the compute it spent going nowhere. Kind ">" where the objective was already past that value at its
    first checkpoint, "<" where it never reached it; the CI resamples both sides."""
    base_flops, base = _baseline_matrix(baseline_curves)
    other_flops, other = _baseline_matrix(other_curves)
    finals = np.asarray(baseline_final, dtype=float)
    if len(finals) == 0 or not np.isfinite(finals).all():
        raise ValueError(f"the baseline needs one or more finite final values, got {baseline_final}")
    kind, log_base, ratio = _reversed_log_ratio(base.mean(0)[None, :], base_flops, other.mean(0)[None, :], other_flops,
                                                finals.mean(keepdims=True), budget, higher_is_better)
    at_base = float(np.exp(log_base[0]))  # an open interval's bounds: over the objective's last and first checkpoint
    result = {"multiplier": float(np.exp(ratio[0])), "kind": _KINDS[int(_REVERSED[kind[0]])],
              "target": float(finals.mean()), "budget": float(budget), "baseline_flops": at_base,
              "range": [at_base / float(other_flops[-1]), at_base / float(other_flops[0])],
              "seeds": [len(base), len(other)], "resamples": 0,
              "ci_low": None, "ci_low_kind": None, "ci_high": None, "ci_high_kind": None}
    if len(base) >= 2 and len(other) >= 2 and resamples > 0:
        rng = np.random.default_rng(seed)
        base_idx = rng.integers(0, len(base), size=(resamples, len(base)))
        other_idx = rng.integers(0, len(other), size=(resamples, len(other)))
        # a baseline seed's curve and final value are one run's: resampled together where they line up
        final_idx = base_idx if len(finals) == len(base) else rng.integers(0, len(finals), (resamples, len(finals)))
        kinds, _, ratios = _reversed_log_ratio(base[base_idx].mean(1), base_flops, other[other_idx].mean(1),
                                               other_flops, finals[final_idx].mean(1), budget, higher_is_better)
        result.update(_bootstrap_ci(_REVERSED[kinds], np.exp(ratios)), resamples=resamples)
    result["text"] = format_multiplier(result, reversed_reading=True)
    return result


def two_way_ci(baseline_curves: list[list[tuple[float, float]]], other_curves: list[list[tuple[float, float]]],
               baseline_final: list[float], other_final: list[float], budget: float, higher_is_better: bool = True,
               reading: str = "direct", resamples: int = 2000, seed: int = 0) -> dict:
    """The CI of a multiplier read one way ("direct": compute_multiplier; "reversed": reversed_multiplier) where
    some resamples of seeds give that reading only a bound: there the other reading's number is taken where it has
    one. Where the two curves end close together, the objective ends ahead in some resamples and behind in others,
    and each reading alone leaves one end of the CI open though the run measured it. The draws are those of
    compute_multiplier and reversed_multiplier, so where no resample needs the other reading the CI is unchanged."""
    base_flops, base = _baseline_matrix(baseline_curves)
    other_flops, other = _baseline_matrix(other_curves)
    base_final, other_end = np.asarray(baseline_final, dtype=float), np.asarray(other_final, dtype=float)
    if not (len(base_final) and len(other_end) and np.isfinite(base_final).all() and np.isfinite(other_end).all()):
        raise ValueError(f"both sides need finite final values, got {baseline_final} and {other_final}")
    if len(base) < 2 or len(other) < 2 or resamples <= 0:
        return {}
    rng = np.random.default_rng(seed)
    base_idx = rng.integers(0, len(base), size=(resamples, len(base)))
    other_idx = rng.integers(0, len(other), size=(resamples, len(other)))
    # a seed's curve and final value are one run's: resampled together where they line up
    final_idx = base_idx if len(base_final) == len(base) else rng.integers(0, len(base_final),
                                                                           (resamples, len(base_final)))
    end_idx = other_idx if len(other_end) == len(other) else rng.integers(0, len(other_end),
                                                                         (resamples, len(other_end)))
    base_means, other_means = base[base_idx].mean(1), other[other_idx].mean(1)
    direct_kinds, log_f = _crossings(base_means, np.log(base_flops), other_end[end_idx].mean(1), higher_is_better)
    reversed_kinds, _, ratios = _reversed_log_ratio(base_means, base_flops, other_means, other_flops,
                                                    base_final[final_idx].mean(1), budget, higher_is_better)
    readings = {"direct": (direct_kinds, np.exp(log_f) / budget),
                "reversed": (_REVERSED[reversed_kinds], np.exp(ratios))}
    if reading not in readings:
        raise ValueError(f"reading is 'direct' or 'reversed', got {reading!r}")
    (kinds, values), (other_kinds, other_values) = readings.pop(reading), *readings.values()
    swapped = (kinds != 0) & (other_kinds == 0)  # a bound where the other reading has a number
    return {**_bootstrap_ci(np.where(swapped, 0, kinds), np.where(swapped, other_values, values)),
            "resamples": resamples, "read_the_other_way": float(swapped.mean())}


def _x(m: float) -> str:
    """A multiplier to read: two significant figures, no exponent notation for the sizes that occur."""
    return f"{m:.0f}" if m >= 100 else f"{m:.1f}" if m >= 10 else f"{m:.2g}"


def format_multiplier(result: dict, reversed_reading: bool = False) -> str:
    """E.g. "2.3× (1.8–3.1)", "0.6× (0.4 to > 1)", "> 1× (not reached within the run)",
    "1.7× (one seed: no CI)"; a reversed reading (both curves read at the baseline's final value) says so, and
    its bounds lie the other way round: "> 10× (reached at its first checkpoint)"."""
    m, kind = result["multiplier"], result["kind"]
    if reversed_reading and kind in ("<", ">"):
        return (f"> {_x(m)}× (reached at its first checkpoint)" if kind == ">" else
                f"< {_x(m)}× (it never reached the baseline's value)")
    if kind == ">":
        return f"> {_x(m)}× (not reached within the run)" + (
            f"; at the baseline's final value: {result['reversed']['text']}" if result.get("reversed") else "")
    if kind == "<":
        return f"< {_x(m)}× (already reached at the baseline's first checkpoint)"
    if result.get("ci_low_kind") is None:
        return f"{_x(m)}× ({'one seed' if min(result['seeds']) < 2 else 'no resamples'}: no CI)"
    low_bound, high_bound = result["range"]
    low = _x(result["ci_low"]) if result["ci_low"] is not None else f"< {_x(low_bound)}"
    high = _x(result["ci_high"]) if result["ci_high"] is not None else f"> {_x(high_bound)}"
    sep = "–" if result["ci_low"] is not None and result["ci_high"] is not None else " to "
    return f"{_x(m)}× ({low}{sep}{high})"
