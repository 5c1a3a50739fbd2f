"""The training loop: `fit` trains to the FLOP budget as a short loop of named calls (cool_down_branches,
take_batch, train_step, agree, count, evaluate_or_save, stop_if_asked). The learning rate is warmup-stable-decay
(bench.training.recipe.learning_rate), and every point of a run's curve is a finished run: where a FLOP checkpoint's
cool-down would start, the loop branches, trains the branch to the checkpoint at a rate that falls to zero there (the
very steps a run with that budget takes), writes its held-out evaluation and the yardsticks' curve points, drops it
and goes on from where it branched, saving that state. The branches' steps and FLOPs are counted apart from the
run's. Yardsticks are called by name (state.Yardstick): the loop imports none of them.
"""

from __future__ import annotations

import copy
import math
import time
from contextlib import closing
from dataclasses import dataclass

import torch
from lightning_fabric import Fabric
from torch import Tensor
from tqdm.auto import tqdm

from bench.common.files import append_jsonl
from bench.common.seeds import derive_seed
from bench.common.stopping import PhaseStopped, RunStopped, StopRequest, stop_on_signals
from bench.training.batches import Prefetcher, StepCounts, eval_batches, local_counts, training_batch
from bench.training.distributed import Agreement, agree, any_process, step_counts, stop_agreed, stop_message
from bench.training.evaluation import evaluate
from bench.training.live_metrics import LiveMetrics
from bench.training.recipe import cooldown_start, eval_grid, learning_rate, match_optimizer_to_device, run_name
from bench.training.records import curve_row
from bench.training.state import Run, save_checkpoint
from objectives import Corrupted, Objective, Output


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: not a configuration mistake, so not a ConfigError. Carries what the report
    states about the run (the step, the last finite loss)."""

    def __init__(self, spec: str, seed: int, step: int, loss: float, last_finite_loss: float | None,
                 flops: int = 0) -> None:
        last = "none" if last_finite_loss is None else f"{last_finite_loss:.4g}"
        super().__init__(f"{spec} seed {seed} diverged: the loss became {loss} at step {step} (last finite loss "
                         f"{last}); try a lower --lr")
        self.record = {"objective": spec, "seed": seed, "diverged": True, "step": step,
                       "last_finite_loss": last_finite_loss, "flops": flops}

    @classmethod
    def recorded(cls, record: dict) -> "TrainingDiverged":
        """The divergence a run's diverged.json recorded (its loss at that step is not kept: only that it was not
        finite), raised again by a resumed comparison."""
        return cls(record["objective"], record["seed"], record["step"], float("nan"), record["last_finite_loss"],
                   record["flops"])


def train_step(fabric: Fabric, run: Run, rows: Corrupted, loss_counts: dict[str, int],
               budget: float | None = None) -> Tensor:
    """One optimizer step on this process's `rows` of the global batch, in micro-batches of config.micro_batch
    windows whose gradients add up to the share's; `loss_counts`: the global batch's (step_counts); `budget`: where
    the learning rate's cool-down ends (a checkpoint's branch), else the run's budget. Returns this process's part
    of the global batch's loss (the processes' parts sum to it) as a tensor on the device: nothing in the step reads
    a value back from the device (fit reads this one, once)."""
    world, rank, step = fabric.world_size, fabric.global_rank, run.counters.step
    objective, config = run.objective, run.config
    per_rank = config.batch_size // world
    size = config.micro_batch or per_rank
    for group in run.optimizer.param_groups:
        group["lr"] = learning_rate(run.counters.flops, budget or config.budget_flops, config)
    seed_step(fabric.device, derive_seed(run.seed, step, rank))  # the step's draws (ELECTRA's sampling) are its own
    run.optimizer.zero_grad(set_to_none=True)
    parts = []
    for start in range(0, per_rank, size):
        micro = rows.rows(slice(start, start + size))
        # DDP all-reduces the gradients in the backward of the last micro-batch only; before it they accumulate
        with fabric.no_backward_sync(run.module, enabled=start + size < per_rank):
            with fabric.autocast():
                output = run.module(micro.to(fabric.device, non_blocking=True))
            loss = share_of_loss(objective, output, micro, loss_counts, world, whole=size == config.batch_size)
            fabric.backward(loss)
        parts.append(loss.detach())
    if config.grad_clip > 0:
        # a non-finite norm is not an error here: fit's check stops every process together, with one line
        run.grad_norm = fabric.clip_gradients(run.module, run.optimizer, max_norm=config.grad_clip,
                                              error_if_nonfinite=False)
    run.optimizer.step()
    return (parts[0] if len(parts) == 1 else torch.stack(parts).sum()) / world


def seed_step(device: torch.device, seed: int) -> None:
    """Seed the generators a step draws from, the host's and the device's: what torch.manual_seed does for them,
    without queueing the seed for every backend not started (CUDA, XPU, MTIA on a CPU), each with a formatted stack
    trace: 0.3-0.6 ms a step, 1-2 % of a default step."""
    torch.default_generator.manual_seed(seed)
    if device.type != "cpu":
        getattr(torch, device.type).manual_seed(seed)


def share_of_loss(objective: Objective, output: Output, micro: Corrupted, totals: dict[str, int], world: int,
                  whole: bool) -> Tensor:
    """The loss to back-propagate for one micro-batch, so that the gradients summed over micro-batches and averaged
    over processes (DDP) are the gradient of the global batch's loss. Each mean in the loss is weighed by this
    micro-batch's share of the positions it averages over in the global batch, times the number of processes DDP
    divides by: Bernoulli or whole-word batches, whose rows hold different numbers of masked positions, weigh every
    position as the whole batch does. `whole`: the micro-batch is the global batch, and its loss is used as it is."""
    if whole:
        return output.loss
    counts, terms = objective.loss_counts(micro), output.loss_terms()
    return sum(term * (counts[name] * world / totals[name] if totals[name] else 0.0)
               for name, term in terms.items())


def checkpoint_evaluation(fabric: Fabric, run: Run, heldout: list[Corrupted], checkpoint: float) -> bool:
    """Evaluate the model as it stands, the run trained to the FLOP `checkpoint`, and append the row to curve.jsonl.
    Returns False where a stop signal came first, on any process: then no row is written, and the caller saves the
    state from before the evaluation, which a resumed run evaluates again."""
    try:
        row = checkpoint_row(fabric, run, heldout, checkpoint)
    except PhaseStopped:  # between two batches or fits: what this process evaluated so far is dropped
        row = None
    if any_process(fabric, row is None):  # one answer on every process, so that all of them save the same state
        return False
    if fabric.is_global_zero:
        append_jsonl(run.curve_path, row)
    return True


def checkpoint_row(fabric: Fabric, run: Run, heldout: list[Corrupted], checkpoint: float) -> dict:
    """The row of curve.jsonl at `checkpoint`: the held-out metrics and, on rank 0, the yardsticks' curve points."""
    counters = run.counters
    row = curve_row(counters, checkpoint, evaluate(fabric, run.module, heldout, run.objective, run.context.language))
    loss = row["metrics"]["loss"]
    if not math.isfinite(loss):  # the last update broke the weights: not a finished run
        raise TrainingDiverged(run.spec, run.seed, counters.step, loss, counters.last_finite_loss, counters.flops)
    if run.config.probe_every_eval and fabric.is_global_zero:  # only rank 0 writes the row; the others need not wait
        with fabric.autocast():  # the readouts run on the device, under the run's precision
            for yardstick in run.context.yardsticks:
                point = yardstick.at_checkpoint(run.objective)
                if point is not None:  # a diagnostic has no curve
                    row[yardstick.result_key] = point
    return row


