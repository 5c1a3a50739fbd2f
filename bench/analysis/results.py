"""From finished runs to the numbers a comparison reports: Results (bench.analysis.summaries), written to results.json
and rendered to markdown by bench.report. Statistics are computed here and nowhere else; formatting happens there.

Means are over seeds with the half-width of the 95 % Student-t interval ("ci95", None with one seed); every test is
the verdict's (bench.analysis.verdict: gains over the untrained controls and comparisons, Holm within named families).
"""

from __future__ import annotations

import math
import typing
from collections import defaultdict
from dataclasses import dataclass, field, fields

from backbone import ConfigError
from bench.analysis import findings
from bench.analysis.findings import Stat
from bench.analysis.stats import summarize
from bench.analysis.summaries import (Compute, DownstreamSummary, Floor, ObjectiveSummary, OwnTask, ProbeSummary,
                                      Results, TaskFlops, TaskRow, TaskSummary, Untrained)
from bench.analysis.verdict import verdict
from bench.training.recipe import parse_seq_len
from bench.training.records import ControlRecord, Record, RunRecord, from_json
from bench.yardsticks.probes import QUESTIONS

# results.json's layout (4: a preset's settings as facts too, worded by the report); a folder of another schema is
# refused rather than misread (bench.downstream)
SCHEMA = 4
PROBE_SCORES = ("hidden_state", "replaced_word", "replaced_word_finetuned")
COMPUTE_KEYS = ("flops_per_step", "steps", "tokens", "supervised_positions", "flops", "cooldown_flops", "wall_seconds",
                "tokens_per_second", "supervised_per_sequence")


def runs_of(results: dict, key: str = "runs") -> list[Record]:
    """A results.json's runs (or, with key="controls", its controls) as records, through the one loader."""
    return [from_json(record, f"a {key[:-1]} in results.json") for record in results.get(key) or []]


def by_objective(runs: list[RunRecord]) -> dict[str, list[RunRecord]]:
    grouped: dict[str, list[RunRecord]] = defaultdict(list)
    for run in runs:
        grouped[run.objective].append(run)
    return dict(grouped)


def final_metrics(run: RunRecord) -> dict[str, float]:
    """The objective's own held-out metrics at the budget (the yardsticks are reported on their own)."""
    return {k: v for k, v in run.curve[-1].metrics.items() if v is not None}


def stat(values: list[float]) -> Stat | None:
    """The mean over seeds and its 95 % half-width (None with a single seed); None without any value."""
    if not values:
        return None
    summary = summarize(values)
    return Stat(mean=summary.mean, ci95=None if math.isnan(summary.half_width) else summary.half_width, n=summary.n)


def compute_summary(runs: list[RunRecord]) -> Compute:
    mean = {key: sum(getattr(r, key) for r in runs) / len(runs) for key in COMPUTE_KEYS}
    # where the wall time went: the steps, the FLOP checkpoints (their cool-down branches, held-out loss, curve probes
    # and tasks, checkpointing), and the final probes and tasks on rank 0
    spent = {"train_seconds": [r.train_seconds for r in runs],
             "checkpoint_seconds": [r.wall_seconds - r.train_seconds for r in runs],
             "final_seconds": [(r.probe_seconds or 0) + (r.downstream_seconds or 0) for r in runs]}
    return Compute(**mean, **{key: sum(values) / len(runs) for key, values in spent.items()},
                   flops_per_token=mean["flops"] / mean["tokens"],
                   flops_per_supervised=mean["flops"] / mean["supervised_positions"])


def loss_summary(runs: list[RunRecord], floors: dict[str, float], unigram: dict[str, float]) -> dict:
    """Own held-out loss, the other metrics, and for each metric that has a Bayes floor: the distance to it, and the
    share of the learnable range (unigram loss → floor) closed (ObjectiveSummary's loss, metrics and floors). No
    test between objectives: their own losses measure different tasks."""
    finals = [final_metrics(r) for r in runs]
    column = lambda key, fs=finals: [f[key] for f in fs if key in f]  # noqa: E731
    return {"loss": stat(column("loss")),
            "metrics": {key: stat(column(key)) for key in sorted({k for f in finals for k in f} - {"loss"})
                        if key not in floors},
            "floors": {metric: Floor(floor=floor, unigram=unigram.get(metric), value=stat(column(metric)),
                                     excess=stat([v - floor for v in column(metric)]),
                                     closed=closed_share(column(metric), unigram.get(metric), floor))
                       for metric, floor in floors.items()}}


