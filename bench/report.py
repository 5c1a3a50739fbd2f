"""The comparison report: report.md (tabulate) with PNG plots (seaborn) beside it, and results.json for machines.

Every number comes from the runs' results; nothing here is typed in by hand. Files are written atomically.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from tabulate import tabulate  # noqa: E402

from bench.density import analytic_count  # noqa: E402
from bench.files import write_atomic, write_json  # noqa: E402


def table(rows: list[list], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def fmt(summary: dict | None, digits: int = 3) -> str:
    """A stat dict of bench.results as "mean ± ci95", or the mean alone with one seed."""
    if not summary:
        return ""
    if summary["ci95"] is None:
        return f"{summary['mean']:.{digits}f}"
    return f"{summary['mean']:.{digits}f} ± {summary['ci95']:.{digits}f}"


def fmt_p(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def setup_section(setup: dict) -> str:
    rows = [[key, f"`{value}`" if key == "command" else value] for key, value in setup.items()]
    return "## 1. Setup\n\n" + table(rows, ["", ""])


def density_section(results: dict) -> str:
    measured = {o["objective"]: o["compute"]["supervised_per_sequence"] for o in results["objectives"]}
    rows = [[row["objective"], row["attention"], analytic_count(row),
             f"{measured[row['objective']]:.2f}" if row["objective"] in measured else "",
             f"{row['ratio_to_ar']:.3f}", row["parts"]] for row in results["positions"]]
    return (f"## 2. Signal density\n\nLoss-bearing positions per sequence of T = {results['seq_len']} tokens: the "
            "analytic count beside the mean measured over every training batch; the ratio is to AR's T − 1.\n\n"
            + table(rows, ["objective", "attention", "analytic", "measured", "ratio to ar",
                           "[MASK] / random / kept, or parts"]))


def compute_section(results: dict) -> str:
    rows = []
    for o in results["objectives"]:
        c = o["compute"]
        rows.append([o["objective"], o["seeds"], f"{c['flops_per_step']:.4g}", f"{c['flops_per_token']:.4g}",
                     f"{c['flops_per_supervised']:.4g}", f"{c['steps']:.1f}", f"{c['tokens']:.4g}",
                     f"{c['supervised_positions']:.4g}", f"{c['flops']:.4g}", f"{c['wall_seconds']:.1f}",
                     f"{c['tokens_per_second']:,.0f}"])
    return ("## 3. Compute\n\nMeans over seeds. FLOPs are the suite's analytic count of every matrix product each "
            "objective executes (forward + backward, generator included); training stops at the first step that "
            "reaches the budget.\n\n"
            + table(rows, ["objective", "seeds", "FLOPs / step", "FLOPs / token", "FLOPs / supervised", "steps",
                           "tokens", "supervised positions", "total FLOPs", "wall s", "tokens / s"]))


def diverged_section(results: dict) -> str:
    if not results["diverged"]:
        return ""
    rows = [[d["objective"], d["seed"], d["step"], "" if d["last_finite_loss"] is None else
             f"{d['last_finite_loss']:.4f}"] for d in results["diverged"]]
    return ("\n\n### Diverged runs\n\nThese runs stopped when their loss became NaN or infinite; they are left out "
            "of every table below. Rerun them with a lower learning rate.\n\n"
            + table(rows, ["objective", "seed", "step", "last finite loss"]))


def loss_table(results: dict) -> str:
    baseline = results["baseline"]
    note = ("mean ± half-width of the 95 % t-interval over seeds; p is Welch's two-sided test against "
            f"`{baseline}`" if results["seeds"] >= 2 else
            "one seed per objective: run with `--seeds 2` or more for confidence intervals and Welch tests")
    rows = [[o["objective"], o["seeds"], fmt(o["loss"], 4), fmt_p(o["welch_p_vs_baseline"]),
             "; ".join(f"{key} {fmt(value)}" for key, value in o["metrics"].items())] for o in results["objectives"]]
    return ("## 4. Results at equal compute\n\nEach objective's own held-out loss at the budget (" + note + "). "
            "The losses measure different tasks (a masked-token, a next-token, a replaced-token loss), so they "
            "compare seeds and budgets of one objective, not objectives with each other: the two yardsticks below "
            "do that.\n\n" + table(rows, ["objective", "seeds", "held-out loss", "Welch p", "other held-out metrics"]))


def floor_table(results: dict) -> str:
    rows = [[o["objective"], metric, fmt(item["value"], 4), f"{item['floor']:.4f}", fmt(item["excess"], 4)]
            for o in results["objectives"] for metric, item in o["floors"].items()]
    if not rows:
        return ""
    return ("\n\n### Distance to the Bayes floor\n\nThe best loss any model could reach on exactly these "
            "evaluation batches, computed by exact inference in the language that generated them (for masked "
            "tokens the predictor also knows which positions were chosen, which no model does, so the floor is "
            "a lower bound rather than always reachable). Only the excess is comparable across objectives, and only "
            "in kind: each floor belongs to its own task. An objective without a floor here (span corruption, "
            "span masking) has a corruption the per-position model cannot express; ELECTRA's floor is its "
            "generator's, since its discriminator's best loss depends on the generator.\n\n"
            + table(rows, ["objective", "metric", "held-out", "Bayes floor", "excess"]))


def probe_table(results: dict) -> str:
    probed = [o for o in results["objectives"] if o["probes"]]
    if not probed:
        return ""
    rows = [[o["objective"], fmt(p.get("tagging_frozen")),
             "" if p["tagging_ceiling_value"] is None else f"{p['tagging_ceiling_value']:.3f} ({p['tagging_ceiling']})",
             fmt_p(p["tagging_frozen_welch_p_vs_baseline"]), fmt(p.get("tagging_finetuned")), fmt(p.get("component")),
             f"{p['probe_flops']:.3g}"] for o in probed for p in [o["probes"]]]
    chance, ceiling = probed[0]["probes"], (results["bayes"] or {}).get("ceilings", {})
    ceilings_text = ""
    if ceiling:
        ceilings_text = (f" Bayes ceilings on the test windows: tagging from the whole sequence (smoothing) "
                         f"{ceiling['smoothing_accuracy']:.3f}, from the left context only (filtering) "
                         f"{ceiling['filtering_accuracy']:.3f}; component {ceiling['component_accuracy']:.3f}.")
    return ("\n\n### Probes on frozen features\n\nLinear probes on each final backbone's features, read in the "
            "objective's own attention mode over clean windows: hidden-state tagging per position and mixture-"
            "component classification per sequence (mean-pooled), plus a short fine-tuning probe for tagging. "
            "Each backbone's tagging is held to the ceiling its features can reach: a causal model sees only the "
            "left context (filtering), the others the whole window (smoothing). Chance (majority class): tagging "
            f"{chance['tagging_chance']:.3f}, component {chance['component_chance']:.3f}.{ceilings_text} Probe "
            "FLOPs are not charged to the budget.\n\n"
            + table(rows, ["objective", "tagging (frozen)", "its ceiling", "Welch p", "tagging (fine-tuned)",
                           "component", "probe FLOPs"]))


def curve_frame(runs: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"objective": r["objective"], "seed": r["seed"], **point} for r in runs for point in r["curve"]])


def plot_loss(runs: list[dict], path: Path) -> None:
    frame = curve_frame(runs)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    sns.lineplot(frame, x="checkpoint", y="loss", hue="objective", marker="o", errorbar=("ci", 95), ax=axes)
    axes.set(xscale="log", yscale="log", xlabel="training FLOPs (log)", ylabel="held-out loss (own objective, log)",
             title="Held-out loss against compute (band: 95 % CI over seeds)")
    save_figure(figure, path)


def plot_excess(runs: list[dict], floors: dict, path: Path) -> bool:
    rows = [{"objective": f"{r['objective']} ({metric})" if metric != "loss" else r["objective"], "seed": r["seed"],
             "checkpoint": point["checkpoint"], "excess": point[metric] - floor}
            for r in runs for metric, floor in floors.get(r["objective"], {}).items() for point in r["curve"]]
    if not rows:
        return False
    figure, axes = plt.subplots(figsize=(7, 4.5))
    sns.lineplot(pd.DataFrame(rows), x="checkpoint", y="excess", hue="objective", marker="o", errorbar=("ci", 95),
                 ax=axes)
    axes.set(xscale="log", xlabel="training FLOPs (log)", ylabel="held-out loss − Bayes floor (nats)",
             title="Excess over the Bayes-optimal loss")
    save_figure(figure, path)
    return True


def plot_probes(runs: list[dict], path: Path) -> bool:
    rows = [{"objective": r["objective"], "seed": r["seed"], "checkpoint": point["checkpoint"], "probe": probe,
             "accuracy": point[key]}
            for r in runs for point in r["curve"]
            for key, probe in (("tagging_frozen", "tagging"), ("component", "component")) if key in point]
    if not rows:
        return False
    figure, axes = plt.subplots(figsize=(7, 4.5))
    sns.lineplot(pd.DataFrame(rows), x="checkpoint", y="accuracy", hue="objective", style="probe", marker="o",
                 errorbar=("ci", 95), ax=axes)
    axes.set(xscale="log", xlabel="training FLOPs (log)", ylabel="probe accuracy (frozen features)",
             title="Probe accuracy against compute")
    save_figure(figure, path)
    return True


def plot_density(results: dict, path: Path) -> None:
    frame = pd.DataFrame([{"objective": row["objective"], "count": "analytic", "positions": row["supervised_positions"]}
                          for row in results["positions"]]
                         + [{"objective": o["objective"], "count": "measured",
                             "positions": o["compute"]["supervised_per_sequence"]} for o in results["objectives"]])
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


def write_plots(results: dict, out: Path) -> list[str]:
    """The PNG plots beside report.md; returns their markdown links."""
    runs = results["runs"]
    plot_loss(runs, out / "loss_vs_flops.png")
    plot_density(results, out / "signal_density.png")
    plots = ["![held-out loss against FLOPs](loss_vs_flops.png)"]
    if plot_excess(runs, (results["bayes"] or {}).get("floors", {}), out / "excess_loss_vs_flops.png"):
        plots.append("![excess over the Bayes floor against FLOPs](excess_loss_vs_flops.png)")
    if plot_probes(runs, out / "probes_vs_flops.png"):
        plots.append("![probe accuracy against FLOPs](probes_vs_flops.png)")
    return plots + ["![signal density](signal_density.png)"]


def render(results: dict, plots: list[str]) -> str:
    """report.md from the results dict (bench.results.build_results)."""
    sections = [
        f"# Pretraining objectives at equal compute\n\nBudget: **{results['budget_flops']:.3g} FLOPs** per run; "
        "objectives: " + ", ".join(f"`{o['objective']}`" for o in results["objectives"]) + ".",
        setup_section(results["setup"]),
        density_section(results),
        compute_section(results) + diverged_section(results),
        loss_table(results) + floor_table(results) + probe_table(results),
        "## 5. Plots\n\n" + "\n\n".join(plots),
    ]
    return "\n\n".join(sections) + "\n"


def write_report(out: Path, results: dict) -> Path:
    """Write results.json, the PNG plots and report.md into `out`; return report.md's path."""
    write_json(out / "results.json", results)
    plots = write_plots(results, out)
    report = out / "report.md"
    write_atomic(report, render(results, plots))
    return report
