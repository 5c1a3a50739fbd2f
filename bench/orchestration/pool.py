"""Several works at once, each in a worker process of its own pinned to its threads (CPU) or to one GPU (--jobs N,
bench.orchestration.jobs.choose_slots). The workers are started with `spawn` (forking a process whose torch thread pools
already run is unsafe) and live for the whole command, so a budget sweep's or a preset's comparisons reuse them; each
loads a comparison's corpus and yardsticks once (a pickled Context), not once per run. A stop signal is passed on to
them, and each saves at the end of its step.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Iterator, Sequence

import torch

from bench.common.stopping import (EXIT_STOPPED, STOP_SIGNALS, RunStopped, StopRequest, current_stop_request,
                                   stop_on_signals)
from bench.orchestration.works import Outcome, run_here
from bench.training.distributed import make_fabric
from bench.training.state import Context, Work


def run_isolated(context: Context, work: Work) -> tuple[str, object]:
    """A work in a process of its own (a pool's worker or a Slurm job): ("done", its outcome), or ("stopped", message)
    after a stop signal (its state saved; RunStopped itself does not pickle), or ("skipped", message) where the
    signal came before the work started."""
    if context.threads:
        torch.set_num_threads(context.threads)
    with stop_on_signals() as request:
        if request.signal_name is not None:  # arrived while this process waited for work: start nothing
            return "skipped", f"stopped by {request.signal_name} before {work.name}"
        fabric = _fabric(context.accelerator, context.precision)
        try:
            return "done", run_here(fabric, [work], context, False, context.threads)[0]
        except RunStopped as stopped:
            return "stopped", stopped.message


_worker: dict = {}  # a pool worker's Fabric per (accelerator, precision), its context and its lasting stop handler


def _fabric(accelerator: str, precision: str):
    key = ("fabric", accelerator, precision)
    if key not in _worker:
        _worker[key] = make_fabric(accelerator, 1, 1, "auto", precision)
    return _worker[key]


# what a worker must not die of before its handlers are in place: a pool with a dead worker is broken for good
HELD_SIGNALS = (signal.SIGINT, *STOP_SIGNALS)


@contextmanager
def signals_held() -> Iterator[None]:
    """The stop signals and Ctrl-C held back (pending, not lost) while the pool spawns its workers, which start with
    them held too (a process inherits its signal mask) and release them once their handlers are in place
    (_start_worker): one arriving while a worker still imports torch would otherwise kill it and break the pool."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no masks, and no SIGTERM from a scheduler either
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _start_worker(slots, gpus: tuple[str, ...]) -> None:
    """Pin this worker to its GPU (before CUDA starts), and keep SIGTERM/SIGUSR1 for the whole life of the worker, so
    one arriving between two runs stops the next at once; Ctrl-C is the driver's (it forwards a SIGTERM). The
    signals the driver held while it spawned this worker are released here, the handlers in place."""
    slot = slots.get()
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[slot % len(gpus)]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker["signals"] = stop_on_signals()
    _worker["signals"].__enter__()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)


def _pooled(context_path: str, work: Work) -> tuple[str, object, float]:
    """run_isolated in a pool worker, its context read once per comparison."""
    tick = time.perf_counter()
    if _worker.get("context_path") != context_path:
        with open(context_path, "rb") as file:
            _worker["context"], _worker["context_path"] = pickle.load(file), context_path
    return (*run_isolated(_worker["context"], work), time.perf_counter() - tick)


@dataclass(frozen=True)
class Slots:
    """How many works run at once, and where: `gpus` the CUDA devices they are spread over (none on a CPU)."""

    jobs: int
    gpus: tuple[str, ...] = ()
    threads: int | None = None  # torch threads of each run (None: torch's default)


_pools: dict = {}  # the command's one pool, by its Slots