# An objective has learned its own task when each of its runs closed at least this share of the range from the task's
# trivial answer (the unigram loss; "all original" for ELECTRA's discriminator) to its Bayes floor or reference: on
# every seed, the rule the comparisons, the presets and the tuning's ladder all read (a mean would let one seed that
# learned carry one that did not).
LEARNED_TASK = 0.5
# On text no Bayes reference exists. ELECTRA's discriminator is then read by the diagnostics its released code reports
# in pretraining (google-research/electra's metric_fn: ROC AUC, precision and recall of "replaced"), from chance
# (AUC 0.5, "all original") to what trained discriminators reach: AUC 0.94 at the low end of the 0.94-0.98 they
# report (docs/sources.md). The same LEARNED_TASK share of that range, AUC 0.72, is the rule on every text report.
TRAINED_DISCRIMINATOR_AUC = 0.94
CHANCE_AUC = 0.5


def own_task(runs: list[RunRecord], floors: dict[str, float], unigram: dict[str, float],
             positions: dict | None) -> OwnTask | None:
    """An objective's own task: its discriminator's for ELECTRA (the backbone's task; its generator's loss is a
    helper's), its loss's for the others; on text, where nothing has a Bayes reference, the discriminator's ROC AUC
    against trained discriminators' (TRAINED_DISCRIMINATOR_AUC); None where the task has no reference (text's other
    objectives, MLM's span masking)."""
    finals = [final_metrics(r) for r in runs]
    positions = positions or {}
    if finals and all("discriminator_closed" in f for f in finals):
        metric, where = "discriminator_loss", positions.get("discriminator_positions")
        trivial = sum(f["label_entropy"] for f in finals) / len(finals)  # each run's own labels, own generator
        bayes = sum(f["discriminator_bayes_loss"] for f in finals) / len(finals)
        closed = [f["discriminator_closed"] for f in finals]
    elif finals and all("discriminator_auc" in f for f in finals) and not floors:
        # text (no floor for any loss): the discriminator's ROC AUC between chance and trained discriminators'
        metric, where, trivial, bayes = "discriminator_auc", None, CHANCE_AUC, TRAINED_DISCRIMINATOR_AUC
        closed = [(f["discriminator_auc"] - trivial) / (bayes - trivial) for f in finals]
    elif finals and "loss" in floors and (unigram.get("loss") or -math.inf) > floors["loss"]:
        metric, where = "loss", positions.get("supervised_positions")
        trivial, bayes = unigram["loss"], floors["loss"]
        closed = [(trivial - f["loss"]) / (trivial - bayes) for f in finals]
    else:
        return None
    return OwnTask(metric=metric, trivial=trivial, bayes=bayes, positions=where,
                   learnable_per_sequence=None if where is None else (trivial - bayes) * where, closed=stat(closed),
                   closed_each=closed, learned=min(closed) >= LEARNED_TASK)


def closed_share(values: list[float], start: float | None, floor: float) -> Stat | None:
    """The share of the learnable range, unigram → floor, the values have closed."""
    return None if start is None or start <= floor else stat([(start - v) / (start - floor) for v in values])


def probe_summary(runs: list[Record], ceilings: dict, input_only: dict | None) -> ProbeSummary | None:
    """The probes' accuracies over seeds, beside the Bayes ceilings that apply to these features (what the backbone
    sees: the whole window or the left context) and what the input alone gives the same questions."""
    probes = [r.probes for r in runs if r.probes]
    if not probes:
        return None
    values = lambda key, ps=probes: [p[key]["score"] for p in ps if p.get(key) is not None]  # noqa: E731
    sees = probes[0].get("sees", "smoothing")
    return ProbeSummary(**{key: stat(values(key)) for key in PROBE_SCORES if values(key)}, sees=sees,
                        ceilings={question: ceilings.get(f"{question}_{sees}") for question in QUESTIONS},
                        input_only=(input_only or {}).get(sees),
                        probe_flops=sum(p["probe_flops"] for p in probes) / len(probes))


