"""From finished runs to the numbers a comparison reports: one plain dict, written to results.json as it is and
rendered to markdown by bench.report. Statistics are computed here and nowhere else; formatting happens there.

Means are over seeds with the half-width of the 95 % Student-t interval ("ci95", None with one seed); p-values are
Welch's two-sided test against the baseline (the first objective), None where there is no test.
"""

from __future__ import annotations

import math
from collections import defaultdict

from bench.stats import summarize, welch_p_value

COUNTERS = ("checkpoint", "step", "flops", "tokens", "supervised_positions")
PROBE_KEYS = ("tagging_frozen", "tagging_finetuned", "component", "tagging_chance", "component_chance", "probe_flops",
              "tagging_ceiling")
COMPUTE_KEYS = ("flops_per_step", "steps", "tokens", "supervised_positions", "flops", "wall_seconds",
                "tokens_per_second", "supervised_per_sequence")


def by_objective(runs: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        grouped[run["objective"]].append(run)
    return dict(grouped)


def final_metrics(run: dict) -> dict[str, float]:
    """The objective's own held-out metrics at the budget (probes are reported on their own)."""
    return {k: v for k, v in run["curve"][-1].items() if k not in COUNTERS + PROBE_KEYS and v is not None}


def stat(values: list[float]) -> dict:
    """{"mean", "ci95", "n"} over seeds; ci95 is None with a single seed."""
    summary = summarize(values)
    return {"mean": summary.mean, "ci95": None if math.isnan(summary.half_width) else summary.half_width,
            "n": summary.n}


def p_value(values: list[float], baseline: list[float]) -> float | None:
    p = welch_p_value(values, baseline)
    return None if math.isnan(p) else p


def compute_summary(runs: list[dict]) -> dict[str, float]:
    mean = {key: sum(r[key] for r in runs) / len(runs) for key in COMPUTE_KEYS}
    return {**mean, "flops_per_token": mean["flops"] / mean["tokens"],
            "flops_per_supervised": mean["flops"] / mean["supervised_positions"]}


def loss_summary(runs: list[dict], baseline_runs: list[dict], floors: dict[str, float]) -> dict:
    """Own held-out loss (with Welch's test against the baseline), the other metrics, and the distance of each
    metric that has a Bayes floor to it."""
    finals = [final_metrics(r) for r in runs]
    column = lambda key, fs=finals: [f[key] for f in fs if key in f]  # noqa: E731
    baseline_losses = column("loss", [final_metrics(r) for r in baseline_runs])
    same = runs is baseline_runs
    summary = {"loss": stat(column("loss")), "welch_p_vs_baseline": None if same else p_value(column("loss"),
                                                                                              baseline_losses),
               "metrics": {key: stat(column(key)) for key in sorted({k for f in finals for k in f} - {"loss"})
                           if key not in floors},
               "floors": {}}
    for metric, floor in floors.items():
        summary["floors"][metric] = {"floor": floor, "value": stat(column(metric)),
                                     "excess": stat([v - floor for v in column(metric)])}
    return summary


def probe_summary(runs: list[dict], baseline_runs: list[dict], ceilings: dict) -> dict | None:
    """The probes' accuracies over seeds, the Bayes ceiling that applies to this objective's features, chance, and
    Welch's test of frozen tagging against the baseline."""
    probes = [r["probes"] for r in runs if r.get("probes")]
    if not probes:
        return None
    values = lambda key, ps=probes: [p[key] for p in ps if p.get(key) is not None]  # noqa: E731
    baseline = [r["probes"]["tagging_frozen"] for r in baseline_runs if r.get("probes")]
    kind = probes[0].get("tagging_ceiling", "smoothing")
    summary = {key: stat(values(key)) for key in ("tagging_frozen", "tagging_finetuned", "component") if values(key)}
    summary.update(tagging_ceiling=kind, tagging_ceiling_value=ceilings.get(f"{kind}_accuracy"),
                   tagging_chance=probes[0]["tagging_chance"], component_chance=probes[0]["component_chance"],
                   probe_flops=sum(values("probe_flops")) / len(probes),
                   tagging_frozen_welch_p_vs_baseline=None if runs is baseline_runs
                   else p_value(values("tagging_frozen"), baseline))
    return summary


def build_results(setup: dict, positions: list[dict], runs: list[dict], budget_flops: float, seq_len: int,
                  bayes: dict | None = None, diverged: list[dict] | None = None) -> dict:
    """Everything the report states, as plain JSON-ready data."""
    grouped = by_objective(runs)
    baseline = next(iter(grouped)) if grouped else None
    floors, ceilings = (bayes or {}).get("floors", {}), (bayes or {}).get("ceilings", {})
    objectives = []
    for spec, spec_runs in grouped.items():
        baseline_runs = grouped[baseline]
        objectives.append({"objective": spec, "seeds": len(spec_runs), "compute": compute_summary(spec_runs),
                           **loss_summary(spec_runs, baseline_runs, floors.get(spec, {})),
                           "probes": probe_summary(spec_runs, baseline_runs, ceilings)})
    return {"budget_flops": budget_flops, "seq_len": seq_len, "baseline": baseline,
            "seeds": min((len(rs) for rs in grouped.values()), default=0), "setup": setup, "positions": positions,
            "bayes": bayes, "objectives": objectives, "diverged": diverged or [], "runs": runs}
