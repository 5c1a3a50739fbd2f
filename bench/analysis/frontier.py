"""The efficiency frontier: per objective, a yardstick's score fitted against log-FLOPs across a sweep of budgets, and
from the fits the compute multiplier of each objective against the baseline at every budget and the budget at
which two objectives' curves cross, each with a bootstrap over seeds.

Every fit is a line in log-FLOPs through a transform g of the score, so that fitting, inverting and crossing are all
closed forms (and a bootstrap of thousands of resamples is a few array operations):
- a saturating power law toward the ceiling, score = ceiling − exp(α + β·log C), g(s) = log(ceiling − s), where a
  ceiling is known (a share of the Bayes ceiling is at most 1) and every seed's score lies below it: scores that
  approach a limit cannot be a line in log-FLOPs for long, and a Kaplan-style power law in the remaining gap is the
  usual form of such curves;
- else a line in log-FLOPs, g(s) = s: monotone, and with three budgets (the sweep this suite runs on 2 cores) two
  parameters are all the data can carry.
The transform is chosen per yardstick, the same for every objective, so curves are crossed in one space; g is
monotone, so where the fits meet in g they meet in score.

Units: every curve is against the run's total training FLOPs, the budget itself, never against tokens or steps (whose
FLOPs differ between objectives: ELECTRA's generator, MLM's head on 15 % of the positions). The multiplier at budget
B is the baseline's FLOPs to reach the other objective's fitted score at B, over B. Scores are higher-is-better
(every yardstick of the suite is); a fit that does not rise gives no multiplier.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as t_distribution

POWER_LAW, LOG_LINEAR = "power law toward the ceiling", "line in log-FLOPs"


@dataclass(frozen=True)
class Curves:
    """One objective's scores on one yardstick: `scores[seed][i]` at `budgets[i]`, every seed at every budget."""

    budgets: tuple[float, ...]
    scores: np.ndarray  # (seeds, budgets)


def fit_kind(curves: dict[str, Curves], ceiling: float | None) -> str:
    below = ceiling is not None and all(bool((c.scores < ceiling).all()) for c in curves.values())
    return POWER_LAW if below else LOG_LINEAR


def transform(scores: np.ndarray, kind: str, ceiling: float | None) -> np.ndarray:
    return np.log(ceiling - scores) if kind == POWER_LAW else scores


