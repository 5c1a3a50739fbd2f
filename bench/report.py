"""The comparison report: report.md (tabulate) with PNG plots (seaborn) beside it, and results.json for machines.

Every number comes from the runs' results; nothing here is typed in by hand. Files are written atomically.
"""

from __future__ import annotations

import io
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from tabulate import tabulate  # noqa: E402

from bench.files import write_atomic, write_json  # noqa: E402
from bench.stats import summarize, welch_p_value  # noqa: E402


def by_objective(runs: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        grouped[run["objective"]].append(run)
    return dict(grouped)


def final_metrics(run: dict) -> dict[str, float]:
    return {k: v for k, v in run["curve"][-1].items()
            if k not in ("checkpoint", "step", "flops", "tokens", "supervised_positions")}


def table(rows: list[list], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def setup_section(setup: dict) -> str:
    rows = [[key, f"`{value}`" if key == "command" else value] for key, value in setup.items()]
    return "## 1. Setup\n\n" + table(rows, ["", ""])


def density_section(positions: list[dict], runs: list[dict], seq_len: int) -> str:
    measured = {spec: sum(r["supervised_per_sequence"] for r in rs) / len(rs) for spec, rs in by_objective(runs).items()}
    rows = []
    for row in positions:
        split = f"{row['mask']:.2f} / {row['random']:.2f} / {row['keep']:.2f}" if "mask" in row else ""
        if "generator_positions" in row:
            split = f"discriminator {row['discriminator_positions']} + generator {row['generator_positions']:g}"
        if "spans" in row:
            split = f"{row['noise_tokens']} noise tokens in {row['spans']} spans of {row['raw_tokens']} raw tokens"
        rows.append([row["objective"], row["attention"], f"{row['supervised_positions']:g}",
                     f"{measured[row['objective']]:.2f}", f"{row['ratio_to_ar']:.3f}", split])
    return (f"## 2. Signal density\n\nLoss-bearing positions per sequence of T = {seq_len} tokens: the analytic count "
            "beside the mean measured over every training batch; the ratio is to AR's T − 1.\n\n"
            + table(rows, ["objective", "attention", "analytic", "measured", "ratio to ar",
                           "[MASK] / random / kept, or parts"]))


def compute_section(runs: list[dict]) -> str:
    rows = []
    for spec, rs in by_objective(runs).items():
        mean = lambda key: sum(r[key] for r in rs) / len(rs)  # noqa: E731
        rows.append([spec, len(rs), f"{mean('flops_per_step'):.4g}", f"{mean('steps'):.1f}", f"{mean('tokens'):.4g}",
                     f"{mean('supervised_positions'):.4g}", f"{mean('flops'):.4g}", f"{mean('wall_seconds'):.1f}",
                     f"{mean('tokens_per_second'):,.0f}"])
    return ("## 3. Compute\n\nMeans over seeds. FLOPs are the suite's analytic count of every matrix product each "
            "objective executes (forward + backward, generator included); training stops at the first step that "
            "reaches the budget.\n\n"
            + table(rows, ["objective", "seeds", "FLOPs / step", "steps", "tokens", "supervised positions",
                           "total FLOPs", "wall s", "tokens / s"]))


def results_section(runs: list[dict]) -> tuple[str, list[dict]]:
    grouped = by_objective(runs)
    baseline_spec = next(iter(grouped))
    baseline = [final_metrics(r)["loss"] for r in grouped[baseline_spec]]
    rows, summary = [], []
    for spec, rs in grouped.items():
        finals = [final_metrics(r) for r in rs]
        losses = [f["loss"] for f in finals]
        loss = summarize(losses)
        p_value = welch_p_value(losses, baseline) if spec != baseline_spec else float("nan")
        others = sorted({k for f in finals for k in f if k != "loss"})
        extra = "; ".join(f"{k} {summarize([f[k] for f in finals]).format()}" for k in others)
        rows.append([spec, len(rs), loss.format(4), "" if p_value != p_value else f"{p_value:.3g}", extra])
        summary.append({"objective": spec, "seeds": len(rs), "loss_mean": loss.mean, "loss_ci95": loss.half_width,
                        "welch_p_vs_baseline": p_value, **{f"{k}_mean": summarize([f[k] for f in finals]).mean
                                                            for k in others}})
    seeds = min(len(rs) for rs in grouped.values())
    note = ("mean ± half-width of the 95 % t-interval over seeds; p is Welch's two-sided test against "
            f"`{baseline_spec}`" if seeds >= 2 else
            "one seed per objective: run with `--seeds 2` or more for confidence intervals and Welch tests")
    text = ("## 4. Results at equal compute\n\nEach objective's own held-out loss at the budget (" + note + "). "
            "The losses measure different tasks (a masked-token, a next-token, a replaced-token loss), so they "
            "compare seeds and budgets of one objective, not objectives with each other.\n\n"
            + table(rows, ["objective", "seeds", "held-out loss", "Welch p", "other held-out metrics"]))
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


def plot_density(positions: list[dict], runs: list[dict], path: Path) -> None:
    measured = {spec: sum(r["supervised_per_sequence"] for r in rs) / len(rs) for spec, rs in by_objective(runs).items()}
    frame = pd.DataFrame([{"objective": row["objective"], "count": "analytic", "positions": row["supervised_positions"]}
                          for row in positions]
                         + [{"objective": spec, "count": "measured", "positions": value}
                            for spec, value in measured.items()])
    figure, axes = plt.subplots(figsize=(7, 4))
    sns.barplot(frame, x="objective", y="positions", hue="count", ax=axes)
    axes.set(ylabel="supervised positions per sequence", title="Signal density")
    save_figure(figure, path)


def save_figure(figure: plt.Figure, path: Path) -> None:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=120)
    plt.close(figure)
    write_atomic(path, buffer.getvalue())


def write_report(out: Path, setup: dict, positions: list[dict], runs: list[dict], budget_flops: float,
                 seq_len: int) -> Path:
    """Write report.md, loss_vs_flops.png, signal_density.png and results.json into `out`; return report.md."""
    results_text, summary = results_section(runs)
    plot_loss(runs, out / "loss_vs_flops.png")
    plot_density(positions, runs, out / "signal_density.png")
    sections = [
        f"# Pretraining objectives at equal compute\n\nBudget: **{budget_flops:.3g} FLOPs** per run; objectives: "
        + ", ".join(f"`{spec}`" for spec in by_objective(runs)) + ".",
        setup_section(setup),
        density_section(positions, runs, seq_len),
        compute_section(runs),
        results_text,
        "## 5. Plots\n\n![held-out loss against FLOPs](loss_vs_flops.png)\n\n![signal density](signal_density.png)",
    ]
    write_json(out / "results.json", {"budget_flops": budget_flops, "setup": setup, "positions": positions,
                                      "summary": summary, "runs": runs})
    report = out / "report.md"
    write_atomic(report, "\n\n".join(sections) + "\n")
    return report
