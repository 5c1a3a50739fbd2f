"""A comparison from its typed configuration to its report, top to bottom: plan → runs and untrained controls →
results → report. A preset's variants and a budget sweep expand into a list of comparisons
(jobs), each a folder and a configuration, run by one loop; their summary (the paper section, the frontier) is
written on top.
"""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

import torch
from lightning_fabric import Fabric

from backbone import ConfigError
from bench.analysis.budgets import budget_folder, frontier_results
from bench.analysis.density import position_row
from bench.analysis.paper_findings import Paper
from bench.analysis.presets import Preset, get_preset, paper_section
from bench.analysis.results import Measured, build_results
from bench.analysis.summaries import Results, Sweep
from bench.common.environment import code_revision, package_versions
from bench.common.files import write_atomic, write_json
from bench.common.tuned import provenance
from bench.data.corpus import Corpus
from bench.orchestration.config import Config
from bench.orchestration.jobs import SMALL_STEP_TOKENS, executed
from bench.orchestration.planning import Plan, make_plan, output_folder
from bench.orchestration.works import Outcome
from bench.training.batches import eval_batches
from bench.training.distributed import agree_on_folder, launch_processes, make_fabric
from bench.training.recipe import RunConfig, run_name
from bench.training.records import RunRecord
from bench.training.state import Work
from bench.yardsticks.bayes import loss_floors, unigram_losses
from bench.yardsticks.downstream import describe_recipe
from bench.yardsticks.probes import input_only_controls, probe_ceilings
from objectives import Objective


@dataclass(frozen=True)
class Job:
    """One comparison of a command: its name among its siblings ("" alone) and its configuration."""

    name: str
    config: Config


@dataclass
class Measurement:
    """What one comparison measured, on rank 0 (results None elsewhere)."""

    results: Results | None
    diverged: list[dict]
    plan: Plan
    fabric: Fabric


class Reports(Protocol):
    """The report stage, called by name (bench.report): the pipeline hands it facts and findings, it words them."""

    def write_report(self, out: Path, results: Results) -> Path: ...

    def write_frontier_report(self, out: Path, frontier: Sweep) -> Path: ...

    def write_preset_report(self, out: Path, paper: Paper) -> Path: ...


def run(config: Config, reports: Reports) -> list[dict]:
    """Every comparison the configuration asks for, each report written by `reports` (bench.report); returns the
    diverged runs. Each comparison: its plan (prepared), its runs and untrained controls as one queue of works
    (bench.orchestration.jobs.executed), its results (measurement); a sweep's or a preset's summary over them comes
    last."""
    preset = get_preset(config.output.preset) if config.output.preset else None
    comparisons, started = expand(config, preset), time.perf_counter()
    measured = {}
    for comparison in comparisons:
        if len(comparisons) > 1:
            print(f"comparison {comparison.name} in {comparison.config.output.out}", file=sys.stderr)
        fabric, plan, before = prepared(comparison.config)
        # one queue: a control needs nothing a run makes, so a worker freed while the last runs train starts a
        # control (the default's 15 runs on 2 cores left a core idle for the last run's 49 s when controls waited)
        works = run_works(plan) + control_works(plan)
        outcomes = executed(fabric, works, plan)
        measured[comparison.name] = found = measurement(fabric, plan, before, works, outcomes)
        if len(comparisons) > 1 and found.results is not None:
            print(f"report: {reports.write_report(plan.out, found.results)}")
    diverged = [record for found in measured.values() for record in found.diverged]
    if all(found.results is not None for found in measured.values()):  # rank 0
        summarise(config, preset, measured, time.perf_counter() - started, reports)
    # every process leaves together, once rank 0's reports are written: one that exits while a peer still holds the
    # process group can abort in gloo's teardown ("terminate called without an active exception")
    measured[comparisons[-1].name].fabric.barrier()
    return diverged


def expand(config: Config, preset: Preset | None) -> list[Job]:
    """The comparisons a configuration asks for: one; one per budget of a sweep (--out/budget-B); one per variant of
    a preset (--out/VARIANT)."""
    if config.training.budgets:
        out = output_folder(config.output.out)
        return [Job(budget_folder(budget),
                    config.with_flags(budget=budget, budgets=(), out=out / budget_folder(budget)))
                for budget in config.training.budgets]
    if preset is not None and preset.variants:
        out = output_folder(config.output.out)
        return [Job(variant.name, config.with_flags(**variant.flags, out=out / variant.name))
                for variant in preset.variants]
    return [Job("", config)]