def pool(slots: Slots) -> ProcessPoolExecutor:
    """The pool for these slots, started once for the command (a sweep's comparisons share it)."""
    started = [key for key in _pools if (key.gpus, key.threads) == (slots.gpus, slots.threads) and
               key.jobs >= slots.jobs]
    if started:  # a sweep's next budget, a preset's next variant
        return _pools[started[0]]
    if slots not in _pools:
        for old in _pools.values():
            old.shutdown()
        _pools.clear()
        context = get_context("spawn")
        queue = context.Queue()
        for slot in range(slots.jobs):
            queue.put(slot)
        _pools[slots] = ProcessPoolExecutor(slots.jobs, mp_context=context, initializer=_start_worker,
                                            initargs=(queue, slots.gpus))
    return _pools[slots]


@contextmanager
def context_file(context: Context) -> Iterator[str]:
    """The context pickled once into a temporary file the workers read (not once per run through the pipe)."""
    handle, path = tempfile.mkstemp(prefix="objective-bench-", suffix=".pkl")
    try:
        with os.fdopen(handle, "wb") as file:
            pickle.dump(context, file)
        yield path
    finally:
        os.unlink(path)


def run_pooled(works: Sequence[Work], context: Context, slots: Slots, quiet: bool) -> list[Outcome]:
    """Every work's outcome, in the order given, `slots.jobs` at once; one line per finished work. A stop signal
    is passed on to the workers (each saves at the end of its step), the works not started are dropped, and
    RunStopped is raised once the others have stopped."""
    executor, request = pool(slots), current_stop_request()
    outcomes: list = [None] * len(works)
    with context_file(context) as path:
        with signals_held():  # submit spawns the workers the pool lacks
            futures = {executor.submit(_pooled, path, work): index for index, work in enumerate(works)}
        try:
            stopped = collect(futures, outcomes, works, executor, request, quiet)
        except BrokenProcessPool:  # after a stop, as any stop; else a worker was killed (the pool ended them all)
            stopped = request.signal_name
            if stopped is None:
                _pools.clear()
                executor.shutdown(wait=True)
                unfinished = ", ".join(work.name for work, outcome in zip(works, outcomes) if outcome is None)
                raise SystemExit(f"a worker process ended abruptly (killed by the system: out of memory?) while "
                                 f"running {unfinished}; the finished runs are saved, run the same command with "
                                 "--resume (and fewer --jobs) to continue") from None
    if stopped:
        _pools.clear()  # its workers hold a stop request: the next comparison (if any) starts fresh ones
        executor.shutdown(wait=True)
        message = f"stopped by {stopped}; the finished runs are saved, run the same command with --resume to continue"
        print(message, file=sys.stderr, flush=True)
        raise RunStopped(message, EXIT_STOPPED)
    return outcomes


def collect(futures: dict[Future, int], outcomes: list, works: Sequence[Work], executor: ProcessPoolExecutor,
            request: StopRequest, quiet: bool) -> str | None:
    """Wait for the futures, filling `outcomes`; returns the stop signal's name if one arrived."""
    pending, finished, stopped = set(futures), 0, None
    while pending:
        try:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        except KeyboardInterrupt:
            request.signal_name = "SIGINT"
            done = set()
        for future in done:
            state, value, seconds = future.result()
            finished += 1
            if state == "skipped":  # queued when the stop came: nothing of it to save, nothing to say
                continue
            if state == "stopped":
                stopped = stopped or request.signal_name or "a signal to a worker"
                print(value, file=sys.stderr, flush=True)
                continue
            outcomes[futures[future]] = value
            if not quiet:
                print(f"{works[futures[future]].name}: done in {seconds:.0f} s ({finished}/{len(futures)})",
                      file=sys.stderr, flush=True)
        if request.signal_name is not None and stopped is None:
            stopped = request.signal_name
            forward_stop(executor)
    return stopped


def forward_stop(executor: ProcessPoolExecutor) -> None:
    """Ask the running works to save and stop. The works not started are left queued: a worker that holds a stop
    request answers "skipped" at once (run_isolated). Cancelling them would race the pool's manager thread, which
    dies on a cancelled future if a worker then dies (CPython's terminate_broken), leaving the exit to wait forever."""
    for process in list(getattr(executor, "_processes", {}).values()):  # the pool keeps no public list
        try:
            os.kill(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass

