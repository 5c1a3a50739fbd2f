"""The report's PNG plots (seaborn): losses, excess over the Bayes floor, yardsticks against FLOPs with the untrained
controls' band, signal density.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from bench.analysis.claims import holm_interval
from bench.analysis.measures import yardsticks
from bench.analysis.stats import summarize
from bench.analysis.summaries import Results
from bench.common.files import write_atomic
from bench.training.records import RunRecord



def t_band(values: pd.Series) -> tuple[float, float]:
    """The tables' interval over seeds (the mean ± the half-width of the 95 % t-interval, bench.analysis.stats), for
    seaborn's bands: its default is a percentile bootstrap, which the tables never use and which under-covers with
    five seeds. With one seed there is no interval: the band is the point."""
    found = summarize(list(values))
    half = 0.0 if math.isnan(found.half_width) else found.half_width
    return found.mean - half, found.mean + half


BAND = t_band  # every band in every plot


def curve_frame(runs: list[RunRecord]) -> pd.DataFrame:
    """The objectives' own metrics at every checkpoint, a row per (run, checkpoint)."""
    return pd.DataFrame([{"objective": r.objective, "seed": r.seed, "checkpoint": point.checkpoint, **point.metrics}
                         for r in runs for point in r.curve])


def plot_loss(runs: list[RunRecord], path: Path) -> None:
    """One panel per objective: their losses measure different tasks and do not share a scale."""
    frame = curve_frame(runs)
    specs = list(dict.fromkeys(frame["objective"]))
    figure, axes = plt.subplots(1, len(specs), figsize=(3.6 * len(specs), 3.6), squeeze=False)
    for spec, ax in zip(specs, axes[0]):
        sns.lineplot(frame[frame["objective"] == spec], x="checkpoint", y="loss", marker="o", errorbar=BAND, ax=ax)
        ax.set(xscale="log", xlabel="training FLOPs (log)", ylabel="held-out loss (own objective)", title=spec)
    figure.suptitle("Each objective's own held-out loss against compute (band: 95 % t-interval over seeds)")
    save_figure(figure, path)


def plot_excess(runs: list[RunRecord], floors: dict, path: Path) -> bool:
    rows = [{"objective": f"{r.objective} ({metric})" if metric != "loss" else r.objective, "seed": r.seed,
             "checkpoint": point.checkpoint, "excess": point.metrics[metric] - floor}
            for r in runs for metric, floor in floors.get(r.objective, {}).items() for point in r.curve
            if point.metrics.get(metric) is not None]
    if not rows:
        return False
    figure, axes = plt.subplots(figsize=(7, 4.5))
    sns.lineplot(pd.DataFrame(rows), x="checkpoint", y="excess", hue="objective", marker="o", errorbar=BAND, ax=axes)
    axes.set(xscale="log", xlabel="training FLOPs (log)", ylabel="held-out loss − Bayes floor (nats)",
             title="Excess over the Bayes-optimal loss")
    save_figure(figure, path)
    return True