def summarise(config: Config, preset: Preset | None, measured: dict[str, Measurement], seconds: float,
              reports: Reports) -> None:
    """A single comparison's report (with its preset's paper section); a sweep's frontier; a preset's own report
    over its variants."""
    found = {name: measurement.results for name, measurement in measured.items()}
    if list(found) == [""]:
        results = found[""]
        if preset is not None:
            results = replace(results, paper=paper_section(preset, {"": results}, seconds))
        print(f"report: {reports.write_report(measured[''].plan.out, results)}")
        return
    out = output_folder(config.output.out)
    if config.training.budgets:
        by_budget = {results.budget_flops: results for results in found.values()}
        frontier = frontier_results(by_budget, next(iter(found.values())).baseline, sweep_facts(by_budget, seconds))
        if preset is not None:  # a preset's judge reads every budget's comparison, and the frontier
            frontier = replace(frontier, paper=paper_section(preset, found, seconds, frontier))
        print(f"report: {reports.write_frontier_report(out, frontier)}")
    elif preset is not None:
        print(f"report: {reports.write_preset_report(out, paper_section(preset, found, seconds))}")


def sweep_facts(by_budget: dict[float, Results], seconds: float) -> dict:
    """What a sweep's setup table says (bench.report.frontier), as facts: the largest budget's setup, every budget,
    and the time its runs took (summed over runs and sessions) beside this session's wall time."""
    largest = by_budget[max(by_budget)]
    run_seconds = sum((run.wall_seconds or 0) + (run.probe_seconds or 0) + (run.downstream_seconds or 0)
                      for results in by_budget.values() for run in results.runs)
    return {"largest": largest.setup, "bayes": largest.bayes, "budgets": sorted(by_budget),
            "run_seconds": run_seconds, "seconds": seconds}


def prepared(config: Config) -> tuple[Fabric, Plan, dict]:
    """A comparison's Fabric and plan, its folder agreed by every process and its settings written; and what is
    known before any run (the signal-density rows, the Bayes references)."""
    hardware = config.hardware
    fabric = make_fabric(hardware.accelerator, hardware.devices, hardware.num_nodes, hardware.strategy,
                         hardware.precision, launch=False)
    plan = make_plan(config, fabric)
    warn_small_steps(fabric, plan.train.batch_size, min(plan.schedule.lengths))
    # rows are named by the spec as the user wrote it, like the runs; at the length the models are evaluated at
    positions = [{**position_row(objective, plan.schedule.final), "objective": spec}
                 for spec, objective in zip(plan.specs, plan.objectives)]
    bayes = bayes_references(plan)
    launch_processes(fabric)
    plan = replace(plan, out=agree_on_folder(fabric, plan.out))
    write_settings(fabric, plan)
    return fabric, plan, {"positions": positions, "bayes": bayes}


def measurement(fabric: Fabric, plan: Plan, before: dict, works: list[Work], outcomes: list[Outcome]) -> Measurement:
    """What one comparison measured: its finished runs, the diverged ones and the controls, in objective-then-seed
    order, and (on rank 0) its results (its report is the caller's)."""
    runs, diverged, controls = [], [], []
    for work, (result, record) in zip(works, outcomes):
        if work.kind == "control":
            controls.append(result)
        elif record is not None:
            diverged.append(record)
        else:
            runs.append(result)
    if not fabric.is_global_zero:
        return Measurement(None, diverged, plan, fabric)
    config, bayes = plan.config, before["bayes"]
    measured = Measured(setup_facts(plan, runs, fabric), before["positions"], runs,
                        config.training.budget, plan.schedule.final, plan.specs[0], bayes, diverged,
                        plan.downstream.describe() if plan.downstream else None, plan.accounting, controls)
    return Measurement(build_results(measured), diverged, plan, fabric)


def write_settings(fabric: Fabric, plan: Plan) -> None:
    if not fabric.is_global_zero:
        return
    try:
        write_json(plan.out / "config.json", plan.settings)
        if plan.corpus.text_tokenizer is not None:  # bench.downstream --run tokenizes new tasks with it
            write_atomic(plan.out / "tokenizer.json", plan.corpus.text_tokenizer.to_str())
    except OSError as error:
        raise ConfigError(f"cannot write to --out {plan.out}: {error.strerror}") from None


def control_works(plan: Plan) -> list[Work]:
    """Every seed's untrained controls (bench.training.runs.control_run) as works; none when no yardstick runs."""
    if not plan.yardsticks:
        return []
    return [Work(spec, seed, plan.train, plan.out / "runs" / run_name(name, seed), "control", plan.config.output.resume)
            for name, spec in plan.control_specs().items() for seed in range(plan.config.training.seeds)]


def run_works(plan: Plan) -> list[Work]:
    """The runs as works: one per objective and seed."""
    config, works = plan.config, []
    seeds, reuse = range(config.training.seeds), config.output.resume
    for spec in plan.specs:
        train, dirs = replace(plan.train, lr=plan.learning_rates[spec]), [plan.out / "runs" / run_name(spec, seed)
                                                                             for seed in seeds]
        works += [Work(spec, seed, train, run_dir, reuse=reuse) for seed, run_dir in zip(seeds, dirs)]
    return works


