"""A budget sweep's frontier (`bench.compare --budgets 1e11,4e11,1.6e12`): every budget's comparison read as one
curve per objective and yardstick across the budgets, fitted (bench.analysis.frontier), and set beside the untrained
controls.

Each budget's runs have their own complete learning-rate schedule, ending at that budget: a point of these curves is
a finished run, not a checkpoint of a longer one. The one claim rule holds here too: a yardstick that mirrors an
objective is shown and never fitted, and a multiplier or crossover of two objectives is read only at budgets where
both beat their own untrained controls (each budget's verdict).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from bench.analysis.claims import NOT_MEASURABLE, beats_control
from bench.analysis.findings import Crossover, Gain, GainAt, Stat, YardstickVerdict
from bench.analysis.frontier import LOG_LINEAR, POWER_LAW, Curves, crossover, fit_frontier, gain_trend, multipliers
from bench.analysis.measures import yardsticks
from bench.analysis.results import by_control, by_objective, stat
from bench.analysis.summaries import Fit, Results, Sweep, SweepGain, SweepYardstick, UnreadAt

FIT_REASONS = {
    POWER_LAW: "a saturating power law toward the ceiling, since the yardstick has one and every seed lies below it",
    LOG_LINEAR: "a line in log-FLOPs (monotone), since the yardstick has no known ceiling or a seed reached it",
}


def budget_folder(budget: float) -> str:
    """A sweep's comparison at `budget`: its folder under the sweep's --out."""
    return f"budget-{budget:g}"


def sweep_yardsticks(by_budget: dict[float, Results]) -> list:
    """The yardsticks every budget's comparison measured, as the largest budget's results define them."""
    largest = by_budget[max(by_budget)]
    bayes = largest.bayes or {}
    return yardsticks(largest.runs, bayes.get("ceilings") or {}, bayes.get("input_only"), largest.tasks)


def seed_scores(by_budget: dict[float, Results], yardstick, spec: str) -> dict[int, list[float]]:
    """{seed: its score at every budget} for the seeds that finished at every budget (a diverged run drops its
    seed from the curve rather than leaving a hole in it)."""
    found: dict[int, list[float]] = {}
    for index, budget in enumerate(sorted(by_budget)):
        for run in by_objective(by_budget[budget].runs).get(spec, []):
            reading = yardstick.final(run)
            if reading is not None and len(found.setdefault(run.seed, [])) == index:
                found[run.seed].append(reading.value)
    return {seed: scores for seed, scores in found.items() if len(scores) == len(by_budget)}


def verdict_items(by_budget: dict[float, Results], name: str) -> list[YardstickVerdict | None]:
    """Per budget, that comparison's verdict on this yardstick."""
    return [by_budget[b].verdict.item(name) if by_budget[b].verdict else None for b in sorted(by_budget)]


def gain_at(item: YardstickVerdict | None, spec: str) -> Gain | None:
    return item.gain_of(spec) if item else None


def gains_across(by_budget: dict[float, Results], yardstick, scores: dict[str, dict[int, list[float]]],
                 resamples: int) -> dict[str, SweepGain]:
    """Per objective, its gain over its own control at every budget (each budget's verdict) and the gain's trend
    against compute (bench.analysis.frontier.gain_trend)."""
    budgets, sign = sorted(by_budget), 1.0 if yardstick.higher_is_better else -1.0
    items = verdict_items(by_budget, yardstick.name)
    controls = by_control(by_budget[max(by_budget)].controls)
    found = {}
    for spec, by_seed in scores.items():
        gains = [gain_at(item, spec) for item in items]
        last = gains[-1]
        control = [r.value for run in controls.get(last.control, []) for r in [yardstick.final(run)]
                   if r is not None] if last else []
        if len(control) < 2 or len(by_seed) < 2:
            continue
        trend = gain_trend(tuple(budgets), sign * np.array(list(by_seed.values()), dtype=float),
                           sign * np.array(control, dtype=float), resamples)
        found[spec] = SweepGain(control=last.control, trend=trend,
                                per_budget=[None if g is None else GainAt(estimate=g.estimate, ci_low=g.ci_low,
                                                                          ci_high=g.ci_high, p_holm=g.p_holm,
                                                                          family=g.family, p=g.p, se=g.se, df=g.df)
                                            for g in gains])
    return found


def control_summary(by_budget: dict[float, Results], yardstick) -> dict[str, Stat | None]:
    """The untrained controls (the same initialisations at every budget: they spend no training FLOPs), from the
    largest budget's comparison."""
    controls = by_budget[max(by_budget)].controls
    return {name: stat(values) for name, group in by_control(controls).items()
            for values in [[r.value for run in group for r in [yardstick.final(run)] if r is not None]] if values}


