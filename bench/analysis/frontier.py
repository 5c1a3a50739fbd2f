"""The efficiency frontier: per objective, a yardstick's score fitted against log-FLOPs across a sweep of budgets, and
from the fits the compute multiplier of each objective against another at every budget of the sweep and where two
objectives' fits cross, each with an interval that carries both the seeds' spread and the fit's lack of fit.

Every fit is a line in log-FLOPs through a transform g of the score, so fitting, inverting and crossing are closed
forms: a saturating power law toward the ceiling, g(s) = log(ceiling − s), where a ceiling is known and every seed
lies below it; else a line in log-FLOPs, g(s) = s. The transform is chosen per yardstick, the same for every
objective, so curves are crossed in one space.

Two sources of uncertainty, both kept: the seeds (a bootstrap of each budget's seeds, the interval estimate ± t ×
its SD), and the fit's lack of fit (the means at the budgets scatter around the line by more than the seeds explain:
with k budgets, the residuals' k − 2 degrees of freedom give each line a multivariate-t sampling distribution, drawn
as many times as the bootstrap). A quantity's interval is the envelope of the two, so it is never narrower than the
residual-based one; with two budgets the lack of fit cannot be measured, and no fitted quantity is stated as a result.
Nothing outside the sweep is stated as a result either: a multiplier whose compute lies outside it, a crossover
beyond it, and a crossover that the measured means contradict are flagged, not stated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as t_distribution

from bench.analysis.findings import Crossover, Placed
from bench.analysis.summaries import MultiplierAt, Trend
from bench.analysis.uncertainty import stretched

POWER_LAW, LOG_LINEAR = "power law toward the ceiling", "line in log-FLOPs"
RESAMPLES = 2000


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
    """(1 + resamples, budgets): the mean over seeds, then the means of seeds drawn with replacement (a seed's
    scores at every budget together). Their spread is short of the mean's own: see stretched_draws."""
    seeds = curves.scores.shape[0]
    drawn = rng.integers(0, seeds, (resamples, seeds))
    return np.concatenate([curves.scores.mean(0, keepdims=True), curves.scores[drawn].mean(1)])


def stretched_draws(values: np.ndarray, seeds: int) -> np.ndarray:
    """Rows 1: (resampled) stretched about row 0 (the estimate) to the variance of a mean of `seeds`
    (bench.analysis.uncertainty.stretched). Applied on the scale the lines are fitted on: stretched first, a resampled
    mean could pass the ceiling, where log(ceiling − s) is not defined."""
    return np.concatenate([values[:1], stretched(values[1:], values[:1], seeds)])


def residual_draws(log_budgets: np.ndarray, g: np.ndarray, resamples: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray] | None:
    """(α, β) drawn from the fit's own sampling distribution, estimated from its residuals over the budgets (a
    multivariate t with k − 2 degrees of freedom): the lack of fit. None with two budgets (no residual freedom)."""
    k = len(log_budgets)
    if k < 3:
        return None
    alpha, beta = fit_lines(log_budgets, g[None, :])
    residuals = g - (alpha[0] + beta[0] * log_budgets)
    variance = float(residuals @ residuals) / (k - 2)
    design = np.stack([np.ones(k), log_budgets], axis=1)
    covariance = variance * np.linalg.inv(design.T @ design)
    normal = rng.multivariate_normal(np.zeros(2), covariance, size=resamples, method="eigh")
    scale = np.sqrt((k - 2) / rng.chisquare(k - 2, size=resamples))[:, None]
    drawn = normal * scale
    return alpha[0] + drawn[:, 0], beta[0] + drawn[:, 1]


@dataclass(frozen=True)
class Frontier:
    kind: str
    ceiling: float | None
    budgets: np.ndarray
    lines: dict[str, tuple[np.ndarray, np.ndarray]]  # objective -> (α, β), each (1 + resamples,): fit, then seeds'
    residual: dict[str, tuple[np.ndarray, np.ndarray] | None]  # objective -> (α, β) drawn from the lack of fit
    seeds: dict[str, int]

    def fitted_g(self, spec: str, log_budgets: np.ndarray, lines: tuple[np.ndarray, np.ndarray] | None = None):
        alpha, beta = self.lines[spec] if lines is None else lines
        return alpha[:, None] + beta[:, None] * log_budgets[None, :]

    def score(self, spec: str, budgets: np.ndarray) -> np.ndarray:
        """The fitted score at each budget (the fit itself, not a resample)."""
        g = self.fitted_g(spec, np.log(budgets))[0]
        return self.ceiling - np.exp(g) if self.kind == POWER_LAW else g

    def log_budget_reaching(self, lines: tuple[np.ndarray, np.ndarray], g: np.ndarray) -> np.ndarray:
        """log C at which each line reaches g (rows × budgets); nan where the line does not rise."""
        alpha, beta = (part[:, None] for part in lines)
        rising = beta < 0 if self.kind == POWER_LAW else beta > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(rising, (g - alpha) / beta, np.nan)


