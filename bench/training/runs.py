"""A run from start to result.json (train_run), and the untrained control beside it (control_run): each reused from
its folder where it finished before (--resume), a divergence recorded there.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch
from lightning_fabric import Fabric

from bench.common.environment import code_revision
from bench.common.files import read_json, write_json
from bench.common.stopping import PhaseStopped, stop_on_signals
from bench.data.corpus import Corpus
from bench.training.batches import build_run_objective
from bench.training.distributed import stop_agreed, stop_message
from bench.training.loop import TrainingDiverged, fit
from bench.training.recipe import configure_matmuls, run_name
from bench.training.records import RUN_SCHEMA, ControlRecord, Record, RunRecord, read_curve, read_record
from bench.training.state import Context, Run, Work, Yardstick, mark_session, restore, setup_run
from objectives import Objective


def run_result(fabric: Fabric, run: Run, corpus: Corpus) -> RunRecord:
    """The finished run's record: counters (in total and per phase of the sequence-length schedule), throughput,
    sizes, the analytic counts and the curve. Per-sequence numbers are at the final length, the one the signal-density
    table and the evaluation are at: measured over the last phase's sequences (over all, should it have run none)."""
    counters, objective, batch_size = run.counters, run.objective, run.config.batch_size
    measured_positions, measured_steps = counters.per_sequence_basis()
    return RunRecord(
        schema=RUN_SCHEMA, objective=run.spec, seed=run.seed, attention=objective.attention, lr=run.config.lr,
        control=control_name(objective), signals=sorted(objective.signals), sees=objective.tagging_ceiling,
        # a run resumed by other code (--allow-stale) names each revision in turn
        revision=" → ".join(counters.revisions),
        threads=torch.get_num_threads(),  # sums split by thread: a run's numbers hold at this count
        steps=counters.step, flops=counters.flops, tokens=counters.tokens,
        supervised_positions=counters.supervised_positions, phases=[phase.to_json() for phase in counters.phases],
        cooldown_steps=counters.cooldown_steps, cooldown_flops=counters.cooldown_flops,
        supervised_per_sequence=measured_positions / (measured_steps * batch_size),
        flops_per_step=counters.flops / counters.step,
        wall_seconds=counters.wall_seconds, train_seconds=counters.train_seconds,
        tokens_per_second=counters.tokens / counters.train_seconds,
        parameters=sum(p.numel() for p in objective.parameters()),
        backbone_parameters=objective.backbone.num_parameters(),
        expected_supervised_per_sequence=objective.expected_supervised_positions(run.schedule.final),
        expected_flops_per_sequence=objective.expected_flops_per_sequence(run.schedule.final),
        curve=read_curve(run.curve_path),  # complete on every rank: the last checkpoint ended in a barrier
    )


def read_at_end(record: Record, yardsticks: Sequence[Yardstick], objective: Objective, progress: bool,
                desc: str, timed: bool = True) -> Record:
    """The record with each yardstick's final scores (and, with `timed`, the seconds they took) added."""
    reader = record.control if isinstance(record, ControlRecord) else record.objective
    for yardstick in yardsticks:
        tick = time.perf_counter()
        record = replace(record, **{yardstick.result_key: yardstick.at_end(objective, progress, desc, reader)})
        if timed:
            record = replace(record, **{yardstick.seconds_key: time.perf_counter() - tick})
    return record


