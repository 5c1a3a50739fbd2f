"""A budget sweep's own report: the frontier (bench.analysis.budgets) as report.md, results.json and plots in the
sweep's folder, beside one full report per budget in its budget-B folder.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.analysis.budgets import budget_folder
from bench.analysis.claims import NOT_MEASURABLE, beats_control, holm_interval
from bench.analysis.findings import Crossover, GainAt, Placed, to_json
from bench.analysis.summaries import MultiplierAt, Sweep, SweepYardstick, UnreadAt
from bench.common.files import write_atomic, write_json
from bench.report.paper import paper_text
from bench.report.plots import plt, save_figure
from bench.report.setup import sweep_setup_table
from bench.report.tables import fmt, table
from bench.report.wording import answer_sentence, estimable, listing, meeting_text, placed_text, sweep_text


NOT_ESTIMABLE = "not estimable (too many resamples of the seeds never meet or rise: no interval, so no point either)"


def frontier_multiplier_text(row: MultiplierAt | UnreadAt) -> str:
    if isinstance(row, UnreadAt):
        return "not measurable"
    if row.multiplier is None:
        return "none (the baseline's fit does not rise)"
    if row.outside:
        return "outside the sweep (no result)"
    if not estimable(row.ci_low, row.ci_high):
        return NOT_ESTIMABLE
    return f"{row.multiplier:.2g}× ({row.ci_low:.2g}–{row.ci_high:.2g})"


def crossover_text(found: Crossover, budgets: list[float]) -> str:
    first, second = found.pair
    if found.where == "never":
        return f"{first} and {second}: the fits never meet (parallel in log-FLOPs); no crossover."
    if found.where != "within":
        return (f"{first} and {second}: no crossover within the sweep {sweep_text(budgets)} (the fits meet only "
                "outside it: no result).")
    meeting = meeting_text(found, budgets)
    if found.outcome == NOT_MEASURABLE:
        return (f"{first} and {second}: {meeting}; one of them does not beat its untrained control at the budgets "
                "around the fitted crossing: not measurable.")
    if found.contradicted:
        return (f"{first} and {second}: {meeting}; the measured means at the budgets around the fitted crossing do "
                "not change order: no crossover is stated.")
    placed = placed_text(found.budget, found.ci_low, found.ci_high, budgets)
    if placed is None:
        return f"{first} and {second}: {meeting}: no crossover is stated."
    return f"{first} and {second} cross at {placed}, within the sweep {sweep_text(budgets)}."


def gain_text(gain: GainAt | None) -> str:
    """A budget's gain with the interval that agrees with its Holm outcome (a sweep written before such intervals:
    its 95 % one, which gain_section labels unadjusted), bold where it beats the control."""
    if gain is None:
        return "untested"
    low, high = holm_interval(gain)
    if low is None:
        low, high = gain.ci_low, gain.ci_high
    estimate, ci = f"{gain.estimate:+.3f}", "" if low is None else f" ({low:+.3f} to {high:+.3f})"
    return f"**{estimate}**{ci}" if beats_control(gain) else f"{estimate}{ci}"


def meets_text(meets: Placed, budgets: list[float]) -> str:
    if meets.where == "never":
        return "never (the fitted gain does not rise)"
    if meets.where != "within":
        return "outside the sweep (no result)"
    return placed_text(meets.budget, meets.ci_low, meets.ci_high, budgets) or \
        "not estimable within the sweep (its interval is open or reaches outside it)"


def gain_section(item: SweepYardstick, budgets: list[float]) -> str:
    """Each objective's gain over its own control at every budget and its trend against compute."""
    if not item.gains:
        return ""
    rows = []
    for spec, found in item.gains.items():
        trend, ci = found.trend, found.trend.per_decade_ci
        rows.append([spec, *(gain_text(g) for g in found.per_budget),
                     f"{trend.per_decade:+.3f}" + ("" if ci is None else f" ({ci[0]:+.3f} to {ci[1]:+.3f})"),
                     meets_text(trend.meets, budgets)])
    adjusted = any(g is not None and g.se is not None for found in item.gains.values() for g in found.per_budget)
    interval = ("Holm-adjusted interval over seeds and test examples, which excludes 0 exactly where it is **bold**: "
                if adjusted else "95 % interval over seeds and test examples, unadjusted (it may exclude 0 where the "
                "gain is not bold); **bold** ")
    return ("Gain over its own untrained control at each budget (that budget's verdict: difference with its "
            f"{interval}where it beats the control, Holm within that comparison's family), fitted as a line in "
            "log-FLOPs: the gain per decade of compute (95 % interval: the bootstrap over seeds, widened to the "
            "residual-based interval over the budgets where the means lack fit) and where the fitted gain meets the "
            "control, stated only inside the sweep:\n\n"
            + table(rows, ["objective", *(f"{b:.3g}" for b in budgets), "gain per decade", "meets its control at"]))