def fit_frontier(curves: dict[str, Curves], ceiling: float | None = None, resamples: int = RESAMPLES,
                 seed: int = 0) -> Frontier:
    budgets = {c.budgets for c in curves.values()}
    if len(budgets) != 1 or len(next(iter(budgets))) < 2:
        raise ValueError("every objective needs scores at the same two or more budgets")
    budget_array = np.array(next(iter(budgets)), dtype=float)
    kind, rng, log_b = fit_kind(curves, ceiling), np.random.default_rng(seed), np.log(budget_array)
    lines, residual = {}, {}
    for spec, c in curves.items():
        g = stretched_draws(transform(resampled_means(c, resamples, rng), kind, ceiling), c.scores.shape[0])
        lines[spec] = fit_lines(log_b, g)
        residual[spec] = residual_draws(log_b, g[0], resamples, rng)
    return Frontier(kind, ceiling, budget_array, lines, residual, {spec: c.scores.shape[0]
                                                                   for spec, c in curves.items()})


def envelope(estimate: float, seeds_drawn: np.ndarray, residual_drawn: np.ndarray | None,
             seeds: int) -> tuple[float | None, float | None]:
    """95 % interval of a log quantity: the envelope of estimate ± t(0.975, seeds − 1) × the seed bootstrap's SD and
    the 2.5-97.5 percentiles of its lack-of-fit draws. None where more than 5 % of either's draws have no value
    (lines that do not rise or meet), or with one seed."""
    def usable(drawn: np.ndarray) -> np.ndarray | None:
        finite = drawn[np.isfinite(drawn)]
        return finite if len(finite) >= 0.95 * len(drawn) else None
    finite = usable(seeds_drawn)
    if not math.isfinite(estimate) or finite is None or seeds < 2:
        return None, None
    half = t_distribution.ppf(0.975, seeds - 1) * finite.std()
    low, high = estimate - half, estimate + half
    if residual_drawn is not None:
        spread = usable(residual_drawn)
        if spread is None:
            return None, None
        low, high = min(low, float(np.percentile(spread, 2.5))), max(high, float(np.percentile(spread, 97.5)))
    return low, high


def exp_interval(low: float | None, high: float | None) -> tuple[float | None, float | None]:
    if low is None:
        return None, None
    with np.errstate(over="ignore", under="ignore"):  # past float range: 0 to inf, unbounded
        return float(np.exp(low)), float(np.exp(high))


def multipliers(frontier: Frontier, baseline: str, spec: str) -> list[MultiplierAt]:
    """At every budget B of the sweep: the baseline's FLOPs to reach `spec`'s fitted score at B, over B, with its
    interval (seeds and lack of fit); `outside` where that compute lies outside the sweep (then it is no result)."""
    log_b = np.log(frontier.budgets)

    def log_ratio(base_lines, spec_lines) -> np.ndarray:
        return frontier.log_budget_reaching(base_lines, frontier.fitted_g(spec, log_b, spec_lines)) - log_b

    seeded = log_ratio(frontier.lines[baseline], frontier.lines[spec])  # (1 + resamples, budgets)
    lacking = None
    if frontier.residual[baseline] is not None and frontier.residual[spec] is not None:
        lacking = log_ratio(frontier.residual[baseline], frontier.residual[spec])
    seeds = min(frontier.seeds[baseline], frontier.seeds[spec])
    rows = []
    for i, budget in enumerate(frontier.budgets):
        value = float(np.exp(seeded[0, i]))
        low, high = exp_interval(*envelope(float(seeded[0, i]), seeded[1:, i],
                                           None if lacking is None else lacking[:, i], seeds))
        reached = seeded[0, i] + log_b[i]
        rows.append(MultiplierAt(budget=float(budget), multiplier=value if math.isfinite(value) else None,
                                 ci_low=low, ci_high=high, lack_of_fit=lacking is not None,
                                 outside=bool(not math.isfinite(value) or not log_b[0] <= reached <= log_b[-1])))
    return rows


