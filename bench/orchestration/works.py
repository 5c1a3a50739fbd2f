"""Running works (bench.training.state.Work: a run or an untrained control, beside the Context every work of a
comparison shares) in this process, one after another: what a worker executes, wherever it runs
(bench.orchestration.jobs decides where).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch

from bench.common.stopping import current_stop_request
from bench.training.distributed import stop_agreed, stop_message
from bench.training.loop import TrainingDiverged
from bench.training.runs import control_run, train_run
from bench.training.state import Context, Work


Outcome = tuple  # (result, None), or (None, the divergence record) for a run that diverged


@contextmanager
def threads(count: int | None) -> Iterator[None]:
    """torch's threads set to `count` (None: left as they are) for the block, as before them after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_here(fabric, works: Sequence[Work], context: Context, progress: bool,
             thread_count: int | None) -> list[Outcome]:
    """Each work's outcome, run in this process one after another on `thread_count` torch threads (None: as they
    are): what a comparison does with one job at a time, and what a pool's worker or a Slurm job does with its one
    work. A work that finished before is read back where --resume asked; a run that diverged is its record, and the
    others go on."""
    request, found = current_stop_request(), []
    with threads(thread_count):
        for work in works:
            if stop_agreed(fabric, request):  # e.g. during the Bayes references, or the report of a preset variant
                raise stop_message(fabric, f"before {work.name} (the finished runs are saved)", request.signal_name)
            read = control_run if work.kind == "control" else train_run
            try:
                found.append((read(fabric, work, context, progress), None))
            except TrainingDiverged as error:
                found.append((None, error.record))
    return found