def yardstick_section(item: SweepYardstick, budgets: list[float], baseline: str) -> str:
    heads = [f"{budget:.3g} FLOPs" for budget in budgets]
    rows = [[spec, *(fmt(summary) for summary in means)] for spec, means in item.means.items()]
    rows += [[f"*{name}*", *([fmt(summary)] * len(budgets))] for name, summary in item.controls.items()]
    measured = ", ".join("yes" if m else "no" if m is False else "untested" for m in item.measures_pretraining)
    text = (f"### {item.label}\n\nMean ± 95 % t-interval over seeds of each budget's finished runs; the untrained "
            "controls (*italic*) spend no training FLOPs, so they are one level at every budget. Some objective beats "
            f"its control at each budget (that comparison's verdict): {measured}.\n\n" + table(rows, ["objective",
                                                                                                    *heads]))
    gains = gain_section(item, budgets)
    text += "\n\n" + gains if gains else ""
    if item.mirrors:
        return text + (f"\n\nDiagnostic: this yardstick copies the training input or task of "
                       f"{listing(item.mirrors)}; no fit, multiplier or crossover is drawn from it.")
    fit = item.fit
    if fit is None:
        return text + "\n\nNo objective beats its untrained control on it at any budget: nothing is fitted."
    lack = ("the intervals include the fit's lack of fit (residuals over the budgets)" if fit.lack_of_fit else
            "with two budgets the fit's lack of fit cannot be measured, so these intervals hold only if the form is "
            "right")
    text += (f"\n\nFit: {fit.fit_reason}; {lack}. Compute multiplier of each objective against `{baseline}` at "
             "every budget B (the baseline's FLOPs to reach the objective's fitted score at B, over B), read only "
             "where both beat their own untrained controls at B:\n\n")
    text += table([[spec, *(frontier_multiplier_text(row) for row in rows_)]
                   for spec, rows_ in fit.multipliers.items()], ["objective", *heads])
    return text + "\n\n" + "\n".join(f"- {crossover_text(meet, budgets)}" for meet in fit.crossovers)


def render(frontier: Sweep, plots: list[str]) -> str:
    budgets, baseline = frontier.budgets, frontier.baseline
    links = "\n".join(f"- [{budget:.3g} FLOPs]({budget_folder(budget)}/report.md): {answer_sentence(answer)}"
                      for budget, answer in zip(budgets, frontier.answers))
    setup = table([[key, value] for key, value in sweep_setup_table(frontier.setup).items()], ["", ""])
    sections = [
        "# The efficiency frontier\n\n"
        f"Objectives {', '.join(f'`{spec}`' for spec in frontier.objectives)} trained to each of "
        f"{len(budgets)} budgets ({', '.join(f'{b:.3g}' for b in budgets)} FLOPs), each run with its own complete "
        f"learning-rate schedule; baseline `{baseline}`. Each budget is a full comparison with its own report and "
        "answer:\n\n" + links,
        *([paper_text(frontier.paper)] if frontier.paper else []),
        "## Setup\n\n" + setup,
        "## Yardsticks across budgets\n\n" + "\n\n".join(yardstick_section(item, budgets, baseline)
                                                         for item in frontier.yardsticks),
        "## Plots\n\n" + ("\n\n".join(plots) or "No yardstick measures pretraining in this sweep: nothing to fit."),
    ]
    return "\n\n".join(sections) + "\n"


