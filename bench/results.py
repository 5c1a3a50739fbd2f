"""From finished runs to the numbers a comparison reports: one plain dict, written to results.json as it is and
rendered to markdown by bench.report. Statistics are computed here and nowhere else; formatting happens there.

Means are over seeds with the half-width of the 95 % Student-t interval ("ci95", None with one seed); p-values are
Welch's two-sided test against the baseline (the first objective), None where there is no test.
"""

from __future__ import annotations

import math
from collections import defaultdict

from bench.stats import summarize, welch_p_value
from bench.verdict import compute_multiplier, signal_density_ratio, yardstick_verdict

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
    """{"mean", "ci95", "n"} over seeds; ci95 is None with a single seed; None without any value."""
    if not values:
        return None
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


def loss_summary(runs: list[dict], floors: dict[str, float], unigram: dict[str, float]) -> dict:
    """Own held-out loss, the other metrics, and for each metric that has a Bayes floor: the distance to it, and the
    share of the learnable range (unigram loss → floor) closed. No test between objectives: their own losses measure
    different tasks."""
    finals = [final_metrics(r) for r in runs]
    column = lambda key, fs=finals: [f[key] for f in fs if key in f]  # noqa: E731
    summary = {"loss": stat(column("loss")),
               "metrics": {key: stat(column(key)) for key in sorted({k for f in finals for k in f} - {"loss"})
                           if key not in floors},
               "floors": {}}
    for metric, floor in floors.items():
        start = unigram.get(metric)
        summary["floors"][metric] = {
            "floor": floor, "unigram": start, "value": stat(column(metric)),
            "excess": stat([v - floor for v in column(metric)]),
            "closed": None if start is None or start <= floor else stat([(start - v) / (start - floor)
                                                                        for v in column(metric)])}
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


# The cross-objective yardsticks: (key in results.json, the probe result it reads, divided by the objective's own
# tagging ceiling?, its label in sentences). Raw losses of different objectives are never one.
YARDSTICKS = (("tagging_frozen_share", "tagging_frozen", True, "frozen tagging (share of its ceiling)"),
              ("tagging_finetuned_share", "tagging_finetuned", True, "fine-tuned tagging (share of its ceiling)"),
              ("component", "component", False, "component classification (frozen)"))


def yardstick_value(probes: dict, key: str, share: bool, ceilings: dict) -> float | None:
    value = probes.get(key)
    if value is None or not share:
        return value
    ceiling = ceilings.get(f"{probes.get('tagging_ceiling', 'smoothing')}_accuracy")
    return None if not ceiling else value / ceiling


def verdict(grouped: dict[str, list[dict]], baseline: str, ceilings: dict, positions: list[dict],
            budget: float) -> dict:
    """Per yardstick: the ranking with CIs and Holm-corrected tests against the baseline, and one sentence; per
    objective against the baseline: the compute multiplier on each yardstick with a curve over FLOPs (how much
    compute the baseline needs to reach the objective's value at the budget), beside the signal-density ratio."""
    density = {row["objective"]: row["supervised_positions"] for row in positions}
    yardsticks, multipliers = [], []
    for name, key, share, label in YARDSTICKS:
        values = {spec: [v for r in runs if r.get("probes")
                         for v in [yardstick_value(r["probes"], key, share, ceilings)] if v is not None]
                  for spec, runs in grouped.items()}
        if not all(values.values()):
            continue
        yardsticks.append({**yardstick_verdict(name, values, baseline, label=label), "label": label})
        curves = {spec: [[(p["checkpoint"], yardstick_value(p, key, share, ceilings)) for p in r["curve"]
                          if p.get(key) is not None] for r in runs] for spec, runs in grouped.items()}
        if not all(curve for curve in curves[baseline]):
            continue  # no curve over FLOPs (fine-tuning runs only at the budget)
        for spec in (spec for spec in grouped if spec != baseline):
            multipliers.append({"objective": spec, "yardstick": name, **compute_multiplier(curves[baseline],
                                                                                        values[spec], budget)})
    density_ratios = {spec: signal_density_ratio(density[spec], density[baseline]) for spec in grouped
                      if spec in density and baseline in density}
    return {"baseline": baseline, "yardsticks": yardsticks, "multipliers": multipliers,
            "signal_density_ratio": density_ratios}


def build_results(setup: dict, positions: list[dict], runs: list[dict], budget_flops: float, seq_len: int,
                  bayes: dict | None = None, diverged: list[dict] | None = None, lr_sweep: dict | None = None,
                  baseline: str | None = None) -> dict:
    """Everything the report states, as plain JSON-ready data. The baseline is the first objective given; when all
    its runs diverged, nothing is tested against it (rather than silently against another one)."""
    grouped = by_objective(runs)
    baseline = baseline or next(iter(grouped), None)
    floors, ceilings = (bayes or {}).get("floors", {}), (bayes or {}).get("ceilings", {})
    unigram = (bayes or {}).get("unigram", {})
    objectives = []
    for spec, spec_runs in grouped.items():
        baseline_runs = grouped.get(baseline, [])
        objectives.append({"objective": spec, "seeds": len(spec_runs), "compute": compute_summary(spec_runs),
                           **loss_summary(spec_runs, floors.get(spec, {}), unigram.get(spec, {})),
                           "probes": probe_summary(spec_runs, baseline_runs, ceilings)})
    has_probes = any(r.get("probes") for r in runs)
    return {"budget_flops": budget_flops, "seq_len": seq_len, "baseline": baseline,
            "seeds": min((len(rs) for rs in grouped.values()), default=0), "setup": setup,
            "verdict": verdict(grouped, baseline, ceilings, positions, budget_flops) if has_probes and baseline in grouped
            else None,
            "lr_sweep": lr_sweep, "positions": positions, "bayes": bayes, "objectives": objectives,
            "diverged": diverged or [],
            "runs": runs}