def downstream_summary(grouped: dict[str, list[Record]], tasks: list[dict] | None) -> DownstreamSummary | None:
    """Per task: what it is and, per objective, the frozen and fine-tuned test scores over seeds, the rates the dev
    split chose and the FLOPs spent (the averages over tasks are the verdict's yardsticks)."""
    runs = [r for rs in grouped.values() for r in rs]
    names = list(dict.fromkeys(name for run in runs for name in (run.downstream or {})))
    if not names:
        return None
    described = {t["task"]: t for t in tasks or []}
    summary = []
    for name in names:
        rows = []
        for spec, spec_runs in grouped.items():
            results = [r.downstream[name] for r in spec_runs if name in (r.downstream or {})]
            if not results:
                continue
            rates = [r["finetuned"]["lr"] for r in results]
            grid = [float(rate) for rate in results[0]["finetuned"]["dev"]]
            rows.append(TaskRow(
                objective=spec, pooling=results[0]["pooling"], frozen=stat([r["frozen"]["score"] for r in results]),
                finetuned=stat([r["finetuned"]["score"] for r in results]),
                native=stat([r["native"]["score"] for r in results if "native" in r]),
                metrics={key: stat([r["finetuned"][key] for r in results]) for key in results[0]["finetuned"]
                         if key not in ("score", "lr", "dev", "hits", "units")},
                rates={f"{rate:g}": rates.count(rate) for rate in sorted(set(rates))},
                rate_at_edge=len(grid) > 1 and any(rate in (min(grid), max(grid)) for rate in rates),
                flops=TaskFlops(**{key: sum(r["flops"][key] for r in results) / len(results)
                                   for key in ("frozen", "finetune")})))
        summary.append(TaskSummary(described.get(name, {"task": name}), rows))
    trained_on = {signal for run in runs for signal in getattr(run, "signals", None) or ()}
    neutral = [name for name in names if not set(described.get(name, {}).get("copies", ())) & trained_on]
    native = {}
    for spec, spec_runs in grouped.items():
        per_seed = [[((r.downstream or {}).get(name) or {}).get("native", {}).get("score") for name in neutral]
                    for r in spec_runs]
        native[spec] = stat([sum(row) / len(row) for row in per_seed if None not in row]) if neutral else None
    return DownstreamSummary(summary, native)


PHASE_COUNTS = ("steps", "tokens", "supervised_positions", "flops")


def schedule_measured(grouped: dict[str, list[RunRecord]], accounting: dict | None) -> dict | None:
    """Under a sequence-length schedule (`accounting`: bench.orchestration.planning.schedule_accounting, per objective
    the predicted phases and the final length throughout at the same FLOPs), the counts per phase measured in each
    objective's runs, as means over seeds."""
    if accounting is None:
        return None
    measured = {}
    for spec, runs in grouped.items():
        phased = [run.phases for run in runs if run.phases]
        if phased and len(phased[0]) != len(accounting["objectives"][spec]["predicted"]):
            # an objective schedule's runs: phases cut at its switches too, seen here per length
            lengths = parse_seq_len(accounting["schedule"])
            phased = [lengths.merged(phases, PHASE_COUNTS) for phases in phased]
        if phased:
            measured[spec] = [{"seq_len": phases[0]["seq_len"], "share": phases[0]["share"],
                               **{key: sum(p[key] for p in phases) / len(phases) for key in PHASE_COUNTS}}
                              for phases in zip(*phased)]
    return measured


def by_control(controls: list[ControlRecord]) -> dict[str, list[ControlRecord]]:
    grouped: dict[str, list[ControlRecord]] = defaultdict(list)
    for control in controls:
        grouped[control.control].append(control)
    return dict(grouped)


