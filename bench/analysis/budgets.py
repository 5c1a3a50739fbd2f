"""A budget sweep's frontier (`bench.compare --budgets 1e11,4e11,1.6e12`): every budget's comparison read as
one curve per objective and yardstick across the budgets, fitted (bench.analysis.frontier), and set beside the
untrained controls.

Each budget's runs have their own complete learning-rate schedule, ending at that budget: a point of these curves is
a finished run, not a checkpoint of a longer one. A yardstick is fitted only where it measures pretraining: where, at
some budget of the sweep, an objective beats its untrained control (that budget's own verdict, Welch and Holm);
elsewhere the means are shown and nothing is drawn from them, as in a single comparison.
"""

from __future__ import annotations

import numpy as np

from bench.analysis.frontier import (LOG_LINEAR, POWER_LAW, Curves, crossover, crossover_sentence, fit_frontier,
                                     gain_trend, multipliers)
from bench.analysis.measures import final_values, yardsticks
from bench.analysis.results import Measured, by_control, by_objective, stat
from bench.analysis.verdict import beats_control

FIT_REASONS = {
    POWER_LAW: "a saturating power law toward the ceiling, since the yardstick has one and every seed lies below it",
    LOG_LINEAR: "a line in log-FLOPs (monotone), since the yardstick has no known ceiling or a seed reached it",
}


def sweep_yardsticks(by_budget: dict[float, dict]) -> list:
    """The yardsticks every budget's comparison measured, as the largest budget's results define them."""
    largest = by_budget[max(by_budget)]
    measured = Measured.from_results(largest)
    bayes = measured.bayes or {}
    return yardsticks(measured.runs, bayes.get("ceilings") or {}, bayes.get("input_only"), measured.tasks)


def seed_scores(by_budget: dict[float, dict], yardstick, spec: str) -> dict[int, list[float]]:
    """{seed: its score at every budget} for the seeds that finished at every budget (a diverged run drops its
    seed from the curve rather than leaving a hole in it)."""
    found: dict[int, list[float]] = {}
    budgets = sorted(by_budget)
    for index, budget in enumerate(budgets):
        for run in by_objective(Measured.from_results(by_budget[budget]).runs).get(spec, []):
            values = final_values([run], yardstick)
            if values and len(found.setdefault(run["seed"], [])) == index:
                found[run["seed"]].append(values[0])
    return {seed: scores for seed, scores in found.items() if len(scores) == len(budgets)}


def measures_pretraining(by_budget: dict[float, dict], name: str) -> list[bool | None]:
    """Per budget, whether its verdict found some objective beating its control on this yardstick."""
    found = []
    for budget in sorted(by_budget):
        items = {item["yardstick"]: item for item in (by_budget[budget].get("verdict") or {}).get("yardsticks", [])}
        found.append(items[name]["measures_pretraining"] if name in items else None)
    return found


def verdict_gains(by_budget: dict[float, dict], name: str, spec: str) -> list[dict | None]:
    """Per budget, `spec`'s gain over its own untrained control on this yardstick as that budget's verdict found it
    (difference, Welch's CI, Holm's p); None where it was not tested."""
    found = []
    for budget in sorted(by_budget):
        items = {item["yardstick"]: item for item in (by_budget[budget].get("verdict") or {}).get("yardsticks", [])}
        gains = [g for g in items.get(name, {}).get("gains", []) if g["objective"] == spec]
        found.append(gains[0] if gains else None)
    return found


def beats_control_at(by_budget: dict[float, dict], name: str, spec: str) -> list[bool | None]:
    """Per budget, whether `spec` beat its own untrained control on this yardstick (Welch, Holm), as that budget's
    verdict found; None where it was not tested."""
    return [beats_control(gain) if gain and gain["p_holm"] is not None else None
            for gain in verdict_gains(by_budget, name, spec)]


def gains_across(by_budget: dict[float, dict], yardstick, scores: dict[str, dict[int, list[float]]],
                 resamples: int) -> dict[str, dict]:
    """Per objective, its gain over its own control at every budget (each budget's verdict) and the gain's trend
    against compute (bench.analysis.frontier.gain_trend): where no budget shows a gain, where one would."""
    budgets, sign = sorted(by_budget), 1.0 if yardstick.higher_is_better else -1.0
    controls = by_control(Measured.from_results(by_budget[max(by_budget)]).controls)
    found = {}
    for spec, by_seed in scores.items():
        gains = verdict_gains(by_budget, yardstick.name, spec)
        last = gains[-1]
        control = final_values(controls.get(last["control"], []), yardstick) if last else []
        if len(control) < 2 or len(by_seed) < 2:
            continue
        clear = None if last["ci_low"] is None else (last["ci_high"] - last["ci_low"]) / 2
        trend = gain_trend(tuple(budgets), sign * np.array(list(by_seed.values()), dtype=float),
                           sign * np.array(control, dtype=float), clear, resamples)
        found[spec] = {"control": last["control"], "trend": trend,
                       "per_budget": [None if g is None else {key: g[key] for key in ("gain", "ci_low", "ci_high",
                                                                                        "p_holm")}
                                      for g in gains]}
    return found