def measured_order(means: dict[str, list[float]], first: str, second: str) -> list[int]:
    """The sign of first − second's measured mean at each budget (higher is better)."""
    return [int(np.sign(a - b)) for a, b in zip(means[first], means[second])]


def crossover(frontier: Frontier, first: str, second: str, means: dict[str, list[float]] | None = None) -> Crossover:
    """Where two objectives' fits meet, log C = (α₂ − α₁) / (β₁ − β₂): within the sweep, below or beyond it, or never
    (parallel fits); its interval (seeds and lack of fit); `contradicted` where the measured means at the budgets
    around it do not change order as the fits do (then the crossover is not stated)."""
    def meet(a, b) -> np.ndarray:
        (a1, b1), (a2, b2) = a, b
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(np.isclose(b1, b2, rtol=0, atol=1e-12), np.nan, (a2 - a1) / (b1 - b2))
    log_c = meet(frontier.lines[first], frontier.lines[second])
    lacking = None
    if frontier.residual[first] is not None and frontier.residual[second] is not None:
        lacking = meet(frontier.residual[first], frontier.residual[second])
    log_b = np.log(frontier.budgets)
    where = placed(log_c, log_b, min(frontier.seeds[first], frontier.seeds[second]), lacking)
    return Crossover(pair=[first, second], **vars(where), contradicted=bool(
        where.where == "within" and means is not None
        and contradicts(measured_order(means, first, second), log_b, float(log_c[0]))))


def contradicts(order: list[int], log_b: np.ndarray, log_c: float) -> bool:
    """Whether the measured order at the budgets on either side of a crossover fails to flip."""
    below = [o for o, b in zip(order, log_b) if b <= log_c]
    above = [o for o, b in zip(order, log_b) if b > log_c]
    return not (below and above and below[-1] != 0 and above[0] != 0 and below[-1] != above[0])


def placed(log_c: np.ndarray, log_b: np.ndarray, seeds: int, lacking: np.ndarray | None = None) -> Placed:
    """A budget found by the fit (log_c[0]), its interval (seed resamples log_c[1:], lack-of-fit draws `lacking`),
    and where it lies: within the sweep, below or beyond it, or never (nan: the lines do not meet or rise)."""
    if not math.isfinite(log_c[0]):
        return Placed(where="never", budget=None, ci_low=None, ci_high=None, lack_of_fit=lacking is not None)
    low, high = exp_interval(*envelope(float(log_c[0]), log_c[1:], lacking, seeds))
    where = ("within" if log_b[0] <= log_c[0] <= log_b[-1] else
             "below the sweep" if log_c[0] < log_b[0] else "beyond the sweep")
    with np.errstate(over="ignore"):
        budget = float(np.exp(log_c[0]))
    return Placed(where=where, budget=budget, ci_low=low, ci_high=high, lack_of_fit=lacking is not None)


# --- the gain over the untrained control against compute ---------------------------------------------------------

def gain_trend(budgets: tuple[float, ...], scores: np.ndarray, control: np.ndarray, resamples: int = RESAMPLES,
               seed: int = 0) -> Trend:
    """An objective's gain over its untrained control across a sweep, fitted as a line in log-FLOPs: the gain per
    decade of compute with its interval (a bootstrap over both sides' seeds, enveloped by the residual-based
    interval over the budgets), and the budget where the fitted gain meets the control, stated only within the
    sweep."""
    rng = np.random.default_rng(seed)
    log_b = np.log(np.asarray(budgets, dtype=float))
    runs = stretched_draws(resampled_means(Curves(tuple(budgets), scores), resamples, rng), scores.shape[0])
    drawn = rng.integers(0, len(control), (resamples, len(control)))
    controls = stretched_draws(np.concatenate([[control.mean()], control[drawn].mean(1)]), len(control))
    gains = runs - controls[:, None]
    alpha, beta = fit_lines(log_b, gains)
    residual = residual_draws(log_b, gains[0], resamples, rng)
    seeds, decade = min(scores.shape[0], len(control)), math.log(10)
    low, high = envelope(float(beta[0]), beta[1:], None if residual is None else residual[1], seeds)
    with np.errstate(divide="ignore", invalid="ignore"):  # a line that does not rise never meets: nan
        meets = placed(np.where(beta > 0, -alpha / beta, np.nan), log_b, seeds,
                       None if residual is None else np.where(residual[1] > 0, -residual[0] / residual[1], np.nan))
    return Trend(per_decade=float(beta[0]) * decade,
                 per_decade_ci=None if low is None else [low * decade, high * decade],
                 lack_of_fit=residual is not None, line=[float(alpha[0]), float(beta[0])], meets=meets)