def train_run(fabric: Fabric, work: Work, context: Context, progress: bool = False,
              stop_after_steps: int | None = None) -> RunRecord | None:
    """Train the work's spec with its seed to the budget, writing curve.jsonl, checkpoint.pt and finally
    result.json into its run_dir. Resumes from run_dir's checkpoint when there is one; with `work.reuse` (--resume),
    a run that finished before is read back instead (rank 0 reads, so every process takes the same branch). Each
    yardstick reads the final backbone (and, with config.probe_every_eval, the frozen backbone at every checkpoint).
    Returns the result, or None when stopped early by `stop_after_steps`. Raises TrainingDiverged when the loss stops
    being finite, after recording it in run_dir/diverged.json (a resumed comparison raises it again from there
    rather than train the run again); RunStopped after a stop signal: at the end of its step, or between two batches
    of an evaluation, or between two fits or steps of the final probes and tasks, whose unfinished work is dropped
    (the state is saved, so --resume evaluates and reads it again)."""
    run_dir, name = work.run_dir, run_name(work.spec, work.seed)
    diverged_path = run_dir / "diverged.json"
    diverged = finished = None
    if work.reuse:  # every process was asked alike, so all of them take part in the broadcast or none does
        diverged, finished = fabric.broadcast((read_json(diverged_path) if diverged_path.exists() else None,
                                               finished_result(run_dir)), src=0)
    if diverged is not None:
        raise TrainingDiverged.recorded(diverged)
    if finished is not None:
        return finished
    with stop_on_signals() as request:  # the command's, when it installed one
        run = setup_run(fabric, work, context, progress)
        restore(fabric, run)
        mark_session(fabric, run)
        try:
            if not fit(fabric, run, stop_after_steps):
                return None
        except TrainingDiverged as error:
            print(f"warning: {error}", file=sys.stderr)
            if fabric.is_global_zero:
                write_json(diverged_path, error.record)
            raise
        result = run_result(fabric, run, context.corpus)
        # The yardsticks read one copy of the final weights, so rank 0 alone runs them (every rank holds the same
        # weights; the others would only repeat its work) and the others wait at the barrier below.
        try:
            with fabric.autocast():  # on the device, under the run's precision, as at every checkpoint
                result = read_at_end(result, context.yardsticks if fabric.is_global_zero else (), run.objective,
                                     progress, name)
        except PhaseStopped:  # their unfinished scores are dropped; the other processes learn of the stop below
            result = None
        if fabric.is_global_zero and result is not None:
            write_json(run_dir / "result.json", result.to_json())
        fabric.barrier()
        if stop_agreed(fabric, request):
            where = f"after {name} finished (its result.json is written)" if result is not None else (
                f"during the final probes and tasks of {name} (its training is saved; --resume reads them again)")
            raise stop_message(fabric, where, request.signal_name)
        return result


def control_name(objective: Objective) -> str:
    """The untrained control an objective's runs are set beside: its backbone at initialisation, read as the
    objective reads it (causal or over the whole window; BERT's segment embeddings change the backbone itself)."""
    causal = objective.probe_attention(objective.backbone.config.max_seq_len)["attention"] == "causal"
    segments = " with segment embeddings" if objective.backbone.segment_embedding is not None else ""
    return f"untrained, {'causal' if causal else 'bidirectional'}{segments}"


def control_run(fabric: Fabric, work: Work, context: Context, progress: bool = False) -> ControlRecord | None:
    """The untrained control of the work's seed: the very backbone a run of its spec starts from (the same
    seeding and construction as setup_run), through the yardsticks at 0 FLOPs, never trained. Writes
    run_dir/result.json on rank 0 and returns it there (None elsewhere); with `work.reuse`, one read before is returned
    on every rank. Its evaluation FLOPs are reported, never charged: it spends no training compute. Raises RunStopped
    after a stop signal, between two fits or steps of its yardsticks (nothing of it is written: --resume reads it
    again) or once its result.json is written."""
    run_dir = work.run_dir
    finished = fabric.broadcast(finished_result(run_dir), src=0) if work.reuse else None
    if finished is not None:
        return finished
    with stop_on_signals() as request:  # the command's, when it installed one
        result = read_control(fabric, work, context, progress) if fabric.is_global_zero else None
        fabric.barrier()
        if stop_agreed(fabric, request):
            where = f"after {run_dir.name} (its result.json is written)" if result is not None else (
                f"while {run_dir.name} was read (nothing of it is written; --resume reads it again)")
            raise stop_message(fabric, where, request.signal_name)
    return result


def read_control(fabric: Fabric, work: Work, context: Context, progress: bool) -> ControlRecord | None:
    """The untrained backbone through the yardsticks, its result.json written; None where a stop signal came
    first."""
    tick = time.perf_counter()
    configure_matmuls(fabric.device, work.config.tf32)
    with torch.random.fork_rng(devices=[]):
        fabric.seed_everything(work.seed, verbose=False)
        objective = build_run_objective(work.spec, work.config, context.corpus).to(fabric.device)
    result = ControlRecord(schema=RUN_SCHEMA, control=control_name(objective), read_as=work.spec,
                           seed=work.seed, attention=objective.attention, flops=0,
                           sees=objective.tagging_ceiling, revision=code_revision(), threads=torch.get_num_threads())
    try:
        with fabric.autocast():  # read as the runs are read
            result = read_at_end(result, context.yardsticks, objective, progress, work.name,
                                 timed=False)
    except PhaseStopped:
        return None
    result = replace(result, wall_seconds=time.perf_counter() - tick)
    write_json(work.run_dir / "result.json", result.to_json())
    return result


def finished_result(run_dir: Path) -> Record | None:
    """run_dir's result.json, read as this version writes it; one of another layout is refused, never misread."""
    return read_record(run_dir / "result.json")