def fit_lines(log_budgets: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares (α, β) of g = α + β·log C, for each row of g (rows: resamples, columns: budgets)."""
    x = log_budgets - log_budgets.mean()
    beta = (g - g.mean(-1, keepdims=True)) @ x / (x @ x)
    return g.mean(-1) - beta * log_budgets.mean(), beta


def resampled_means(curves: Curves, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(1 + resamples, budgets): the mean over seeds, then the means of seeds drawn with replacement."""
    seeds = curves.scores.shape[0]
    drawn = rng.integers(0, seeds, (resamples, seeds))
    return np.concatenate([curves.scores.mean(0, keepdims=True), curves.scores[drawn].mean(1)])


@dataclass(frozen=True)
class Frontier:
    kind: str
    ceiling: float | None
    budgets: np.ndarray
    lines: dict[str, tuple[np.ndarray, np.ndarray]]  # objective -> (α, β), each (1 + resamples,): fit, then resamples
    seeds: dict[str, int]

    def log_budget_reaching(self, spec: str, g: np.ndarray) -> np.ndarray:
        """log C at which each of `spec`'s fits (the fit, then the resamples: rows) reaches g (rows × budgets); nan
        where the fit does not rise (β points the wrong way)."""
        alpha, beta = (part[:, None] for part in self.lines[spec])
        rising = beta < 0 if self.kind == POWER_LAW else beta > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(rising, (g - alpha) / beta, np.nan)

    def fitted_g(self, spec: str, log_budgets: np.ndarray) -> np.ndarray:
        alpha, beta = self.lines[spec]
        return alpha[:, None] + beta[:, None] * log_budgets[None, :]

    def score(self, spec: str, budgets: np.ndarray) -> np.ndarray:
        """The fitted score at each budget (the fit itself, not a resample)."""
        g = self.fitted_g(spec, np.log(budgets))[0]
        return self.ceiling - np.exp(g) if self.kind == POWER_LAW else g


def fit_frontier(curves: dict[str, Curves], ceiling: float | None = None, resamples: int = 2000,
                 seed: int = 0) -> Frontier:
    budgets = {c.budgets for c in curves.values()}
    if len(budgets) != 1 or len(next(iter(budgets))) < 2:
        raise ValueError("every objective needs scores at the same two or more budgets")
    budget_array = np.array(next(iter(budgets)), dtype=float)
    kind, rng = fit_kind(curves, ceiling), np.random.default_rng(seed)
    lines = {spec: fit_lines(np.log(budget_array), transform(resampled_means(c, resamples, rng), kind, ceiling))
             for spec, c in curves.items()}
    return Frontier(kind, ceiling, budget_array, lines, {spec: c.scores.shape[0] for spec, c in curves.items()})


def interval(estimate: float, resampled: np.ndarray, seeds: int) -> tuple[float | None, float | None]:
    """95 % interval of a log-FLOPs quantity, as FLOPs (or a ratio of them): the estimate ± t(0.975, seeds − 1) ×
    the bootstrap's standard deviation. The percentile interval of a bootstrap over 3 seeds covers a known multiplier
    only 78 % of the time (the case tests/test_frontier.py checks); this one 98 % (96-97 % with 5-8 seeds):
    wider than it need be, never narrower. None where more than 5 % of the resamples have no value (their fits do
    not rise, or do not meet)."""
    finite = resampled[np.isfinite(resampled)]
    if not math.isfinite(estimate) or len(finite) < 0.95 * len(resampled) or seeds < 2:
        return None, None
    half = t_distribution.ppf(0.975, seeds - 1) * finite.std()
    with np.errstate(over="ignore", under="ignore"):  # an interval past float range is 0 to inf: unbounded
        return float(np.exp(estimate - half)), float(np.exp(estimate + half))


def multipliers(frontier: Frontier, baseline: str, spec: str) -> list[dict]:
    """At every budget B of the sweep: the baseline's FLOPs to reach `spec`'s fitted score at B, over B, with the
    bootstrap's 95 % interval; `extrapolated` where that compute lies outside the sweep."""
    log_b = np.log(frontier.budgets)
    reached = frontier.log_budget_reaching(baseline, frontier.fitted_g(spec, log_b))  # (1 + resamples, budgets)
    log_ratio = reached - log_b[None, :]
    seeds = min(frontier.seeds[baseline], frontier.seeds[spec])
    rows = []
    for i, budget in enumerate(frontier.budgets):
        value = float(np.exp(log_ratio[0, i]))
        low, high = interval(float(log_ratio[0, i]), log_ratio[1:, i], seeds)
        rows.append({"budget": float(budget), "multiplier": value if math.isfinite(value) else None,
                     "ci_low": low, "ci_high": high,
                     "extrapolated": bool(not math.isfinite(value) or
                                          not log_b[0] <= reached[0, i] <= log_b[-1])})
    return rows


def crossover(frontier: Frontier, first: str, second: str) -> dict:
    """Where two objectives' fits meet, log C = (α₂ − α₁) / (β₁ − β₂), said as within the sweep, below it or
    beyond it (extrapolated), or never (parallel fits); with the bootstrap's 95 % interval and the share of
    resamples whose fits meet within the sweep."""
    (a1, b1), (a2, b2) = frontier.lines[first], frontier.lines[second]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_c = np.where(np.isclose(b1, b2, rtol=0, atol=1e-12), np.nan, (a2 - a1) / (b1 - b2))
    low_b, high_b = np.log(frontier.budgets[0]), np.log(frontier.budgets[-1])
    within = (log_c[1:] >= low_b) & (log_c[1:] <= high_b)
    found = {"pair": [first, second], "share_within": float(within.mean())}
    return {**found, **placed(log_c, np.log(frontier.budgets), min(frontier.seeds[first], frontier.seeds[second]))}


def placed(log_c: np.ndarray, log_b: np.ndarray, seeds: int) -> dict:
    """A budget found by the fit (log_c[0]) and its resamples (log_c[1:]): the budget, its 95 % interval, and where
    it lies: within the sweep, below or beyond it, or never (nan: the lines do not meet or rise); `far` beyond twice
    the sweep's own width in log-FLOPs, where a meeting point of two nearly parallel lines says nothing about those
    budgets."""
    if not math.isfinite(log_c[0]):
        return {"where": "never", "budget": None, "ci_low": None, "ci_high": None, "far": False}
    low, high = interval(float(log_c[0]), log_c[1:], seeds)
    where = ("within" if log_b[0] <= log_c[0] <= log_b[-1] else
             "below the sweep" if log_c[0] < log_b[0] else "beyond the sweep")
    far = bool(max(log_b[0] - log_c[0], log_c[0] - log_b[-1]) > 2 * (log_b[-1] - log_b[0]))
    with np.errstate(over="ignore"):  # far past float range: inf, which results.json stores as null
        budget = float(np.exp(log_c[0]))
    return {"where": where, "budget": budget, "ci_low": low, "ci_high": high, "far": far}


def crossover_sentence(found: dict, budgets: np.ndarray) -> str:
    first, second = found["pair"]
    sweep = f"[{budgets[0]:.3g}, {budgets[-1]:.3g}] FLOPs"
    if found["where"] == "never":
        return f"{first} and {second}: the fits never meet (parallel in log-FLOPs); no crossover."
    width = (budgets[-1] / budgets[0]) ** 2
    ci = (" (no 95 % CI: too many resamples do not meet)" if found["ci_low"] is None else
          f" ({interval_text(found, budgets)})")
    if found["where"] == "within":
        return (f"{first} and {second} cross at {found['budget']:.3g} FLOPs{ci}, within the sweep {sweep} "
                f"({found['share_within']:.0%} of resamples cross within it).")
    if found.get("far"):
        return (f"{first} and {second}: no crossover within {sweep}; the nearly parallel fits would meet only "
                f"{found['where'].replace('the sweep', 'it')} by more than {width:.3g}× the sweep's range"
                + (f" ({found['budget']:.3g} FLOPs)" if math.isfinite(found["budget"] or math.inf) else "")
                + ", which is no result.")
    return (f"{first} and {second}: no crossover within {sweep}; the fits meet at {found['budget']:.3g} FLOPs{ci}, "
            f"extrapolated {found['where']}.")


# --- where pretraining would pay: the gain over the untrained control against compute ---------------------------

def gain_trend(budgets: tuple[float, ...], scores: np.ndarray, control: np.ndarray, clear: float | None,
               resamples: int = 2000, seed: int = 0) -> dict:
    """An objective's gain over its untrained control across a sweep, fitted as a line in log-FLOPs, with a bootstrap
    over the seeds of both sides (scores: seeds × budgets, control: the controls' scores, both higher-is-better).

    The gain per decade of compute, and the budgets at which the fitted gain reaches 0 (meets the control) and
    `clear` (the gain whose 95 % CI, as wide as the one measured at the largest budget, would exclude 0): where no
    budget of the sweep shows a gain, where one would, if the trend and the seeds' spread held. A line, not the
    power law: a gain over a control has no known ceiling, and three budgets carry two parameters."""
    rng = np.random.default_rng(seed)
    log_b = np.log(np.asarray(budgets, dtype=float))
    runs = resampled_means(Curves(tuple(budgets), scores), resamples, rng)
    drawn = rng.integers(0, len(control), (resamples, len(control)))
    controls = np.concatenate([[control.mean()], control[drawn].mean(1)])
    alpha, beta = fit_lines(log_b, runs - controls[:, None])
    seeds = min(scores.shape[0], len(control))
    per_decade = beta * math.log(10)
    half = t_distribution.ppf(0.975, seeds - 1) * per_decade[1:].std() if seeds > 1 else math.nan
    found = {"per_decade": float(per_decade[0]),
             "per_decade_ci": None if not math.isfinite(half) else [float(per_decade[0] - half),
                                                                     float(per_decade[0] + half)],
             "line": [float(alpha[0]), float(beta[0])],  # gain = α + β·ln C, the fit itself
             "clear": clear, "meets": reach(alpha, beta, 0.0, log_b, seeds)}
    found["clears"] = None if clear is None else reach(alpha, beta, clear, log_b, seeds)
    return found


def reach(alpha: np.ndarray, beta: np.ndarray, target: float, log_b: np.ndarray, seeds: int) -> dict:
    """Where the fitted gain α + β·log C reaches `target` (placed as `placed` says); never where it does not rise."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return placed(np.where(beta > 0, (target - alpha) / beta, np.nan), log_b, seeds)


def reach_text(found: dict, budgets: np.ndarray) -> str:
    """`found` (from reach) in words: a budget with its CI, said as a bound where it lies far outside the sweep."""
    if found["where"] == "never":
        return "never (the fitted gain does not rise)"
    if found["far"]:
        width = (budgets[-1] / budgets[0]) ** 2
        return f"{found['where'].replace('the sweep', 'it')} by more than {width:.3g}× the sweep's range (no result)"
    ci = "no CI" if found["ci_low"] is None else interval_text(found, budgets)
    where = "" if found["where"] == "within" else f", extrapolated {found['where']}"
    return f"{found['budget']:.3g} FLOPs ({ci}{where})"


def interval_text(found: dict, budgets: np.ndarray) -> str:
    """A budget's 95 % interval; an end further out than twice the sweep's width (in log-FLOPs) is said as a bound,
    not as a number."""
    width = (budgets[-1] / budgets[0]) ** 2
    floor, ceiling = budgets[0] / width, budgets[-1] * width
    return ("95 % CI " + (f"below {floor:.3g}" if found["ci_low"] < floor else f"{found['ci_low']:.3g}") + " to "
            + (f"above {ceiling:.3g}" if found["ci_high"] > ceiling else f"{found['ci_high']:.3g}"))
