"""A budget sweep's own report: the frontier (bench.analysis.budgets) as report.md, results.json and two plots
in the sweep's folder, beside one full report per budget in its budget-B folder.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bench.analysis.frontier import reach_text
from bench.analysis.verdict import beats_control
from bench.files import write_atomic, write_json
from bench.report.plots import plt, save_figure
from bench.report.sections import fmt, paper_text, table


def budget_folder(budget: float) -> str:
    return f"budget-{budget:g}"


def multiplier_text(row: dict) -> str:
    if row["multiplier"] is None:
        return "none (the baseline's fit does not rise)"
    ci = (" (no CI)" if row["ci_low"] is None else " (CI unbounded)" if row["ci_low"] == 0 or
          math.isinf(row["ci_high"]) else f" ({row['ci_low']:.2g}–{row['ci_high']:.2g})")
    return f"{row['multiplier']:.2g}×{ci}" + (" extrapolated" if row["extrapolated"] else "")


def gain_text(gain: dict | None) -> str:
    if gain is None:
        return "untested"
    ci = "" if gain["ci_low"] is None else f" ({gain['ci_low']:+.3f} to {gain['ci_high']:+.3f})"
    return f"**{gain['gain']:+.3f}**{ci}" if beats_control(gain) else f"{gain['gain']:+.3f}{ci}"


def gain_section(item: dict, budgets: list[float]) -> str:
    """Each objective's gain over its own control at every budget, and where its fitted trend meets the control and
    would clear its CI: the answer to "would pretraining pay at a larger budget?" where no budget of the sweep says
    yes."""
    if not item.get("gains"):
        return ""
    array = np.array(budgets, dtype=float)
    rows = []
    for spec, found in item["gains"].items():
        trend = found["trend"]
        ci = trend["per_decade_ci"]
        beaten = [f"{b:.3g}" for b, g in zip(budgets, found["per_budget"]) if g is not None and beats_control(g)]
        clears = (f"beats it at {', '.join(beaten)} (measured)" if beaten else
                  "" if trend["clears"] is None else reach_text(trend["clears"], array))
        rows.append([spec, *(gain_text(g) for g in found["per_budget"]),
                     f"{trend['per_decade']:+.3f}" + ("" if ci is None else f" ({ci[0]:+.3f} to {ci[1]:+.3f})"),
                     reach_text(trend["meets"], array), clears])
    return ("Gain over its own untrained control at each budget (that budget's verdict: difference, Welch's 95 % CI; "
            "**bold** where it beats the control after Holm), fitted as a line in log-FLOPs with a bootstrap over "
            "seeds: the gain per decade of compute, and the budgets at which the fitted gain meets the control and "
            "would clear its CI (reaches the half-width of the CI measured at the largest budget, before Holm's "
            "correction), if the trend and the seeds' spread held; where a budget of the sweep shows the gain, that "
            "measurement is stated instead:\n\n"
            + table(rows, ["objective", *(f"{b:.3g}" for b in budgets), "gain per decade", "meets its control at",
                           "would clear its CI at"]))


def yardstick_section(item: dict, budgets: list[float], baseline: str) -> str:
    heads = [f"{budget:.3g} FLOPs" for budget in budgets]
    rows = [[spec, *(fmt(summary) for summary in means)] for spec, means in item["means"].items()]
    rows += [[f"*{name}*", *([fmt(summary)] * len(budgets))] for name, summary in item["controls"].items()]
    measured = ", ".join("yes" if m else "no" if m is False else "untested" for m in item["measures_pretraining"])
    text = (f"### {item['label']}\n\nMean ± 95 % CI over seeds of each budget's finished runs; the untrained "
            f"controls (*italic*) spend no training FLOPs, so they are one level at every budget. Beats its "
            f"control at each budget (that comparison's verdict, Welch and Holm): {measured}.\n\n"
            + table(rows, ["objective", *heads]))
    gains = gain_section(item, budgets)
    text += "\n\n" + gains if gains else ""
    if "fit" not in item:
        return text + "\n\n" + item["sentence"]
    never = {spec for spec, beats in item.get("beats_control", {}).items() if not any(beats)}
    text += (f"\n\nFit: {item['fit_reason']}. Compute multiplier of each objective against `{baseline}` at every "
             "budget B (the baseline's FLOPs to reach the objective's fitted score at B, over B; 95 % CI from a "
             "bootstrap over seeds; *extrapolated*: that compute lies outside the sweep"
             + ("; †: the objective beats its own untrained control at no budget of the sweep, so its multiplier "
                "measures how far it moved from its initialisation, not what it learned" if never else "") + "):\n\n")
    text += table([[spec + (" †" if spec in never else ""), *(multiplier_text(row) for row in rows_)]
                   for spec, rows_ in item["multipliers"].items()], ["objective", *heads])
    return text + "\n\n" + "\n".join(f"- {meet['sentence']}" for meet in item["crossovers"])


def render(frontier: dict, plots: list[str]) -> str:
    budgets, baseline = frontier["budgets"], frontier["baseline"]
    links = "\n".join(f"- [{budget:.3g} FLOPs]({budget_folder(budget)}/report.md): {sentence or 'no verdict'}"
                      for budget, sentence in zip(budgets, frontier["pretraining"]))
    setup = table([[key, value] for key, value in frontier["setup"].items()], ["", ""])
    sections = [
        "# The efficiency frontier\n\n"
        f"Objectives {', '.join(f'`{spec}`' for spec in frontier['objectives'])} trained to each of "
        f"{len(budgets)} budgets ({', '.join(f'{b:.3g}' for b in budgets)} FLOPs), each run with its own complete "
        f"learning-rate schedule; baseline `{baseline}`. Each budget is a full comparison with its own report; "
        "whether pretraining paid there:\n\n" + links,
        *([paper_text(frontier["paper"])] if frontier.get("paper") else []),
        "## Setup\n\n" + setup,
        "## Yardsticks across budgets\n\n" + "\n\n".join(yardstick_section(item, budgets, baseline)
                                                         for item in frontier["yardsticks"]),
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


def plot_frontier(frontier: dict, path: Path) -> bool:
    fitted = [item for item in frontier["yardsticks"] if "fit" in item]
    if not fitted:
        return False
    figure, axes = panels(len(fitted))
    budgets = np.array(frontier["budgets"])
    for item, ax in zip(fitted, axes):
        grid = np.array(item["bands"]["flops"])
        for spec, means in item["means"].items():
            band = item["bands"][spec]
            line, = ax.plot(grid, band["fit"], label=spec)
            ax.fill_between(grid, band["low"], band["high"], color=line.get_color(), alpha=0.15)
            ax.errorbar(budgets, [m["mean"] for m in means], yerr=[m["ci95"] or 0 for m in means], fmt="o",
                        color=line.get_color(), capsize=3)
        for (name, control), style in zip(item["controls"].items(), ("--", ":", "-.")):
            ax.axhline(control["mean"], color="grey", linestyle=style, label=name)
        ax.set(xscale="log", xlabel="training FLOPs per run (log)", ylabel=item["label"], title=item["label"])
        ax.legend(fontsize="small")
    figure.suptitle("Score against compute: each budget's runs (mean ± 95 % CI), the fits with their\nbootstrap "
                    "bands (95 %), and the untrained controls (grey)")
    save_figure(figure, path)
    return True


def plot_multipliers(frontier: dict, path: Path) -> bool:
    fitted = [item for item in frontier["yardsticks"] if "fit" in item]
    if not fitted:
        return False
    figure, axes = panels(len(fitted))
    for item, ax in zip(fitted, axes):
        for spec, rows in item["multipliers"].items():
            shown = [row for row in rows if row["multiplier"] is not None]
            if not shown:
                continue
            low = [row["multiplier"] - (row["ci_low"] or row["multiplier"]) for row in shown]
            high = [(row["ci_high"] or row["multiplier"]) - row["multiplier"] for row in shown]
            line = ax.errorbar([row["budget"] for row in shown], [row["multiplier"] for row in shown],
                               yerr=[low, high], fmt="o-", capsize=3, label=spec)
            outside = [row for row in shown if row["extrapolated"]]  # hollow: the compute lies outside the sweep
            ax.plot([row["budget"] for row in outside], [row["multiplier"] for row in outside], "o",
                    markerfacecolor="white", color=line[0].get_color(), zorder=3)
        ax.axhline(1.0, color="grey", linestyle="--", label=f"= {frontier['baseline']}")
        ax.set(xscale="log", yscale="log", xlabel="budget (FLOPs, log)",
               ylabel=f"compute multiplier against {frontier['baseline']}", title=item["label"])
        ax.legend(fontsize="small")
    figure.suptitle("How much compute the baseline needs to match each objective, at every budget (95 % CI; "
                    "hollow: extrapolated)")
    save_figure(figure, path)
    return True


def plot_gains(frontier: dict, path: Path) -> bool:
    """Per yardstick, each objective's gain over its control against compute, with its fitted line drawn on to where
    it would clear its CI (at most twice the sweep's width beyond it)."""
    shown = [item for item in frontier["yardsticks"] if item.get("gains")]
    if not shown:
        return False
    figure, axes = panels(len(shown))
    budgets = np.array(frontier["budgets"], dtype=float)
    farthest = budgets[-1] * (budgets[-1] / budgets[0]) ** 2
    for item, ax in zip(shown, axes):
        for spec, found in item["gains"].items():
            points = [(b, g) for b, g in zip(budgets, found["per_budget"]) if g is not None]
            low = [g["gain"] - g["ci_low"] if g["ci_low"] is not None else 0 for _, g in points]
            high = [g["ci_high"] - g["gain"] if g["ci_high"] is not None else 0 for _, g in points]
            line = ax.errorbar([b for b, _ in points], [g["gain"] for _, g in points], yerr=[low, high], fmt="o",
                               capsize=3, label=spec)
            trend, clears = found["trend"], found["trend"]["clears"]
            beaten = any(beats_control(g) for _, g in points)  # measured: nothing to draw on
            end = min(max(budgets[-1], clears["budget"] if clears and clears["budget"] and not beaten else 0),
                      farthest)
            grid = np.geomspace(budgets[0], end, 50)
            alpha, beta = trend["line"]
            ax.plot(grid, alpha + beta * np.log(grid), color=line[0].get_color(), linestyle="--")
        ax.axhline(0.0, color="grey", linewidth=1, label="its untrained control")
        ax.set(xscale="log", xlabel="training FLOPs per run (log)", ylabel="gain over its untrained control",
               title=item["label"])
        ax.legend(fontsize="small")
    figure.suptitle("What pretraining bought: each objective's gain over its own untrained control (± 95 % CI), and\n"
                    "the fitted trend (dashed), drawn on to where it would clear its CI")
    save_figure(figure, path)
    return True


def write_frontier_report(out: Path, frontier: dict) -> Path:
    """results.json, frontier.png, multipliers.png and report.md of a budget sweep, in `out`."""
    write_json(out / "results.json", {"frontier": frontier})
    plots = []
    if plot_frontier(frontier, out / "frontier.png"):
        plots.append("![score against FLOPs across the budgets](frontier.png)")
    if plot_multipliers(frontier, out / "multipliers.png"):
        plots.append("![compute multiplier against budget](multipliers.png)")
    if plot_gains(frontier, out / "gains.png"):
        plots.append("![gain over the untrained control against budget](gains.png)")
    report = out / "report.md"
    write_atomic(report, render(frontier, plots))
    return report