@dataclass(frozen=True)
class Measured:
    """What a comparison measured: the one input of build_results. results.json stores each field under its own
    name, so a later step (bench.downstream --run) rebuilds the report from it (Measured.from_results)."""

    # the setup facts (bench.orchestration.pipeline.setup_facts), which the report words (bench.report.setup)
    setup: dict
    positions: list[dict]  # the signal-density table (bench.analysis.density)
    runs: list[RunRecord]  # the finished runs
    budget_flops: float
    seq_len: int  # the length the models are evaluated at (a schedule's last)
    baseline: str | None = None  # the first objective given
    bayes: dict | None = None  # floors, ceilings, unigram losses and input-only controls (bench.orchestration.pipeline)
    diverged: list[dict] = field(default_factory=list)
    tasks: list[dict] | None = None  # the downstream tasks as described (Downstream.describe)
    # a schedule's predicted phases (bench.orchestration.planning.schedule_accounting)
    seq_len_accounting: dict | None = None
    controls: list[ControlRecord] = field(default_factory=list)  # the untrained controls (training.runs.control_run)

    @classmethod
    def from_results(cls, results: Results) -> "Measured":
        """What a comparison's results were built from (bench.downstream --run rebuilds them with a task added)."""
        return cls(**{f.name: getattr(results, f.name) for f in fields(cls)})


def load_results(data: dict) -> Results:
    """A results.json read back, typed (bench.analysis.findings; its runs and controls through the records' one
    loader); a file of another schema is refused, never misread."""
    if data.get("schema") != SCHEMA:
        raise ConfigError(f"results.json of schema {data.get('schema', 1)}, not {SCHEMA}: rerun the comparison")
    hints = typing.get_type_hints(Results)
    try:
        return Results(**{f.name: findings.from_json(hints[f.name], data.get(f.name)) for f in fields(Results)
                          if f.name not in ("runs", "controls")},
                       runs=runs_of(data), controls=runs_of(data, "controls"))
    except (KeyError, TypeError, AttributeError, StopIteration) as error:  # a field missing or of another shape
        raise ConfigError(f"results.json does not hold the results of schema {SCHEMA} it names ({error!r}): rerun "
                          "the comparison") from None


def build_results(measured: Measured) -> Results:
    """Everything the report states. The baseline is the first objective given; when all its runs diverged,
    nothing is tested against it (rather than silently against another one). Each objective's gains are measured
    against its own untrained control."""
    runs, controls, bayes, tasks = measured.runs, measured.controls, measured.bayes, measured.tasks
    budget_flops, positions = measured.budget_flops, measured.positions
    grouped, control_groups = by_objective(runs), by_control(controls)
    baseline = measured.baseline or next(iter(grouped), None)
    floors, ceilings = (bayes or {}).get("floors", {}), (bayes or {}).get("ceilings") or {}
    unigram, input_only = (bayes or {}).get("unigram", {}), (bayes or {}).get("input_only")
    position_rows = {row["objective"]: row for row in positions or []}
    objectives = [ObjectiveSummary(objective=spec, seeds=len(spec_runs), compute=compute_summary(spec_runs),
                                   control=spec_runs[0].control,
                                   **loss_summary(spec_runs, floors.get(spec, {}), unigram.get(spec, {})),
                                   probes=probe_summary(spec_runs, ceilings, input_only),
                                   own_task=own_task(spec_runs, floors.get(spec, {}), unigram.get(spec, {}),
                                                     position_rows.get(spec)))
                  for spec, spec_runs in grouped.items()]
    untrained = [Untrained(control=name, seeds=len(group), read_as=group[0].read_as,
                           probes=probe_summary(group, ceilings, input_only)) for name, group in control_groups.items()]
    has_probes = any(r.probes or r.downstream for r in runs)
    # supervised positions per FLOP, measured over the runs: the density ratio beside the multipliers
    per_flop = {o.objective: o.compute.supervised_positions / o.compute.flops for o in objectives}
    did_not_learn = tuple(o.objective for o in objectives if o.own_task is not None and not o.own_task.learned)
    found, answer = verdict(grouped, baseline, ceilings, positions, per_flop, budget_flops, control_groups,
                            input_only, tasks, did_not_learn) if has_probes and baseline in grouped else (None, None)
    return Results(schema=SCHEMA, budget_flops=budget_flops, seq_len=measured.seq_len, baseline=baseline,
                   seeds=min((len(rs) for rs in grouped.values()), default=0), setup=measured.setup, answer=answer,
                   verdict=found, positions=positions, bayes=bayes, objectives=objectives,
                   untrained=untrained, downstream=downstream_summary({**grouped, **control_groups}, tasks),
                   seq_len_measured=schedule_measured(grouped, measured.seq_len_accounting),
                   diverged=measured.diverged, tasks=tasks, seq_len_accounting=measured.seq_len_accounting,
                   runs=runs, controls=controls)