def bayes_references(plan: Plan) -> dict | None:
    """On the embedded language the true distribution is known: the Bayes floor of every objective's held-out
    metrics on exactly its evaluation batches, and the probes' ceilings on their test windows."""
    corpus, probe = plan.corpus, plan.probe
    if corpus.language is None:
        return None
    references = {spec: loss_references(objective, corpus, plan.train)
                  for spec, objective in zip(plan.specs, plan.objectives)}
    return {"floors": {spec: floors for spec, (floors, _) in references.items()},
            "unigram": {spec: unigram for spec, (_, unigram) in references.items()},
            "ceilings": probe_ceilings(corpus, probe) if probe else None,
            "input_only": input_only_controls(corpus, probe) if probe else None}


def loss_references(objective: Objective, corpus: Corpus, train: RunConfig) -> tuple[dict, dict]:
    """(Bayes floors, unigram losses) of an objective's held-out metrics, on exactly its evaluation batches."""
    batches = eval_batches(objective, corpus, train)
    return loss_floors(objective, batches, corpus), unigram_losses(objective, batches, corpus)


def setup_facts(plan: Plan, runs: list[RunRecord], fabric: Fabric) -> dict:
    """What the report's setup table says (bench.report.setup.setup_table words it), as facts."""
    config, corpus, train = plan.config, plan.corpus, plan.train
    summary, vocab = corpus.summary(), corpus.vocab
    return {
        "command": list(config.command), "objectives": plan.specs, "seeds": config.training.seeds,
        "budget": config.training.budget, "model": config.model.model,
        "shape": plan.settings["derived"]["model_shape"],
        "runs": {"tokens": sum(r.tokens for r in runs) / len(runs),
                 "backbone_parameters": runs[0].backbone_parameters} if runs else None,
        "sequence_length": plan.schedule.final if plan.schedule.is_fixed else plan.schedule.describe(),
        "batch_size": config.training.batch_size, "flops": train.flops, "rates": plan.learning_rates,
        "rate_source": provenance(config.training.lr, Config().training.lr, {
            "budget": config.training.budget, "seq_len": config.model.seq_len, "model": config.model.model,
            "batch_size": config.training.batch_size, "data": config.data.data}, plan.specs),
        "corpus": {"name": corpus.name, "description": corpus.description, "train_tokens": summary["train_tokens"],
                   "train_windows": len(corpus.train), "heldout_windows": len(corpus.heldout),
                   "evaluated": min(train.eval_windows, len(corpus.heldout)), "tokenizer": corpus.tokenizer,
                   "vocab_size": vocab.size, "ordinary": vocab.num_ordinary, "special": vocab.first_ordinary,
                   "sentinels": vocab.num_sentinels},
        "device": device_name(fabric.device, runs), "world_size": fabric.world_size,
        "precision": config.hardware.precision,
        "versions": package_versions(), "versions_note": plan.versions_note, "log_every": train.log_every,
        "revision": code_revision(), "stale": list(plan.stale),
        "written": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "downstream": describe_recipe(plan.downstream, runs) if plan.downstream else None,
        "probe": vars(plan.probe) if plan.probe else None,
        "controls": plan.control_specs() if plan.yardsticks else None}


def device_name(device: torch.device, runs: list[RunRecord]) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    # the runs' own thread counts (--jobs pins each run to its share of the cores), not this process's
    threads = sorted({run.threads for run in runs}) or [torch.get_num_threads()]
    return (f"{device.type} ({cpu_model()}, {torch.backends.cpu.get_cpu_capability()}, "
            f"{'/'.join(map(str, threads))} thread{'s' if threads != [1] else ''} per run)")


def cpu_model() -> str:
    """The processor, which a CPU comparison's last digits depend on as much as on the package versions: the
    vector instructions it has (torch's capability beside it) choose the kernels, and with them the order in which
    sums are rounded. The default comparison, rerun in a later session (a fresh machine) with the same code and
    versions, kept every verdict and moved from the fifth digit of its first evaluation on; two runs on one machine
    agreed to the last bit."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.processor() or platform.machine()


def warn_small_steps(fabric: Fabric, batch_size: int, seq_len: int) -> None:
    """A GPU fed a few thousand tokens per step waits on the host and the launch overheads most of the time."""
    tokens = batch_size // fabric.world_size * seq_len
    if fabric.device.type == "cuda" and tokens < SMALL_STEP_TOKENS:
        print(f"warning: each process's step holds {tokens:,} tokens (--batch-size {batch_size} over "
              f"{fabric.world_size} process(es) × --seq-len {seq_len}); below about {SMALL_STEP_TOKENS:,} a GPU "
              "mostly waits: raise --batch-size (with --micro-batch if memory is short)", file=sys.stderr)
