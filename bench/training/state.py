"""A run's state: what a run is asked to be (a Work, beside the Context every work of a comparison shares), what
setup_run builds from them (model, optimizer, counters, schedule), how a checkpoint restores it exactly, and how it is
saved (atomically).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

import torch
from lightning_fabric import Fabric
from lightning_fabric.strategies import DDPStrategy
from torch import Tensor

from backbone import ConfigError, Transformer
from bench.common.environment import code_revision
from bench.common.files import dumps, read_jsonl, write_atomic
from bench.data.corpus import Corpus
from bench.data.synthetic import Language
from bench.training.batches import build_run_objective, run_schedule
from bench.training.recipe import (Phase, RunConfig, SeqLenSchedule, check_config, configure_matmuls, make_optimizer,
                                   match_optimizer_to_device)
from bench.training.records import Counters, PhaseCounters
from objectives import Objective


class Yardstick(Protocol):
    """What a run is read with besides its own loss: the probes (bench.yardsticks.probes.Probes) and the downstream
    tasks (bench.yardsticks.downstream.Downstream), called by name, so the loop imports none of their insides."""

    result_key: str  # where its final scores go: a field of the run's record ("probes", "downstream")
    seconds_key: str  # and the seconds they took ("probe_seconds", "downstream_seconds")

    def at_checkpoint(self, objective: Objective) -> dict | None:
        """Frozen scores at a FLOP checkpoint, for the row of curve.jsonl; None for a yardstick without a curve."""

    def at_end(self, objective: Objective, progress: bool, desc: str, reader: str | None = None) -> dict:
        """A final (or untrained) backbone's scores; `reader`: the objective's spec, or the untrained control's
        name (a yardstick may read each with its own tuned settings)."""


@dataclass(frozen=True)
class Work:
    """One run, or the untrained control beside it ("control"), as a comparison asks for it: the objective's spec,
    the seed, the settings, and the folder it writes. Small, so that it travels to a worker process or a Slurm job
    on its own; what every work of a comparison shares is its Context."""

    spec: str
    seed: int
    config: RunConfig
    run_dir: Path
    kind: str = "run"  # or "control"
    reuse: bool = False  # --resume: a work whose folder holds its result (or its divergence) is read back

    @property
    def name(self) -> str:
        return self.run_dir.name

    def finished(self) -> bool:
        """Whether --resume would only read this work back (its folder holds its result or divergence)."""
        return self.reuse and ((self.run_dir / "result.json").exists() or (self.run_dir / "diverged.json").exists())


@dataclass(frozen=True)
class Context:
    """What every work of a comparison reads besides its own (the corpus, and what reads a backbone besides its own
    loss), and how a worker process sets itself up: sent to each process once, not with every work."""

    corpus: Corpus
    yardsticks: Sequence[Yardstick] = ()
    accelerator: str = "cpu"
    precision: str = "32-true"
    threads: int | None = None  # torch threads per run on a CPU (None: torch's default)

    @property
    def language(self) -> Language | None:
        """The embedded language, whose exact inference gives the held-out references (None for a text corpus)."""
        return self.corpus.language


@dataclass
class Run:
    """One training run's moving parts: what setup_run builds from its work and the loop updates."""

    work: Work
    context: Context
    progress: bool  # a progress bar (rank 0's)
    objective: Objective
    module: torch.nn.Module  # the objective as Fabric wrapped it
    optimizer: torch.optim.Optimizer
    counters: Counters
    schedule: SeqLenSchedule
    grad_norm: Tensor | None = None  # of the last step, on the device: read only when it is logged

    @property
    def spec(self) -> str:
        return self.work.spec

    @property
    def seed(self) -> int:
        return self.work.seed

    @property
    def config(self) -> RunConfig:
        return self.work.config

    @property
    def run_dir(self) -> Path:
        return self.work.run_dir

    @property
    def curve_path(self) -> Path:
        return self.run_dir / "curve.jsonl"

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoint.pt"

    def state(self, fabric: Fabric) -> dict:
        # the precision plugin holds the loss scaler under 16-mixed, whose state must resume too
        return {"model": self.module, "optimizer": self.optimizer, "counters": self.counters.to_state(),
                "precision": fabric.strategy.precision.state_dict()}


def fresh_compile_caches(blocks: int) -> None:
    """Before a compiled run: every block shares one forward's code, and dynamo keeps a few compiled entries per
    code (8 by default) across everything the process compiled, so a comparison's later runs, or one run's many
    blocks (each a guard on its own module), silently ran uncompiled past the limit. Each run starts from empty
    caches, with room for each of its blocks in training and evaluation, with and without gradients."""
    import torch._dynamo

    torch._dynamo.reset()
    config, name = torch._dynamo.config, "recompile_limit"
    if not hasattr(config, name):  # its name before torch 2.6
        name = "cache_size_limit"
    setattr(config, name, max(getattr(config, name), 4 * blocks))


