"""A step's rows: which windows a step reads, each row corrupted from its own generator (seed, step, row), the
counts they carry, the background prefetcher, and the held-out batches every run of an objective is evaluated on.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from backbone import Backbone, ConfigError, resolve_model
from bench.common.seeds import derive_seed
from bench.data.corpus import Corpus
from bench.training.recipe import EVAL_SEED, RunConfig, SeqLenSchedule
from objectives import Corrupted, Objective, build_objective
from objectives.draws import RowGenerators

ROW_STREAM = 0  # last part of a row's seed (seed, step, row, ROW_STREAM): apart from the per-process (seed, step, rank)


def row_generators(seed: int, step: int, rows: slice) -> RowGenerators:
    # A pure function of (seed, step, row): a row's masks are the same whether or not the run was resumed, and
    # whichever process corrupts it.
    return RowGenerators([derive_seed(seed, step, row, ROW_STREAM) for row in range(rows.start, rows.stop)])


def training_batch(objective: Objective, windows: Tensor, seed: int, step: int, batch_size: int,
                   rows: slice | None = None, piece: int = 0) -> Corrupted:
    """Rows `rows` (by default all) of the global batch of `step`: windows step·B .. step·B + B − 1 (wrapping
    around `windows`), corrupted afresh every time (dynamic masking, RoBERTa), each row from its own generator, or,
    for objectives with static copies, with copy (epoch mod copies) of each window's fixed corruptions (BERT's static
    masking with dupe_factor). Under an objective schedule, corrupted by its piece `piece`, and marked as its."""
    batch = piece_batch(objective.piece(piece), windows, seed, step, batch_size, rows)
    batch.piece = piece
    return batch


def piece_batch(objective: Objective, windows: Tensor, seed: int, step: int, batch_size: int,
                rows: slice | None) -> Corrupted:
    rows = slice(0, batch_size) if rows is None else rows
    position = torch.arange(batch_size) + step * batch_size
    index = position % len(windows)
    if not objective.static_copies:
        return objective.corrupt_rows(windows[index], rows, row_generators(seed, step, rows))
    copies = (position // len(windows)) % objective.static_copies
    return Corrupted.concat([
        objective.corrupt(windows[i:i + 1], torch.Generator().manual_seed(derive_seed(seed, i, copy)))
        for i, copy in zip(index[rows].tolist(), copies[rows].tolist())])


@dataclass(frozen=True)
class StepCounts:
    """What a step's rows hold: this process's (local_counts), or the global batch's, summed over the processes.
    Each count is a sum over rows (FLOPs are linear in the rows and the projected positions), so the processes'
    counts add up to the whole batch's."""

    flops: int
    supervised_positions: int
    loss_counts: dict[str, int]  # the positions each mean of the loss averages over (Objective.loss_counts)

    def values(self) -> list[int]:
        return [self.flops, self.supervised_positions, *self.loss_counts.values()]

    def with_values(self, values: list[int]) -> StepCounts:
        flops, supervised, *summed = values
        return StepCounts(flops, supervised, dict(zip(self.loss_counts, summed)))


def local_counts(objective: Objective, rows: Corrupted) -> StepCounts:
    return StepCounts(objective.flops(rows), objective.counted_positions(rows), objective.loss_counts(rows))


class Prefetcher:
    """Builds the next step's rows in a background thread while the device runs this step: corruption is host-side
    work of a few to tens of milliseconds per step. A build is a pure function of (step, phase), so a prefetched
    batch is the one the loop would have built itself; the loop builds it in place when none was asked for."""

    def __init__(self, build: Callable[[int, int], tuple[Corrupted, StepCounts]]) -> None:
        self.build = build
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches")
        self.pending: tuple[tuple[int, int], Future] | None = None

    def start(self, step: int, phase: int) -> None:
        self.pending = ((step, phase), self.executor.submit(self.build, step, phase))

    def ahead(self) -> StepCounts:
        """The local counts of the batch being built (waiting for it): they ride in this step's all-reduce."""
        return self.pending[1].result()[1]

    def take(self, step: int, phase: int) -> tuple[Corrupted, StepCounts]:
        pending, self.pending = self.pending, None
        if pending is not None and pending[0] == (step, phase):
            return pending[1].result()
        return self.build(step, phase)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def run_schedule(config: RunConfig, corpus: Corpus) -> SeqLenSchedule:
    """The run's sequence-length schedule: the config's, whose longest length must be the corpus's windows (the
    shorter phases' windows are cut from them), or the corpus's window length throughout."""
    schedule = config.seq_len_schedule or SeqLenSchedule.fixed(corpus.seq_len)
    if schedule.longest > corpus.seq_len:
        raise ConfigError(f"--seq-len {schedule.text}: length {schedule.longest} exceeds the model's max_seq_len "
                          f"{corpus.seq_len} (the corpus's window length)")
    if schedule.longest < corpus.seq_len:
        raise ConfigError(f"--seq-len {schedule.text}: the corpus's windows hold {corpus.seq_len} tokens but the "
                          f"schedule's longest length is {schedule.longest}; build the corpus at {schedule.longest}")
    return schedule


def build_run_objective(spec: str, config: RunConfig, corpus: Corpus) -> Objective:
    backbone = Backbone(resolve_model(config.model, corpus.vocab.size, max_seq_len=corpus.seq_len))
    backbone.flops_convention = config.flops  # what the budget is charged in
    objective = build_objective(spec, backbone, corpus.vocab)
    for seq_len in dict.fromkeys(run_schedule(config, corpus).lengths):
        objective.check_seq_len(seq_len)  # e.g. a phase too short for span corruption
    return objective


def eval_batches(objective: Objective, corpus: Corpus, config: RunConfig) -> list[Corrupted]:
    """The held-out evaluation batches of an objective: the same windows and masks for every seed and world size.
    Under a sequence-length schedule, windows of its last phase's length, the one the model is judged at: a
    schedule that ends at the corpus's length is evaluated on exactly the batches of a run at that length
    throughout."""
    windows = corpus.windows("heldout", run_schedule(config, corpus).final)[:config.eval_windows]
    return [objective.corrupt(windows[start:start + config.batch_size], torch.Generator().manual_seed(EVAL_SEED + i))
            for i, start in enumerate(range(0, len(windows), config.batch_size))]