def control_summary(by_budget: dict[float, dict], yardstick) -> dict[str, dict]:
    """The untrained controls (the same initialisations at every budget: they spend no training FLOPs), from the
    largest budget's comparison."""
    controls = Measured.from_results(by_budget[max(by_budget)]).controls
    return {name: stat(values) for name, group in by_control(controls).items()
            for values in [final_values(group, yardstick)] if values}


def frontier_results(by_budget: dict[float, dict], baseline: str, setup: dict | None = None,
                     resamples: int = 2000) -> dict:
    """Everything the frontier report states, as JSON-ready data: per yardstick the means per budget, the controls,
    whether it measures pretraining, and where it does the fit, the multipliers against the baseline at every budget
    and the crossover of every pair."""
    budgets = sorted(by_budget)
    specs = list(dict.fromkeys(run["objective"] for budget in budgets
                               for run in Measured.from_results(by_budget[budget]).runs))
    found = []
    for yardstick in sweep_yardsticks(by_budget):
        sign = 1.0 if yardstick.higher_is_better else -1.0  # the fits take higher as better
        scores = {spec: seed_scores(by_budget, yardstick, spec) for spec in specs}
        scores = {spec: by_seed for spec, by_seed in scores.items() if by_seed}
        if baseline not in scores or len(scores) < 2:
            continue
        means = {spec: [stat([s[i] for s in by_seed.values()]) for i in range(len(budgets))]
                 for spec, by_seed in scores.items()}
        item = {"yardstick": yardstick.name, "label": yardstick.label, "higher_is_better": yardstick.higher_is_better,
                "means": means, "seeds": {spec: sorted(by_seed) for spec, by_seed in scores.items()},
                "controls": control_summary(by_budget, yardstick),
                "beats_control": {spec: beats_control_at(by_budget, yardstick.name, spec) for spec in scores},
                "measures_pretraining": measures_pretraining(by_budget, yardstick.name)}
        item["gains"] = gains_across(by_budget, yardstick, scores, resamples)
        found.append(item)
        if not any(item["measures_pretraining"]):
            item["sentence"] = (f"No objective beats its untrained control on {yardstick.label} at any budget of the "
                                "sweep: no fit, multiplier or crossover is drawn from it.")
            continue
        ceilings = [c for sees in ("smoothing", "filtering") for c in [yardstick.ceiling(sees)] if c is not None]
        ceiling = sign * max(ceilings) if ceilings and sign > 0 else (sign * min(ceilings) if ceilings else None)
        curves = {spec: Curves(tuple(budgets), sign * np.array(list(by_seed.values()), dtype=float))
                  for spec, by_seed in scores.items()}
        frontier = fit_frontier(curves, ceiling, resamples)
        item.update(fit=frontier.kind, fit_reason=FIT_REASONS[frontier.kind],
                    ceiling=None if ceiling is None else sign * ceiling,
                    fitted={spec: (sign * frontier.score(spec, np.array(budgets, dtype=float))).tolist()
                            for spec in curves},
                    lines={spec: [float(frontier.lines[spec][0][0]), float(frontier.lines[spec][1][0])]
                           for spec in curves},
                    bands=fit_bands(frontier, sign),
                    multipliers={spec: multipliers(frontier, baseline, spec) for spec in curves if spec != baseline},
                    crossovers=[{**meet, "sentence": crossover_sentence(meet, frontier.budgets)}
                                for i, first in enumerate(curves) for second in list(curves)[i + 1:]
                                for meet in [crossover(frontier, first, second)]])
    return {"budgets": budgets, "baseline": baseline, "objectives": specs, "setup": setup or {},
            "yardsticks": found, "pretraining": [((by_budget[b].get("verdict") or {}).get("pretraining") or {})
                                                 .get("sentence") for b in budgets]}


def fit_bands(frontier, sign: float, points: int = 25) -> dict:
    """Per objective, the fitted score on a grid over the sweep with the bootstrap's 2.5 and 97.5 percentiles:
    the plot's bands."""
    grid = np.geomspace(frontier.budgets[0], frontier.budgets[-1], points)
    bands = {"flops": grid.tolist()}
    for spec in frontier.lines:
        g = frontier.fitted_g(spec, np.log(grid))
        score = frontier.ceiling - np.exp(g) if frontier.kind == POWER_LAW else g
        low, high = np.percentile(score[1:], [2.5, 97.5], axis=0)
        bands[spec] = {"fit": (sign * score[0]).tolist(), "low": (sign * (low if sign > 0 else high)).tolist(),
                       "high": (sign * (high if sign > 0 else low)).tolist()}
    return bands