def setup_run(fabric: Fabric, work: Work, context: Context, progress: bool = False) -> Run:
    """Seed, build the objective, compile it if asked, and hand it to Fabric with its optimizer."""
    config, corpus = work.config, context.corpus
    check_config(config, fabric.world_size)
    configure_matmuls(fabric.device, config.tf32)
    fabric.seed_everything(work.seed, verbose=False)
    objective = build_run_objective(work.spec, config, corpus)
    stacks = [m for m in objective.modules() if isinstance(m, Transformer)]
    if config.compile:
        fresh_compile_caches(sum(len(stack.blocks) for stack in stacks))
    for stack in stacks:
        stack.activation_checkpointing = config.activation_checkpointing
        if config.compile:  # in place: parameter names, checkpoints and copies (the probes') stay as they are
            for block in stack.blocks:  # per block: DDP's gradient all-reduce can start as each block's backward ends
                block.compile()
    if isinstance(fabric.strategy, DDPStrategy) and objective.pieces_with_own_parameters():
        # a schedule's piece with a head of its own (MLM's transform, ELECTRA's generator) gets no gradient in the
        # other pieces' shares: DDP must look for unused parameters (AdamW leaves them as a single process does)
        fabric.strategy._ddp_kwargs["find_unused_parameters"] = True
    module, optimizer = fabric.setup(objective, make_optimizer(objective, config, fabric.device))
    schedule = run_schedule(config, corpus).split_at(objective.starts)  # a phase per length and objective piece
    counters = Counters([PhaseCounters(phase.seq_len, phase.share, piece_spec(objective, phase))
                         for phase in schedule.phases])
    return Run(work, context, progress, objective, module, optimizer, counters, schedule)


def piece_spec(objective: Objective, phase: Phase) -> str | None:
    """The objective a phase trains, under an objective schedule; None (not recorded) for every other objective."""
    return objective.piece(phase.piece).spec() if len(objective.starts) > 1 else None


def restore(fabric: Fabric, run: Run) -> None:
    """Continue from the run folder's checkpoint when there is one; evaluations appended after it are redone."""
    if not fabric.broadcast(run.checkpoint_path.exists(), src=0):  # rank 0 decides; agree_on_folder checked it
        if fabric.is_global_zero:
            run.curve_path.unlink(missing_ok=True)
        return
    state = run.state(fabric)
    fabric.load(run.checkpoint_path, state, weights_only=True)
    match_optimizer_to_device(run.optimizer, fabric.device)
    # Fabric replaces plain entries of `state` rather than updating them
    run.counters = Counters.from_state(state["counters"], run.checkpoint_path)
    schedule = run.schedule
    saved = [(phase.seq_len, phase.share, phase.objective) for phase in run.counters.phases]
    if saved != [(phase.seq_len, phase.share, piece_spec(run.objective, phase)) for phase in schedule.phases]:
        lengths = run.config.seq_len_schedule.text if run.config.seq_len_schedule else schedule.longest
        raise ConfigError(f"{run.checkpoint_path} was trained with another --seq-len than {lengths} or another "
                          "objective schedule; resume it with the ones it started with")
    fabric.strategy.precision.load_state_dict(state["precision"])
    if fabric.is_global_zero:
        # the rows of the checkpoints the saved state had evaluated (a branch's row is of a step past the state's)
        kept = read_jsonl(run.curve_path)[:run.counters.next_eval] if run.curve_path.exists() else []
        # in one replace: the checkpoint's counters are past these evaluations, so a curve lost here (a kill between
        # deleting and rewriting it) would never be evaluated again
        if kept:
            write_atomic(run.curve_path, "".join(dumps(row) + "\n" for row in kept))
        else:
            run.curve_path.unlink(missing_ok=True)
    fabric.barrier()


def mark_session(fabric: Fabric, run: Run) -> None:
    """This session's code and threads in the run's counters; on a CPU, where a sum's rounding follows the thread
    count, a warning when a resumed run continues on other threads than it trained on."""
    warning = run.counters.mark_session(code_revision(), torch.get_num_threads())
    if warning and fabric.device.type == "cpu" and fabric.is_global_zero:
        print(f"warning: {run.run_dir.name} {warning}", file=sys.stderr)


def save_checkpoint(fabric: Fabric, path: Path, state: dict) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    fabric.save(temporary, state)
    if fabric.is_global_zero:
        os.replace(temporary, path)  # never a half-written checkpoint under the real name
    fabric.barrier()
