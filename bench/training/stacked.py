"""Seeds of one objective trained together as one stacked model (bench.training.stacking): one forward and backward
for all of them per step, each seed with its own initialisation (setup_run's), data order and masks (training_batch's
rows from (seed, step, row)), gradient clipping, AdamW state, place in the learning-rate schedule, evaluations and
early stop, each writing into its own run folder what a separate run writes there: curve.jsonl at the same FLOP
checkpoints (yardsticks read the seed's own, unstacked objective), checkpoint.pt in a separate run's format,
result.json from run_result, logs/. A seed whose FLOPs reach the budget, or whose loss stops being finite, leaves the
stack; the others go on.

    reason = can_batch_seeds(spec, config, fabric, corpus)
    if reason is True:
        outcomes = trained_or_reused_seeds(fabric, spec, seeds, corpus, config, run_dirs, resume, yardsticks)
    else:  # reason says why, in a few words
        outcomes = [trained_or_reused(fabric, spec, seed, ...) for seed, run_dir in zip(seeds, run_dirs)]

Each seed runs the kernels its separate run runs, on the same shapes (bench.training.seed_ops), so on the machine
this was written on (2-core CPU, torch 2.13) every number equals the separate run's to the last bit; the tests allow
float tolerance, for builds whose batched rules sum in another order.

Checkpoints: whenever a seed evaluates (or a save is asked for), every seed still training saves its checkpoint.pt at
that same step, so a rerun resumes the whole group from one moment and trains on exactly as the uninterrupted group
did; any seed's folder can also be resumed as a separate run (train_run), with the same numbers.

Speed: on the 2-core CPU at the default comparison's shape a step's time is the kernels' (matrix products, fused
attention, GELU), not Python's, and 5 stacked seeds trained as fast as 5 runs one after the other on both threads
(73k against 72-77k tokens/s); two runs at once, one thread each, were 1.25x faster (bench.perf
--comparison-steps 60 measures all three). On an H200 (scripts/gpu-check.sh jobs-throughput) 5 stacked seeds trained
287k tokens/s against one run's 276k, where 4 runs at once trained 923k: each seed's kernels are launched one after
another, as its separate run launches them, so stacking shares a process, not the launches.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Sequence

import torch
from lightning_fabric import Fabric
from torch.overrides import TorchFunctionMode
from tqdm.auto import tqdm

from backbone import ConfigError, resolve_model
from bench.data.corpus import Corpus
from bench.files import read_json, write_json
from bench.seeds import derive_seed
from bench.training.batches import (Prefetcher, StepCounts, build_run_objective, eval_batches, local_counts,
                                    training_batch)
from bench.training.config import TrainConfig, eval_grid, learning_rate, run_name
from bench.training.live import LiveMetrics
from bench.training.loop import TrainingDiverged, Yardstick, checkpoint_evaluation
from bench.training.runs import finished_result, read_at_end, run_result
from bench.training.seed_ops import DRAWS
from bench.training.stacking import SeedStack, stack_batches
from bench.training.state import Run, mark_session, restore, save_checkpoint, setup_run
from bench.training.stopping import StopRequest, stop_message, stop_on_signals

Outcome = tuple[dict | None, dict | None]  # (result, None), (None, divergence record), or (None, None): unfinished


def can_batch_seeds(spec: str, config: TrainConfig, fabric: Fabric, corpus: Corpus | None = None) -> bool | str:
    """True when the seeds of `spec` can train as one stacked model under this configuration, else why not, in a
    few words. With the corpus, it also corrupts a few batches and runs one forward to check the objective: a
    forward that draws random numbers (ELECTRA's sampling) needs every seed to supervise the same number of
    positions, since the draws' shapes follow it."""
    precision = fabric.strategy.precision.precision
    reasons = [(fabric.world_size > 1, "it runs in one process, and this command runs several"),
               (fabric.device.type not in ("cpu", "cuda"), f"it runs on a CPU or one GPU, not {fabric.device.type}"),
               (precision != "32-true", f"it trains in 32-true only, not {precision}"),
               (config.compile, "not with --compile"),
               (config.activation_checkpointing, "not with --activation-checkpointing"),
               (config.micro_batch not in (None, config.batch_size), "not with --micro-batch"),
               (resolve_model(config.model, 64).dropout > 0, "dropout would draw from one generator for all seeds")]
    for refused, reason in reasons:
        if refused:
            return reason
    return True if corpus is None else objective_fits(spec, config, corpus)


def objective_fits(spec: str, config: TrainConfig, corpus: Corpus) -> bool | str:
    """Whether `spec`'s forward can run stacked: counts of supervised positions that vary from seed to seed are
    padded (the losses leave the padding out), which a forward that draws random numbers cannot allow, since the
    draws' shapes follow the counts. Leaves the global RNG as it was."""
    objective = build_run_objective(spec, config, corpus)
    windows = corpus.windows("train")
    for piece in range(len(objective.starts)):
        batches = [training_batch(objective, windows, seed, 0, config.batch_size, None, piece) for seed in range(3)]
        if len({len(batch.supervised) for batch in batches}) == 1:
            continue
        drawn = DrawsSeen()
        with torch.random.fork_rng(devices=[]), torch.no_grad(), drawn:
            objective(batches[0])
        if drawn.seen:
            return (f"{objective.piece(piece).spec()} draws random numbers in its forward and supervises a number of "
                    "positions that varies from seed to seed")
    return True


class DrawsSeen(TorchFunctionMode):
    """Notes whether anything draws random numbers the way SeedOps replays them."""

    seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen |= func in DRAWS
        return func(*args, **(kwargs or {}))


def train_seeds(fabric: Fabric, spec: str, seeds: list[int], corpus: Corpus, config: TrainConfig,
                run_dirs: list[Path], yardsticks: Sequence[Yardstick] = (), progress: bool = True,
                stop_after_steps: int | None = None) -> list[dict | None]:
    """train_run for several seeds of `spec` at once, as one stacked model: each seed's result (train_run's dict),
    or None for a seed that diverged (its record is in its folder's diverged.json, and a warning line on stderr, as
    trained_or_reused records a separate run's) or that `stop_after_steps` (which simulates an interruption:
    nothing is saved at it) stopped. Resumes each seed from its folder's checkpoint. Raises ConfigError when
    can_batch_seeds refuses, RunStopped after a stop signal, once every seed still training has saved its state."""
    return [result for result, _ in seeds_trained(fabric, spec, seeds, corpus, config, run_dirs, yardsticks, progress,
                                                  stop_after_steps)]


def trained_or_reused_seeds(fabric: Fabric, spec: str, seeds: list[int], corpus: Corpus, config: TrainConfig,
                            run_dirs: list[Path], reuse: bool, yardsticks: Sequence[Yardstick] = (),
                            progress: bool = True) -> list[Outcome]:
    """trained_or_reused for several seeds: each seed's (result, None) or (None, divergence record); with `reuse`,
    what its folder holds from before (rank 0 decides), the others trained together by train_seeds."""
    outcomes: list[Outcome] = []
    for run_dir in run_dirs:
        diverged = run_dir / "diverged.json"
        outcomes.append(fabric.broadcast((finished_result(run_dir) if reuse else None,
                                          read_json(diverged) if reuse and diverged.exists() else None), src=0))
    todo = [i for i, (result, record) in enumerate(outcomes) if result is None and record is None]
    if todo:
        trained = seeds_trained(fabric, spec, [seeds[i] for i in todo], corpus, config, [run_dirs[i] for i in todo],
                                yardsticks, progress)
        for i, outcome in zip(todo, trained):
            outcomes[i] = outcome
    return outcomes


def seeds_trained(fabric: Fabric, spec: str, seeds: list[int], corpus: Corpus, config: TrainConfig,
                  run_dirs: list[Path], yardsticks: Sequence[Yardstick], progress: bool,
                  stop_after_steps: int | None = None) -> list[Outcome]:
    reason = can_batch_seeds(spec, config, fabric, corpus)
    if reason is not True:
        raise ConfigError(f"the seeds of {spec} cannot train as one stacked model: {reason}")
    with stop_on_signals() as request:
        runs = []
        for seed, run_dir in zip(seeds, run_dirs):
            runs.append(setup_run(fabric, spec, seed, corpus, config, run_dir))
            restore(fabric, runs[-1])
            mark_session(fabric, runs[-1])  # as train_run marks a session
        with closing(SeedGroup(fabric, runs, corpus, yardsticks, progress, request)) as group:
            group.fit(stop_after_steps)
        return group.outcomes


class SeedGroup:
    """The runs of one objective's seeds trained as one SeedStack: `active` holds the runs still training, in the
    stack's order; each run's counters, curve and checkpoints are kept exactly as fit keeps a separate run's. Time
    that all seeds share (steps, saves) is split evenly between the seeds in the stack when it was spent, so that
    train_seconds, wall_seconds and tokens/s are each seed's share and add up to the group's; a seed's own
    evaluations are its own."""

    def __init__(self, fabric: Fabric, runs: list[Run], corpus: Corpus, yardsticks: Sequence[Yardstick],
                 progress: bool, request: StopRequest) -> None:
        self.fabric, self.runs, self.corpus, self.yardsticks = fabric, runs, corpus, yardsticks
        self.progress, self.request, self.config = progress, request, runs[0].config
        self.outcomes: list[Outcome] = [(None, None)] * len(runs)
        self.active = [i for i, run in enumerate(runs) if run.counters.flops < self.config.budget_flops]
        self.stack = SeedStack([runs[i].objective for i in self.active],
                               [runs[i].optimizer for i in self.active]) if self.active else None
        self.windows = [corpus.windows("train", phase.seq_len) for phase in runs[0].schedule.phases]
        self.heldout, self.grid = eval_batches(runs[0].objective, corpus, self.config), eval_grid(self.config)
        self.wall = [run.counters.wall_seconds for run in runs]
        self.rates = [run.optimizer.param_groups[0]["lr"] for run in runs]  # the last step's, as restored
        precision = fabric.strategy.precision.precision
        self.live = [LiveMetrics(run.run_dir, run.counters.step, self.config.log_every, fabric.device, precision,
                                 fabric.world_size, enabled=fabric.is_global_zero) for run in runs]
        first, last = runs[0], runs[-1]
        self.bar = tqdm(total=100, desc=f"{run_name(first.spec, first.seed)}..{last.seed} ({len(runs)} stacked)",
                        unit="% budget", leave=True, mininterval=0.5, disable=not (progress and fabric.is_global_zero),
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")
        self.prefetch = Prefetcher(self.build)
        self.clock, self.last_save = time.perf_counter(), time.monotonic()
        for run in runs:
            run.module.train()

    def build(self, keys: tuple[tuple[int, int, int], ...], _: int) -> list[tuple[object, StepCounts]]:
        """Each (run, step, phase)'s rows of the global batch, as the run's own loop builds them, and their counts."""
        built = []
        for i, step, phase in keys:
            run = self.runs[i]
            rows = training_batch(run.objective, self.windows[phase], run.seed, step, self.config.batch_size, None,
                                  run.schedule.phases[phase].piece)
            built.append((rows, local_counts(run.objective, rows)))
        return built

    def keys(self, spent: list[int] | None = None) -> tuple[tuple[int, int, int], ...]:
        """The active runs' next (run, step, phase), or, given this step's FLOPs, the step after it."""
        keys = []
        for k, i in enumerate(self.active):
            counters, schedule = self.runs[i].counters, self.runs[i].schedule
            ahead = 0 if spent is None else 1
            flops = counters.flops + (0 if spent is None else spent[k])
            keys.append((i, counters.step + ahead, schedule.phase_at(flops, self.config.budget_flops)))
        return tuple(keys)

    def fit(self, stop_after_steps: int | None) -> None:
        """Train until every seed has reached the budget or diverged (or `stop_after_steps` steps)."""
        for i, run in enumerate(self.runs):
            if i not in self.active and self.outcomes[i] == (None, None):
                self.finish(i)  # restored from its checkpoint at the budget: only its result is missing
        while self.active and not (stop_after_steps is not None and all(
                self.runs[i].counters.step >= stop_after_steps for i in self.active)):
            tick = time.perf_counter()
            keys = self.keys()
            built = self.prefetch.take(keys, 0)
            self.prefetch.start(self.keys([spent.flops for _, spent in built]), 0)
            losses, norms = self.update(keys, built)
            seconds = (time.perf_counter() - tick) / len(self.active)
            for k, i in enumerate(list(self.active)):
                self.count(i, keys[k][2], built[k], losses[k], None if norms is None else norms[k], seconds)
            self.after_step()

    def update(self, keys, built) -> tuple[list[float], torch.Tensor | None]:
        """The stacked step: each seed's learning rate from its FLOPs so far, one forward and backward per phase that
        seeds are in, per-seed clipping and AdamW. Reads the losses from the device, once."""
        budget, groups = self.config.budget_flops, {}
        for k, (i, step, phase) in enumerate(keys):
            self.rates[i] = learning_rate(self.runs[i].counters.flops / budget, self.config)
            groups.setdefault(phase, []).append(k)
        stacked = [(members, stack_batches([built[k][0] for k in members], self.fabric.device),
                    self.generators([keys[k] for k in members])) for members in groups.values()]
        losses = self.stack.backward(stacked)
        norms = self.stack.clip(self.config.grad_clip) if self.config.grad_clip > 0 else None
        self.stack.adamw([self.rates[i] for i in self.active])
        return losses.tolist(), norms

    def generators(self, keys: list[tuple[int, int, int]]):
        """The generator a member of a group draws from in this step, made when it first draws: seeded from (seed,
        step, rank 0), as train_step seeds a separate run's."""
        made: dict[int, torch.Generator] = {}

        def generator(member: int) -> torch.Generator:
            if member not in made:
                i, step, _ = keys[member]
                made[member] = torch.Generator(self.fabric.device).manual_seed(derive_seed(self.runs[i].seed, step, 0))
            return made[member]
        return generator

    def count(self, i: int, phase: int, built, loss: float, norm, seconds: float) -> None:
        """What fit's TrainingLoop.count does for a separate run, for run i: its counters and live metrics, or its
        divergence when the loss is not finite."""
        run, (rows, spent) = self.runs[i], built
        counters = run.counters
        counters.train_seconds += seconds
        if not math.isfinite(loss):
            self.diverged(i, TrainingDiverged(run.spec, run.seed, counters.step, loss, counters.last_finite_loss,
                                              counters.flops + spent.flops))
            return
        tokens = self.config.batch_size * rows.inputs.shape[1]
        counters.add_step(phase, tokens, spent.supervised_positions, spent.flops, loss)
        self.live[i].step(counters.step, loss, self.rates[i], tokens, spent.flops, norm, None)

    def after_step(self) -> None:
        """Evaluations at the FLOP checkpoints just passed, then every other seed saves too (and all save when a
        save is due or a signal asked); finished seeds' results; finished and diverged seeds leave the stack; a
        stop signal ends the command once every seed still training has saved."""
        self.share()
        evaluated = [i for i in self.active if self.outcomes[i] == (None, None)
                     and self.runs[i].counters.flops >= self.grid[self.runs[i].counters.next_eval]]
        for i in evaluated:
            self.evaluate(i)
        due = self.config.checkpoint_every is not None and \
            time.monotonic() - self.last_save >= 60 * self.config.checkpoint_every
        saved = bool(evaluated or due or self.request.signal_name)
        if saved:
            self.save(evaluated)
        self.bar.update(sum(min(100.0, 100 * run.counters.flops / self.config.budget_flops) for run in self.runs)
                        / len(self.runs) - self.bar.n)
        for i in list(self.active):
            if self.outcomes[i] == (None, None) and self.runs[i].counters.flops >= self.config.budget_flops:
                self.finish(i)
        self.leave()
        if self.request.signal_name:
            if not saved:  # it arrived during a seed's final probes: the others save now
                self.save([])
            self.bar.close()
            raise self.stopped()

    def share(self) -> None:
        """The time since the last call, split between the seeds in the stack."""
        now = time.perf_counter()
        for i in self.active:
            self.wall[i] += (now - self.clock) / len(self.active)
        self.clock = now

    def evaluate(self, i: int) -> None:
        """Run i's evaluation at the checkpoint just passed (checkpoint_evaluation: curve.jsonl, checkpoint.pt) on
        its own objective holding its weights; its time is its own."""
        run = self.runs[i]
        self.stack.into_run(self.active.index(i), run.objective, run.optimizer, self.rates[i])
        try:
            checkpoint_evaluation(self.fabric, run, self.heldout, self.grid, self.yardsticks,
                                  time.perf_counter() - self.wall[i])
            self.wall[i] = run.counters.wall_seconds
        except TrainingDiverged as error:
            self.diverged(i, error)
        for live in self.live:  # throughput is of training steps
            live.restart()
        self.clock = time.perf_counter()

    def save(self, evaluated: list[int]) -> None:
        """Every seed still training saves its checkpoint at this step (the evaluated ones just did)."""
        for k, i in enumerate(self.active):
            if i not in evaluated and self.outcomes[i] == (None, None):
                run = self.runs[i]
                self.stack.into_run(k, run.objective, run.optimizer, self.rates[i])
                run.counters.wall_seconds = self.wall[i]
                save_checkpoint(self.fabric, run.checkpoint_path, run.state(self.fabric))
        self.last_save = time.monotonic()
        self.share()

    def finish(self, i: int) -> None:
        """Run i reached the budget: its result.json, as train_run writes it (the yardsticks read its own objective,
        which its last evaluation filled), its final readouts timed as its own."""
        run = self.runs[i]
        run.counters.wall_seconds = self.wall[i]
        result = run_result(self.fabric, run, self.corpus)
        with self.fabric.autocast():
            result = read_at_end(result, self.yardsticks if self.fabric.is_global_zero else (), run.objective,
                                 self.progress, run_name(run.spec, run.seed))
        if self.fabric.is_global_zero:
            write_json(run.run_dir / "result.json", result.to_json())
        self.outcomes[i] = (result, None)
        self.clock = time.perf_counter()

    def diverged(self, i: int, error: TrainingDiverged) -> None:
        """Run i's loss stopped being finite: recorded as trained_or_reused records a separate run's divergence."""
        tqdm.write(f"warning: {error}", file=sys.stderr)
        if self.fabric.is_global_zero:
            write_json(self.runs[i].run_dir / "diverged.json", error.record)
        self.outcomes[i] = (None, error.record)

    def leave(self) -> None:
        """Finished and diverged seeds leave the stack."""
        keep = [k for k, i in enumerate(self.active) if self.outcomes[i] == (None, None)]
        if len(keep) < len(self.active):
            self.active = [self.active[k] for k in keep]
            if keep:
                self.stack.keep(keep)

    def stopped(self):
        names = ", ".join(str(self.runs[i].seed) for i in self.active) or "none left"
        where = (f"after step {max(self.runs[i].counters.step for i in self.active)} of {self.runs[0].spec} "
                 f"seeds {names}, stacked: each state is saved in its run folder's checkpoint.pt" if self.active else
                 f"after the seeds of {self.runs[0].spec} finished (their result.json files are written)")
        return stop_message(self.fabric, where, self.request.signal_name)

    def close(self) -> None:
        self.bar.close()
        self.prefetch.close()
        for live in self.live:
            live.close()