def panels(count: int) -> tuple[plt.Figure, list]:
    """A grid of `count` panels, two a row."""
    columns = min(2, count)
    rows = -(-count // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6 * columns, 4.5 * rows), squeeze=False)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return figure, list(axes.flat[:count])


def plot_frontier(frontier: Sweep, path: Path) -> bool:
    fitted = [item for item in frontier.yardsticks if item.fit is not None]
    if not fitted:
        return False
    figure, axes = panels(len(fitted))
    budgets = np.array(frontier.budgets, dtype=float)
    grid = np.geomspace(budgets[0], budgets[-1], 25)
    for item, ax in zip(fitted, axes):
        for spec, means in item.means.items():
            alpha, beta = item.fit.lines[spec]
            g = alpha + beta * np.log(grid)
            sign = 1.0 if item.higher_is_better else -1.0
            fit = sign * (sign * item.fit.ceiling - np.exp(g)) if item.fit.fit.startswith("power") else sign * g
            line, = ax.plot(grid, fit, label=spec)
            ax.errorbar(budgets, [m.mean for m in means], yerr=[m.ci95 or 0 for m in means], fmt="o",
                        color=line.get_color(), capsize=3)
        for (name, control), style in zip(item.controls.items(), ("--", ":", "-.")):
            ax.axhline(control.mean, color="grey", linestyle=style, label=name)
        ax.set(xscale="log", xlabel="training FLOPs per run (log)", ylabel=item.label, title=item.label)
        ax.legend(fontsize="small")
    figure.suptitle("Score against compute: each budget's runs (mean ± 95 % CI over seeds), the fits, and the "
                    "untrained controls (grey)")
    save_figure(figure, path)
    return True


def plot_gains(frontier: Sweep, path: Path) -> bool:
    """Per yardstick, each objective's gain over its control against compute, with its fitted line over the sweep."""
    shown = [item for item in frontier.yardsticks if item.gains]
    if not shown:
        return False
    figure, axes = panels(len(shown))
    budgets = np.array(frontier.budgets, dtype=float)
    grid = np.geomspace(budgets[0], budgets[-1], 25)
    for item, ax in zip(shown, axes):
        for spec, found in item.gains.items():
            points = [(b, g) for b, g in zip(budgets, found.per_budget) if g is not None]
            low = [g.estimate - g.ci_low if g.ci_low is not None else 0 for _, g in points]
            high = [g.ci_high - g.estimate if g.ci_high is not None else 0 for _, g in points]
            line = ax.errorbar([b for b, _ in points], [g.estimate for _, g in points], yerr=[low, high],
                               fmt="o", capsize=3, label=spec)
            alpha, beta = found.trend.line
            ax.plot(grid, alpha + beta * np.log(grid), color=line[0].get_color(), linestyle="--")
        ax.axhline(0.0, color="grey", linewidth=1, label="its untrained control")
        ax.set(xscale="log", xlabel="training FLOPs per run (log)", ylabel="gain over its untrained control",
               title=item.label + (" [diagnostic]" if item.mirrors else ""))
        ax.legend(fontsize="small")
    figure.suptitle("What pretraining bought: each objective's gain over its own untrained control (± 95 % CI) and "
                    "its fitted trend (dashed) over the sweep")
    save_figure(figure, path)
    return True


def write_frontier_report(out: Path, frontier: Sweep) -> Path:
    """results.json, the plots and report.md of a budget sweep, in `out`."""
    answers = [None if answer is None else replace(answer, sentence=answer_sentence(answer))
               for answer in frontier.answers]
    frontier = replace(frontier, answers=answers)  # each budget's answer with its sentence, as its results.json has it
    write_json(out / "results.json", {"frontier": to_json(frontier)})
    plots = []
    if plot_frontier(frontier, out / "frontier.png"):
        plots.append("![score against FLOPs across the budgets](frontier.png)")
    if plot_gains(frontier, out / "gains.png"):
        plots.append("![gain over the untrained control against budget](gains.png)")
    report = out / "report.md"
    write_atomic(report, render(frontier, plots))
    return report