def plot_yardsticks(results: Results, path: Path) -> bool:
    """One panel per yardstick with a curve over FLOPs (the neutral tasks, read frozen at every checkpoint): what the
    compute multipliers are read from."""
    ceilings = (results.bayes or {}).get("ceilings") or {}
    runs = results.runs
    rows = [{"objective": r.objective, "checkpoint": point.checkpoint, "yardstick": yardstick.label,
             "value": found.value}
            for yardstick in yardsticks(runs, ceilings, None, results.tasks) if yardstick.point is not None
            for r in runs for point in r.curve for found in [yardstick.point(point)] if found is not None]
    if not rows:
        return False
    frame = pd.DataFrame(rows).dropna()
    labels = list(dict.fromkeys(frame["yardstick"]))
    columns = min(4, len(labels))
    rows_ = -(-len(labels) // columns)
    figure, axes = plt.subplots(rows_, columns, figsize=(5 * columns, 4 * rows_), squeeze=False)
    for ax in axes.flat[len(labels):]:
        ax.set_visible(False)
    controls = {y.label: y.controls for y in (results.verdict.yardsticks if results.verdict else [])}
    for label, ax in zip(labels, axes.flat):
        sns.lineplot(frame[frame["yardstick"] == label], x="checkpoint", y="value", hue="objective", marker="o",
                     errorbar=BAND, ax=ax)
        for control, style in zip(controls.get(label, []), ("--", ":", "-.")):  # at 0 FLOPs: a level, not a point
            ax.axhline(control.estimate, color="grey", linestyle=style, label=control.control)
            if control.ci_low is not None:
                ax.axhspan(control.ci_low, control.ci_high, color="grey", alpha=0.15)
        if controls.get(label):
            ax.legend(fontsize="small")
        ax.set(xscale="log", xlabel="training FLOPs (log)", ylabel=label, title=label)
    figure.suptitle("Yardsticks against compute (band: 95 % t-interval over seeds; grey: the untrained controls)")
    save_figure(figure, path)
    return True


def plot_gains(results: Results, path: Path) -> bool:
    """A forest plot: every objective's gain over its own untrained control, per yardstick, with its Holm-adjusted
    interval (seeds and test examples); the mirroring yardsticks marked as diagnostics."""
    v = results.verdict
    rows = [(y.label + (" [diagnostic]" if y.mirrors else "") + (" [main]" if y.yardstick == v.main else ""), g)
            for y in (v.yardsticks if v else []) for g in y.gains]
    if not rows:
        return False
    labels = list(dict.fromkeys(label for label, _ in rows))
    specs = list(dict.fromkeys(g.objective for _, g in rows))
    figure, axes = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
    palette = sns.color_palette(n_colors=len(specs))
    for position, (label, gain) in enumerate(reversed(rows)):
        color = palette[specs.index(gain.objective)]
        low, high = holm_interval(gain)  # the table's interval: it excludes 0 exactly where the gain is significant
        if low is not None:
            axes.plot([low, high], [position, position], color=color)
        axes.plot(gain.estimate, position, "o", color=color)
    axes.axvline(0, color="grey", linestyle="--")
    axes.set_yticks(range(len(rows)), [f"{label}: {g.objective}" for label, g in reversed(rows)], fontsize=7)
    axes.set(xlabel="gain over the untrained control (Holm-adjusted CI)",
             title="What pretraining bought, per yardstick")
    save_figure(figure, path)
    return bool(labels)


def plot_density(results: Results, path: Path) -> None:
    frame = pd.DataFrame([{"objective": row["objective"], "count": "analytic", "positions": row["supervised_positions"]}
                          for row in results.positions]
                         + [{"objective": o.objective, "count": "measured",
                             "positions": o.compute.supervised_per_sequence} for o in results.objectives])
    figure, axes = plt.subplots(figsize=(7, 4))
    sns.barplot(frame, x="objective", y="positions", hue="count", ax=axes)
    axes.set(ylabel="supervised positions per sequence", title="Signal density")
    save_figure(figure, path)


def save_figure(figure: plt.Figure, path: Path) -> None:
    for axes in figure.axes:
        if axes.get_xscale() == "log":  # decade labels only: minor labels collide on short ranges
            axes.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=120)
    plt.close(figure)
    write_atomic(path, buffer.getvalue())


def write_plots(results: Results, out: Path) -> list[str]:
    """The PNG plots beside report.md; returns their markdown links."""
    runs = results.runs
    if not runs:  # every run diverged: the report is the table that says so
        return []
    plot_loss(runs, out / "loss_vs_flops.png")
    plot_density(results, out / "signal_density.png")
    plots = ["![held-out loss against FLOPs](loss_vs_flops.png)"]
    plot_gains(results, out / "gains_forest.png")  # linked from the answer, at the top
    if plot_excess(runs, (results.bayes or {}).get("floors", {}), out / "excess_loss_vs_flops.png"):
        plots.append("![excess over the Bayes floor against FLOPs](excess_loss_vs_flops.png)")
    if plot_yardsticks(results, out / "yardsticks_vs_flops.png"):
        plots.insert(0, "![yardsticks against FLOPs](yardsticks_vs_flops.png)")
    return plots + ["![signal density](signal_density.png)"]
