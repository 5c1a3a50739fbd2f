"""From finished runs to the numbers a comparison reports: one plain dict, written to results.json as it is and
rendered to markdown by bench.report. Statistics are computed here and nowhere else; formatting happens there.

Means are over seeds with the half-width of the 95 % Student-t interval ("ci95", None with one seed); p-values are
Welch's two-sided test against the baseline (the first objective), None where there is no test.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

from bench.stats import summarize, welch_p_value
from bench.verdict import compute_multiplier, signal_density_ratio, yardstick_verdict

COUNTERS = ("checkpoint", "step", "flops", "tokens", "supervised_positions")
PROBE_KEYS = ("tagging_frozen", "tagging_finetuned", "component", "tagging_chance", "component_chance", "probe_flops",
              "tagging_ceiling")
COMPUTE_KEYS = ("flops_per_step", "steps", "tokens", "supervised_positions", "flops", "wall_seconds",
                "tokens_per_second", "supervised_per_sequence")


def curve_key(task_name: str) -> str:
    """A downstream task's frozen score in a curve row (bench.train writes it at every FLOP checkpoint)."""
    return f"downstream:{task_name}"


def by_objective(runs: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        grouped[run["objective"]].append(run)
    return dict(grouped)


def final_metrics(run: dict) -> dict[str, float]:
    """The objective's own held-out metrics at the budget (probes are reported on their own)."""
    return {k: v for k, v in run["curve"][-1].items()
            if k not in COUNTERS + PROBE_KEYS and not k.startswith(curve_key("")) and v is not None}


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


# The cross-objective yardsticks on the embedded language: (key in results.json, the probe result it reads, divided
# by the objective's own tagging ceiling?, its label in sentences). Raw losses of different objectives are never one.
PROBE_YARDSTICKS = (("tagging_frozen_share", "tagging_frozen", True, "frozen tagging (share of its ceiling)"),
                    ("tagging_finetuned_share", "tagging_finetuned", True, "fine-tuned tagging (share of its ceiling)"),
                    ("component", "component", False, "component classification (frozen)"))


@dataclass(frozen=True)
class Yardstick:
    """A cross-objective measure, higher is better: its value at the budget for a run, and at a curve point (the
    FLOP checkpoints the compute multipliers are read from) when it has a curve."""

    name: str
    label: str
    final: Callable[[dict], float | None]  # run -> value
    point: Callable[[dict], float | None] | None = None  # curve row -> value


def yardstick_value(probes: dict, key: str, share: bool, ceilings: dict) -> float | None:
    value = probes.get(key)
    if value is None or not share:
        return value
    ceiling = ceilings.get(f"{probes.get('tagging_ceiling', 'smoothing')}_accuracy")
    return None if not ceiling else value / ceiling


def task_names(runs: list[dict]) -> list[str]:
    return list(dict.fromkeys(name for run in runs for name in (run.get("downstream") or {})))


def downstream_value(run: dict, task: str, mode: str) -> float | None:
    return ((run.get("downstream") or {}).get(task) or {}).get(mode, {}).get("score")


def average(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else sum(values) / len(values)


def yardsticks(runs: list[dict], ceilings: dict) -> list[Yardstick]:
    """The probes' yardsticks, then per downstream task its frozen and fine-tuned score, and their GLUE-style average
    over tasks when several ran."""
    found = [Yardstick(name, label, lambda run, k=key, s=share: yardstick_value(run.get("probes") or {}, k, s, ceilings),
                       lambda point, k=key, s=share: yardstick_value(point, k, s, ceilings))
             for name, key, share, label in PROBE_YARDSTICKS]
    tasks = task_names(runs)
    for mode, reading in (("finetuned", "fine-tuned"), ("frozen", "frozen probe")):
        point = (lambda row, t=tasks: average([row.get(curve_key(task)) for task in t])) if mode == "frozen" else None
        if len(tasks) > 1:
            found.append(Yardstick(f"downstream_average_{mode}", f"downstream average over {len(tasks)} tasks "
                                   f"({reading})", lambda run, m=mode: average([downstream_value(run, task, m)
                                                                              for task in tasks]), point))
        for task in tasks:
            found.append(Yardstick(f"{task} ({mode})", f"task {task} ({reading})",
                                   lambda run, t=task, m=mode: downstream_value(run, t, m),
                                   (lambda row, t=task: row.get(curve_key(t))) if mode == "frozen" else None))
    return found


def verdict(grouped: dict[str, list[dict]], baseline: str, ceilings: dict, positions: list[dict],
            budget: float) -> dict:
    """Per yardstick: the ranking with CIs and Holm-corrected tests against the baseline, and one sentence; per
    objective against the baseline: the compute multiplier on each yardstick with a curve over FLOPs (how much
    compute the baseline needs to reach the objective's value at the budget), beside the signal-density ratio."""
    density = {row["objective"]: row["supervised_positions"] for row in positions}
    found, multipliers = [], []
    for yardstick in yardsticks([r for runs in grouped.values() for r in runs], ceilings):
        values = {spec: [v for r in runs for v in [yardstick.final(r)] if v is not None]
                  for spec, runs in grouped.items()}
        if not all(values.values()):
            continue
        found.append({**yardstick_verdict(yardstick.name, values, baseline, label=yardstick.label),
                      "label": yardstick.label})
        if yardstick.point is None:
            continue  # no curve over FLOPs (fine-tuning runs only at the budget)
        curves = {spec: [[(p["checkpoint"], v) for p in r["curve"] for v in [yardstick.point(p)] if v is not None]
                         for r in runs] for spec, runs in grouped.items()}
        if not all(curve for curve in curves[baseline]):
            continue
        for spec in (spec for spec in grouped if spec != baseline):
            multipliers.append({"objective": spec, "yardstick": yardstick.name,
                                **compute_multiplier(curves[baseline], values[spec], budget)})
    density_ratios = {spec: signal_density_ratio(density[spec], density[baseline]) for spec in grouped
                      if spec in density and baseline in density}
    return {"baseline": baseline, "yardsticks": found, "multipliers": multipliers,
            "signal_density_ratio": density_ratios}


def downstream_summary(grouped: dict[str, list[dict]], tasks: list[dict] | None) -> dict | None:
    """Per task: what it is and, per objective, the frozen and fine-tuned test scores over seeds, the rates the dev
    split chose and the FLOPs spent; and the average over tasks when several ran."""
    runs = [r for rs in grouped.values() for r in rs]
    names = task_names(runs)
    if not names:
        return None
    described = {t["task"]: t for t in tasks or []}
    summary = {"tasks": [], "average": None}
    for name in names:
        rows = []
        for spec, spec_runs in grouped.items():
            results = [r["downstream"][name] for r in spec_runs if name in (r.get("downstream") or {})]
            if not results:
                continue
            rates = [r["finetuned"]["lr"] for r in results]
            grid = [float(rate) for rate in results[0]["finetuned"]["dev"]]
            rows.append({"objective": spec, "pooling": results[0]["pooling"],
                         "frozen": stat([r["frozen"]["score"] for r in results]),
                         "finetuned": stat([r["finetuned"]["score"] for r in results]),
                         "metrics": {key: stat([r["finetuned"][key] for r in results])
                                     for key in results[0]["finetuned"] if key not in ("score", "lr", "dev")},
                         "rates": {f"{rate:g}": rates.count(rate) for rate in sorted(set(rates))},
                         "rate_at_edge": len(grid) > 1 and any(rate in (min(grid), max(grid)) for rate in rates),
                         "flops": {key: sum(r["flops"][key] for r in results) / len(results)
                                   for key in ("frozen", "finetune")}})
        summary["tasks"].append({**described.get(name, {"task": name}), "rows": rows})
    if len(names) > 1:
        summary["average"] = [{"objective": spec,
                               **{mode: stat([v for r in spec_runs
                                              for v in [average([downstream_value(r, t, mode) for t in names])]
                                              if v is not None]) for mode in ("frozen", "finetuned")}}
                              for spec, spec_runs in grouped.items()]
    return summary


PHASE_COUNTS = ("steps", "tokens", "supervised_positions", "flops")


def schedule_summary(grouped: dict[str, list[dict]], accounting: dict | None) -> dict | None:
    """A sequence-length schedule's accounting (bench.compare.schedule_accounting: per objective the predicted
    phases and the final length throughout at the same FLOPs) with, beside it, the counts per phase measured in the
    runs, as means over seeds."""
    if accounting is None:
        return None
    measured = {}
    for spec, runs in grouped.items():
        phased = [run["phases"] for run in runs if run.get("phases")]
        if phased:
            measured[spec] = [{"seq_len": phases[0]["seq_len"], "share": phases[0]["share"],
                               **{key: sum(p[key] for p in phases) / len(phases) for key in PHASE_COUNTS}}
                              for phases in zip(*phased)]
    return {**accounting, "measured": measured}


def build_results(setup: dict, positions: list[dict], runs: list[dict], budget_flops: float, seq_len: int,
                  bayes: dict | None = None, diverged: list[dict] | None = None, lr_sweep: dict | None = None,
                  baseline: str | None = None, tasks: list[dict] | None = None,
                  seq_len_schedule: dict | None = None) -> dict:
    """Everything the report states, as plain JSON-ready data. The baseline is the first objective given; when all
    its runs diverged, nothing is tested against it (rather than silently against another one). `seq_len` is the
    length the models are evaluated at (a schedule's last); `seq_len_schedule` a schedule's accounting."""
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
    has_probes = any(r.get("probes") or r.get("downstream") for r in runs)
    return {"budget_flops": budget_flops, "seq_len": seq_len, "baseline": baseline,
            "seeds": min((len(rs) for rs in grouped.values()), default=0), "setup": setup,
            "verdict": verdict(grouped, baseline, ceilings, positions, budget_flops) if has_probes and baseline in grouped
            else None,
            "lr_sweep": lr_sweep, "positions": positions, "bayes": bayes, "objectives": objectives,
            "downstream": downstream_summary(grouped, tasks),
            "seq_len_schedule": schedule_summary(grouped, seq_len_schedule),
            "diverged": diverged or [],
            "runs": runs}