@dataclass
class Step:
    """A training step as the loop sees it: its index, its phase of the sequence-length schedule, this process's
    rows and the global batch's counts."""

    index: int
    phase: int
    rows: Corrupted
    spent: StepCounts


class TrainingLoop:
    """What `fit` keeps across steps (the progress bar, live metrics, the batch prefetcher, the counts carried from
    one step's all-reduce to the next, the time of the last save) and the named parts of a step."""

    def __init__(self, fabric: Fabric, run: Run, request: StopRequest) -> None:
        self.fabric, self.run, corpus = fabric, run, run.context.corpus
        self.request, config, counters = request, run.config, run.counters
        self.windows = [corpus.windows("train", phase.seq_len) for phase in run.schedule.phases]
        self.heldout, self.grid = eval_batches(run.objective, corpus, config), eval_grid(config)
        self.bar = tqdm(total=100, desc=run_name(run.spec, run.seed), unit="% budget", leave=True, mininterval=0.5,
                        disable=not (run.progress and fabric.is_global_zero),
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")
        self.bar.update(min(100.0, 100 * counters.flops / config.budget_flops))
        self.started, self.last_save = time.perf_counter() - counters.wall_seconds, time.monotonic()
        self.live = LiveMetrics(run.run_dir, counters.step, config.log_every, fabric.device,
                                fabric.strategy.precision.precision, fabric.world_size, enabled=fabric.is_global_zero)
        per_rank = config.batch_size // fabric.world_size
        self.share = slice(fabric.global_rank * per_rank, (fabric.global_rank + 1) * per_rank)
        self.prefetch = Prefetcher(self.build)
        self.carried: tuple[tuple[int, int], StepCounts] | None = None  # a step's global counts, from the step before
        self.upcoming = (counters.step, 0)  # the (step, phase) being built ahead
        run.module.train()

    def build(self, step: int, phase: int) -> tuple[Corrupted, StepCounts]:
        """This process's rows of the step's batch, and their counts."""
        rows = training_batch(self.run.objective, self.windows[phase], self.run.seed, step,
                              self.run.config.batch_size, self.share, self.run.schedule.phases[phase].piece)
        return (rows.pin_memory() if self.fabric.device.type == "cuda" else rows), local_counts(self.run.objective, rows)

    def take_batch(self) -> Step:
        """The step's rows (built ahead while the last step ran) and its global counts; starts building the next."""
        counters, budget, schedule = self.run.counters, self.run.config.budget_flops, self.run.schedule
        # a pure function of the counted FLOPs, which the checkpoint holds: a resumed run switches at the same
        # step. Its windows are indexed by the run's step, so a later phase does not continue the token stream
        # where the previous one stopped: it starts at window s·B of its own windowing, as a run at its length
        # throughout would read at step s.
        step, phase = counters.step, schedule.phase_at(counters.flops, budget)
        rows, local = self.prefetch.take(step, phase)
        carried = self.carried
        spent = carried[1] if carried and carried[0] == (step, phase) else step_counts(self.fabric, local)
        # the next step's phase is known now: its rows are corrupted while this step runs
        self.upcoming = (step + 1, schedule.phase_at(counters.flops + spent.flops, budget))
        self.prefetch.start(*self.upcoming)
        return Step(step, phase, rows, spent)

    def agree(self, loss_part: Tensor, branch: bool = False) -> Agreement:
        """After train_step, the one all-reduce every process agrees on (loss, stop and save requests, and, on
        several processes, the next step's counts). `branch`: a cool-down branch's step (its state is never saved)."""
        config = self.run.config
        save_due = not branch and config.checkpoint_every is not None and \
            time.monotonic() - self.last_save >= 60 * config.checkpoint_every
        agreed = agree(self.fabric, loss_part, self.request.signal_name is not None, save_due,
                       self.prefetch.ahead() if self.fabric.world_size > 1 else None)
        self.carried = (self.upcoming, agreed.ahead) if agreed.ahead else None
        return agreed

    def count(self, step: Step, loss: float, live: bool = True) -> None:
        """The run's and its phase's counters, and (`live`: not in a branch) the bar and the live metrics; a
        non-finite loss ends the run (every rank sees the same loss, so every rank stops here)."""
        run, counters, spent = self.run, self.run.counters, step.spent
        if not math.isfinite(loss):
            self.bar.close()
            raise TrainingDiverged(run.spec, run.seed, step.index, loss, counters.last_finite_loss,
                                   counters.flops + spent.flops)
        tokens = run.config.batch_size * step.rows.inputs.shape[1]
        counters.add_step(step.phase, tokens, spent.supervised_positions, spent.flops, loss)
        if not live:
            return
        self.bar.update(min(100.0, 100 * counters.flops / run.config.budget_flops) - self.bar.n)
        self.bar.set_postfix_str(f"loss {loss:.3f}", refresh=False)
        self.live.step(counters.step, loss, run.optimizer.param_groups[0]["lr"], tokens, spent.flops,
                       run.grad_norm, getattr(self.fabric.strategy.precision, "scaler", None))

    def evaluate_or_save(self, agreed: Agreement) -> None:
        """At the budget: the evaluations still due (finish); else save when a process asked (a signal,
        --checkpoint-every)."""
        if self.run.counters.flops >= self.run.config.budget_flops:
            self.finish()
        elif agreed.stop or agreed.save:
            self.save()

    def finish(self) -> None:
        """At the budget: the checkpoints' branches still due, then the run's own evaluation, and save. A stop signal
        during that evaluation saves the state at the budget without it and stops; the resumed run (already at its
        budget, so it takes no step) comes here from fit and evaluates it."""
        counters = self.run.counters
        self.cool_down_branches()
        if counters.next_eval >= len(self.grid):  # evaluated before: a run resumed at the end of its training
            return
        if not checkpoint_evaluation(self.fabric, self.run, self.heldout, self.grid[-1]):
            self.save()
            self.stop_if_asked(True)
        counters.next_eval = len(self.grid)
        self.save()

    def save(self) -> None:
        self.run.counters.wall_seconds = time.perf_counter() - self.started
        save_checkpoint(self.fabric, self.run.checkpoint_path, self.run.state(self.fabric))
        self.last_save = time.monotonic()
        self.live.restart()

    def cool_down_branches(self) -> None:
        """Each FLOP checkpoint before the budget whose cool-down starts by now (a run trained to it would take a
        lower rate than this one from here): branch, train the branch to the checkpoint at that run's rates, evaluate
        it as the run finished at that budget, drop it and restore the state it branched from, then save that state
        with the evaluation counted. The branch reads the steps' own rows and draws (a pure function of the step),
        so it is the separate run to the last bit where the warm-up has the same length in FLOPs. A stop signal in
        a branch or its evaluation drops it and saves the state it branched from: a resumed run does the branch
        again."""
        run, counters = self.run, self.run.counters
        while counters.next_eval < len(self.grid) - 1 and \
                counters.flops > cooldown_start(self.grid[counters.next_eval], run.config):
            checkpoint, branched_from = self.grid[counters.next_eval], self.snapshot()
            self.bar.set_postfix_str(f"cooling down to {checkpoint:.3g} FLOPs", refresh=True)
            stop = False
            while counters.flops < checkpoint and not stop:
                step = self.take_batch()
                loss_part = train_step(self.fabric, run, step.rows, step.spent.loss_counts, checkpoint)
                agreed = self.agree(loss_part, branch=True)
                self.count(step, agreed.loss, live=False)
                stop = agreed.stop
            if not stop:
                stop = not checkpoint_evaluation(self.fabric, run, self.heldout, checkpoint)
            before = branched_from["counters"]
            steps, flops = counters.step - before.step, counters.flops - before.flops
            self.restore(branched_from)
            if stop:
                self.save()
                self.stop_if_asked(True)
            counters.cooldown_steps += steps
            counters.cooldown_flops += flops
            counters.next_eval += 1
            self.save()

    def snapshot(self) -> dict:
        """The trainable state and counters, copied, for a branch to start from and the run to come back to."""
        run = self.run
        return {"model": {key: value.detach().clone() for key, value in run.objective.state_dict().items()},
                "optimizer": copy.deepcopy(run.optimizer.state_dict()), "counters": copy.deepcopy(run.counters),
                "precision": copy.deepcopy(self.fabric.strategy.precision.state_dict()), "carried": self.carried}

    def restore(self, snapshot: dict) -> None:
        """Back to a snapshot, in place (fit holds the counters object): the run goes on as if never branched."""
        run = self.run
        run.objective.load_state_dict(snapshot["model"])
        run.optimizer.load_state_dict(snapshot["optimizer"])
        match_optimizer_to_device(run.optimizer, self.fabric.device)
        self.fabric.strategy.precision.load_state_dict(snapshot["precision"])
        run.counters.__dict__.update(snapshot["counters"].__dict__)
        self.carried = snapshot["carried"]  # the counts of the step the run goes on with, agreed before the branch

    def stop_if_asked(self, agreed: bool) -> None:
        """After a signal the state is saved: end the command (closing the bar first, so the message has a line)."""
        if agreed:
            self.bar.close()
            raise stopped(self.fabric, self.run, self.request.signal_name)

    def close(self) -> None:
        self.bar.close()
        self.prefetch.close()
        self.live.close()


def fit(fabric: Fabric, run: Run, stop_after_steps: int | None = None) -> bool:
    """Train until the accounted FLOPs reach the budget, evaluating at every checkpoint of the grid. Returns False
    when stopped early by `stop_after_steps` (which simulates an interruption). Raises RunStopped after saving the
    state when SIGTERM or SIGUSR1 arrives, TrainingDiverged when the loss stops being finite."""
    counters, early = run.counters, False
    with stop_on_signals() as request, closing(TrainingLoop(fabric, run, request)) as loop:
        while not early and counters.flops < run.config.budget_flops:
            loop.cool_down_branches()
            tick = time.perf_counter()  # the whole step, building the batch included: honest tokens/s
            # --- the step: its rows, the update, the one all-reduce
            step = loop.take_batch()
            loss_part = train_step(fabric, run, step.rows, step.spent.loss_counts)
            agreed = loop.agree(loss_part)
            counters.train_seconds += time.perf_counter() - tick
            # --- what it counted, then an evaluation at each FLOP checkpoint (or a save when asked)
            loop.count(step, agreed.loss)
            loop.evaluate_or_save(agreed)
            loop.stop_if_asked(agreed.stop)
            early = stop_after_steps is not None and counters.step >= stop_after_steps
        if not early:
            loop.finish()  # a run resumed at its budget whose last evaluation a stop signal had dropped
            counters.wall_seconds = time.perf_counter() - loop.started
            # a signal that arrived after the last evaluation: its checkpoint (at the budget) is saved, so stop now,
            # before the final probes; --resume runs them from there
            loop.stop_if_asked(stop_agreed(fabric, request))
    return not early


def stopped(fabric: Fabric, run: Run, signal_name: str | None) -> RunStopped:
    """Say (once, on rank 0) that the state is saved and how to go on; the exception ends the command."""
    return stop_message(fabric, f"after step {run.counters.step} of {run.spec} seed {run.seed}: the state is saved "
                                f"in {run.checkpoint_path}", signal_name)