def beaten(items: list[YardstickVerdict | None], spec: str) -> list[bool]:
    """Per budget, whether `spec` beat its own untrained control on this yardstick there."""
    return [beats_control(gain_at(item, spec)) for item in items]


def fit_of(yardstick, scores: dict, budgets: list[float], baseline: str, resamples: int, items: list) -> Fit:
    """The fit, multipliers against the baseline and every pair's crossover, under the one claim rule."""
    sign = 1.0 if yardstick.higher_is_better else -1.0
    ceilings = [c for sees in ("smoothing", "filtering") for c in [yardstick.ceiling(sees)] if c is not None]
    ceiling = (sign * max(ceilings) if sign > 0 else sign * min(ceilings)) if ceilings else None
    curves = {spec: Curves(tuple(budgets), sign * np.array(list(by_seed.values()), dtype=float))
              for spec, by_seed in scores.items()}
    frontier = fit_frontier(curves, ceiling, resamples)
    beats = {spec: beaten(items, spec) for spec in curves}
    means = {spec: (curve.scores.mean(0)).tolist() for spec, curve in curves.items()}
    return Fit(fit=frontier.kind, fit_reason=FIT_REASONS[frontier.kind], lack_of_fit=len(budgets) >= 3,
               ceiling=None if ceiling is None else sign * ceiling,
               fitted={spec: (sign * frontier.score(spec, np.array(budgets, dtype=float))).tolist() for spec in curves},
               lines={spec: [float(frontier.lines[spec][0][0]), float(frontier.lines[spec][1][0])] for spec in curves},
               multipliers={spec: [row if beats[spec][i] and beats[baseline][i] else UnreadAt(budget=row.budget)
                                   for i, row in enumerate(multipliers(frontier, baseline, spec))]
                            for spec in curves if spec != baseline and baseline in curves},
               crossovers=[judged_crossover(crossover(frontier, first, second, means), beats, budgets)
                           for i, first in enumerate(curves) for second in list(curves)[i + 1:]])


def judged_crossover(found: Crossover, beats: dict[str, list[bool]], budgets: list[float]) -> Crossover:
    """A crossover is judged only where both objectives beat their controls at the budgets around it."""
    if found.where != "within":
        return found
    around = [i for i, b in enumerate(budgets) if i + 1 < len(budgets) and b <= found.budget <= budgets[i + 1]]
    first, second = found.pair
    if not around or not all(beats[spec][i] and beats[spec][i + 1] for spec in (first, second) for i in around[:1]):
        return replace(found, outcome=NOT_MEASURABLE)
    return found


def frontier_results(by_budget: dict[float, Results], baseline: str, setup: dict | None = None,
                     resamples: int = 2000) -> Sweep:
    """Everything the frontier report states: per yardstick the means per budget, the controls,
    whether it measures pretraining, the gains' trends, and where it is neutral and measures pretraining the fit,
    the multipliers against the baseline at every budget and the crossover of every pair."""
    budgets = sorted(by_budget)
    specs = list(dict.fromkeys(run.objective for budget in budgets for run in by_budget[budget].runs))
    found = []
    for yardstick in sweep_yardsticks(by_budget):
        scores = {spec: by_seed for spec in specs for by_seed in [seed_scores(by_budget, yardstick, spec)] if by_seed}
        if baseline not in scores or len(scores) < 2:
            continue
        items = verdict_items(by_budget, yardstick.name)
        mirrors = next((i.mirrors for i in items if i is not None), [])
        measures_pretraining = [None if i is None else i.measures_pretraining for i in items]
        found.append(SweepYardstick(
            yardstick=yardstick.name, label=yardstick.label, higher_is_better=yardstick.higher_is_better,
            mirrors=mirrors, means={spec: [stat([s[i] for s in by_seed.values()]) for i in range(len(budgets))]
                                    for spec, by_seed in scores.items()},
            seeds={spec: sorted(by_seed) for spec, by_seed in scores.items()},
            controls=control_summary(by_budget, yardstick), beats_control={spec: beaten(items, spec) for spec in scores},
            measures_pretraining=measures_pretraining, gains=gains_across(by_budget, yardstick, scores, resamples),
            fit=fit_of(yardstick, scores, budgets, baseline, resamples, items)
            if not mirrors and any(measures_pretraining) else None))
    return Sweep(budgets=budgets, baseline=baseline, objectives=specs, setup=setup or {}, yardsticks=found,
                 answers=[by_budget[b].answer for b in budgets])
