"""The comparison report: report.md (tabulate) with PNG plots (seaborn) beside it, and results.json for machines.

Every number comes from the runs' results; nothing here is typed in by hand. Files are written atomically.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from tabulate import tabulate  # noqa: E402

from bench.files import write_atomic, write_json  # noqa: E402
from bench.positions import analytic_count, describe_parts  # noqa: E402
from bench.stats import summarize, welch_p_value  # noqa: E402


def by_objective(runs: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        grouped[run["objective"]].append(run)
    return dict(grouped)


COUNTERS = ("checkpoint", "step", "flops", "tokens", "supervised_positions")
PROBE_KEYS = ("tagging_frozen", "tagging_finetuned", "component", "tagging_chance", "component_chance", "probe_flops")


def final_metrics(run: dict) -> dict[str, float]:
    """The objective's own held-out metrics at the budget (probes are reported on their own)."""
    return {k: v for k, v in run["curve"][-1].items() if k not in COUNTERS + PROBE_KEYS}


def table(rows: list[list], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def setup_section(setup: dict) -> str:
    rows = [[key, f"`{value}`" if key == "command" else value] for key, value in setup.items()]
    return "## 1. Setup\n\n" + table(rows, ["", ""])


def measured_density(runs: list[dict]) -> dict[str, float]:
    """Supervised positions per sequence, measured over every training batch, mean over seeds."""
    return {spec: sum(r["supervised_per_sequence"] for r in rs) / len(rs) for spec, rs in by_objective(runs).items()}


def density_section(positions: list[dict], measured: dict[str, float], seq_len: int) -> str:
    rows = [[row["objective"], row["attention"], analytic_count(row), f"{measured[row['objective']]:.2f}",
             f"{row['ratio_to_ar']:.3f}", describe_parts(row)] for row in positions]
    return (f"## 2. Signal density\n\nLoss-bearing positions per sequence of T = {seq_len} tokens: the analytic count "
            "beside the mean measured over every training batch; the ratio is to AR's T − 1.\n\n"
            + table(rows, ["objective", "attention", "analytic", "measured", "ratio to ar",
                           "[MASK] / random / kept, or parts"]))


def compute_section(runs: list[dict]) -> str:
    rows = []
    for spec, rs in by_objective(runs).items():
        mean = lambda key: sum(r[key] for r in rs) / len(rs)  # noqa: E731
        rows.append([spec, len(rs), f"{mean('flops_per_step'):.4g}", f"{mean('flops') / mean('tokens'):.4g}",
                     f"{mean('flops') / mean('supervised_positions'):.4g}", f"{mean('steps'):.1f}",
                     f"{mean('tokens'):.4g}", f"{mean('supervised_positions'):.4g}", f"{mean('flops'):.4g}",
                     f"{mean('wall_seconds'):.1f}", f"{mean('tokens_per_second'):,.0f}"])
    return ("## 3. Compute\n\nMeans over seeds. FLOPs are the suite's analytic count of every matrix product each "
            "objective executes (forward + backward, generator included); training stops at the first step that "
            "reaches the budget.\n\n"
            + table(rows, ["objective", "seeds", "FLOPs / step", "FLOPs / token", "FLOPs / supervised", "steps",
                           "tokens", "supervised positions", "total FLOPs", "wall s", "tokens / s"]))


def _p(value: float) -> str:
    return "" if value != value else f"{value:.3g}"


def results_section(runs: list[dict], bayes: dict | None) -> tuple[str, list[dict]]:
    grouped = by_objective(runs)
    baseline_spec = next(iter(grouped))
    seeds = min(len(rs) for rs in grouped.values())
    note = ("mean ± half-width of the 95 % t-interval over seeds; p is Welch's two-sided test against "
            f"`{baseline_spec}`" if seeds >= 2 else
            "one seed per objective: run with `--seeds 2` or more for confidence intervals and Welch tests")
    finals = {spec: [final_metrics(r) for r in rs] for spec, rs in grouped.items()}
    floors = (bayes or {}).get("floors", {})

    def column(spec: str, key: str) -> list[float]:
        return [f[key] for f in finals[spec] if key in f]

    loss_rows, summary = [], []
    for spec, rs in grouped.items():
        loss = summarize(column(spec, "loss"))
        p_value = welch_p_value(column(spec, "loss"), column(baseline_spec, "loss")) if spec != baseline_spec \
            else float("nan")
        others = sorted({k for f in finals[spec] for k in f if k != "loss" and k not in floors.get(spec, {})})
        extra = "; ".join(f"{k} {summarize(column(spec, k)).format()}" for k in others)
        loss_rows.append([spec, len(rs), loss.format(4), _p(p_value), extra])
        summary.append({"objective": spec, "seeds": len(rs), "loss_mean": loss.mean, "loss_ci95": loss.half_width,
                        "welch_p_vs_baseline": p_value,
                        **{f"{k}_mean": summarize(column(spec, k)).mean for k in others}})
    text = ("## 4. Results at equal compute\n\nEach objective's own held-out loss at the budget (" + note + "). "
            "The losses measure different tasks (a masked-token, a next-token, a replaced-token loss), so they "
            "compare seeds and budgets of one objective, not objectives with each other: the two yardsticks below "
            "do that.\n\n" + table(loss_rows, ["objective", "seeds", "held-out loss", "Welch p",
                                                "other held-out metrics"]))

    if floors:
        floor_rows = []
        for spec, item in zip(grouped, summary):
            for metric, floor in floors.get(spec, {}).items():
                value, excess = summarize(column(spec, metric)), summarize([v - floor for v in column(spec, metric)])
                floor_rows.append([spec, metric, value.format(4), f"{floor:.4f}", excess.format(4)])
                item[f"{metric}_bayes_floor"], item[f"{metric}_excess_mean"] = floor, excess.mean
        text += ("\n\n### Distance to the Bayes floor\n\nThe best loss any model could reach on exactly these "
                 "evaluation batches, computed by exact inference in the language that generated them (for masked "
                 "tokens the predictor also knows which positions were chosen, which no model does, so the floor is "
                 "a lower bound rather than always reachable). Only the "
                 "excess is comparable across objectives, and only in kind: each floor belongs to its own task. "
                 "ELECTRA's floor is its generator's; its discriminator's best loss depends on the generator. "
                 "Span corruption has no floor here.\n\n"
                 + table(floor_rows, ["objective", "metric", "held-out", "Bayes floor", "excess"]))

    probed = {spec: [r["probes"] for r in rs if "probes" in r] for spec, rs in grouped.items()}
    if any(probed.values()):
        ceiling = (bayes or {}).get("ceilings", {})
        probe_rows = []
        for spec, item in zip(grouped, summary):
            results = probed[spec]
            if not results:
                continue
            values = lambda key: [p[key] for p in results if key in p]  # noqa: E731
            tag_ceiling = ceiling.get("filtering_accuracy" if grouped[spec][0].get("attention") == "causal"
                                      else "smoothing_accuracy")
            p_value = (welch_p_value(values("tagging_frozen"), [p["tagging_frozen"] for p in probed[baseline_spec]])
                       if spec != baseline_spec and probed[baseline_spec] else float("nan"))
            finetuned = summarize(values("tagging_finetuned")).format() if values("tagging_finetuned") else ""
            probe_rows.append([spec, summarize(values("tagging_frozen")).format(),
                               "" if tag_ceiling is None else f"{tag_ceiling:.3f}", _p(p_value), finetuned,
                               summarize(values("component")).format(),
                               f"{sum(values('probe_flops')) / len(results):.3g}"])
            for key in ("tagging_frozen", "tagging_finetuned", "component"):
                if values(key):
                    item[f"{key}_mean"] = summarize(values(key)).mean
                    item[f"{key}_ci95"] = summarize(values(key)).half_width
            item["tagging_frozen_welch_p_vs_baseline"] = p_value
        chance = probed[next(spec for spec in grouped if probed[spec])][0]
        ceilings_text = ""
        if ceiling:
            ceilings_text = (f" Bayes ceilings on the test windows: tagging from the whole sequence (smoothing) "
                             f"{ceiling['smoothing_accuracy']:.3f}, from the left context only (filtering) "
                             f"{ceiling['filtering_accuracy']:.3f}; component {ceiling['component_accuracy']:.3f}.")
        text += ("\n\n### Probes on frozen features\n\nLinear probes on each final backbone's features, read in the "
                 "objective's own attention mode over clean windows: hidden-state tagging per position and mixture-"
                 "component classification per sequence (mean-pooled), plus a short fine-tuning probe for tagging. "
                 "A causal model sees only the left context, so its tagging is held to the filtering ceiling, the "
                 f"others to the smoothing ceiling. Chance (majority class): tagging {chance['tagging_chance']:.3f}, "
                 f"component {chance['component_chance']:.3f}.{ceilings_text} Probe FLOPs are not charged to the "
                 "budget.\n\n"
                 + table(probe_rows, ["objective", "tagging (frozen)", "its ceiling", "Welch p", "tagging (fine-tuned)",
                                      "component", "probe FLOPs"]))
    return text, summary


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


def plot_density(positions: list[dict], measured: dict[str, float], path: Path) -> None:
    frame = pd.DataFrame([{"objective": row["objective"], "count": "analytic", "positions": row["supervised_positions"]}
                          for row in positions]
                         + [{"objective": spec, "count": "measured", "positions": value}
                            for spec, value in measured.items()])
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


def write_report(out: Path, setup: dict, positions: list[dict], runs: list[dict], budget_flops: float,
                 seq_len: int, bayes: dict | None = None) -> Path:
    """Write report.md, the PNG plots and results.json into `out`; return report.md's path."""
    results_text, summary = results_section(runs, bayes)
    plot_loss(runs, out / "loss_vs_flops.png")
    measured = measured_density(runs)
    plot_density(positions, measured, out / "signal_density.png")
    plots = ["![held-out loss against FLOPs](loss_vs_flops.png)"]
    if plot_excess(runs, (bayes or {}).get("floors", {}), out / "excess_loss_vs_flops.png"):
        plots.append("![excess over the Bayes floor against FLOPs](excess_loss_vs_flops.png)")
    if plot_probes(runs, out / "probes_vs_flops.png"):
        plots.append("![probe accuracy against FLOPs](probes_vs_flops.png)")
    plots.append("![signal density](signal_density.png)")
    sections = [
        f"# Pretraining objectives at equal compute\n\nBudget: **{budget_flops:.3g} FLOPs** per run; objectives: "
        + ", ".join(f"`{spec}`" for spec in by_objective(runs)) + ".",
        setup_section(setup),
        density_section(positions, measured, seq_len),
        compute_section(runs),
        results_text,
        "## 5. Plots\n\n" + "\n\n".join(plots),
    ]
    write_json(out / "results.json", {"budget_flops": budget_flops, "setup": setup, "positions": positions,
                                      "bayes": bayes, "summary": summary, "runs": runs})
    report = out / "report.md"
    write_atomic(report, "\n\n".join(sections) + "\n")
    return report
