"""Where a comparison's runs and untrained controls execute (`executed`): here, one after another; several at once
(--jobs N, docs/scaling.md "Many runs at once"), each in a process of its own pinned to its threads (CPU) or to one
GPU, since they share nothing but data and configuration; or as Slurm jobs through submitit (--launcher slurm;
--launcher local runs each as a process of its own the same way, on this machine). A run's numbers never depend on
its neighbours: at the same thread count its result.json is the one it writes alone.

The workers are started with `spawn` (forking a process whose torch thread pools already run is unsafe) and live for
the whole command, so a budget sweep's or a preset's comparisons reuse them; each loads a comparison's corpus and
yardsticks once (a pickled Context), not once per run.
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
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Iterator, Sequence

import torch

from bench.config import HardwareConfig, on_cpu
from bench.data.corpus import Corpus
from bench.files import read_json, write_json
from bench.planning import Plan, device_memory_bytes, step_memory
from bench.stopping import EXIT_STOPPED, STOP_SIGNALS, RunStopped, StopRequest, current_stop_request, stop_on_signals
from bench.training.config import RunConfig
from bench.training.distributed import make_fabric, stop_agreed, stop_message
from bench.training.loop import TrainingDiverged
from bench.training.runs import control_run, train_run
from bench.training.state import RunContext

# the training a command's runs must hold together for running them at once to pay: each worker's start (importing
# torch and Lightning) costs seconds, and running one run per core gains about a fifth on a CPU. Measured on 2 cores:
# 4 runs of 2e11 FLOPs take the same wall time either way; below this, runs go one after another in this process
PARALLEL_MIN_FLOPS = 4e12
# runs sharing one GPU when their steps are too small to keep it busy (SMALL_STEP_TOKENS). Measured on an H200 at the
# default comparison's shape (scripts/gpu-check.sh, jobs-throughput): 1, 2, 4 and 8 runs at once trained 276k, 534k,
# 923k and 1,534k tokens/s together, each holding 96 MiB; each run's process drives the GPU from a core of its own
PER_GPU_SMALL = 8
SMALL_STEP_TOKENS = 16384  # tokens per device step below which a GPU mostly waits for the host
CUDA_CONTEXT_BYTES = 2 ** 30  # what each process's CUDA context and allocator reserve take besides the step

Outcome = tuple  # (result, None), or (None, the divergence record) for a run that diverged


@dataclass(frozen=True)
class Work:
    """One unit a worker executes: a run ("run") or an untrained control ("control")."""

    kind: str
    spec: str
    seeds: tuple[int, ...]
    train: RunConfig
    run_dirs: tuple[Path, ...]
    reuse: bool

    @property
    def name(self) -> str:
        return ", ".join(run_dir.name for run_dir in self.run_dirs)

    def finished(self) -> bool:
        """Whether --resume would only read this work back (every folder holds its result or divergence)."""
        return self.reuse and all((d / "result.json").exists() or (d / "diverged.json").exists()
                                  for d in self.run_dirs)


@dataclass(frozen=True)
class Context:
    """What every run of a comparison reads besides its own work, and how its process is set up."""

    corpus: Corpus
    yardsticks: tuple
    accelerator: str
    precision: str
    threads: int | None  # torch threads per run on a CPU (None: torch's default)


def executed(fabric, works: Sequence[Work], context: Context, progress: bool,
             plan: Plan | None = None) -> list[list[Outcome]]:
    """Each work's outcomes, however they run: `plan` (the comparison's) decides where, through submitit
    (--launcher), in a pool of processes (more than one at once: choose_slots) or here, one after another, as a
    worker or a Slurm job (no plan) runs its work. A work that finished before is read back where --resume asked;
    a run that diverged is its record, and the others go on."""
    thread_count = context.threads
    if plan is not None:
        hardware = plan.config.hardware
        if hardware.launcher != "pool" and not all(work.finished() for work in works):
            cpus = hardware.slurm_cpus_per_job or hardware.threads_per_run or 1
            return submitted(fabric, works, replace(context, threads=cpus), hardware, plan.out, not progress)
        slots = choose_slots(plan, fabric.device, works) if fabric.world_size == 1 else Slots(1)
        if slots.jobs > 1:
            return run_pooled(works, replace(context, threads=slots.threads), slots, not progress)
        thread_count = slots.threads or hardware.threads_per_run
    request, found = current_stop_request(), []
    with threads(thread_count):
        for work in works:
            if stop_agreed(fabric, request):  # e.g. during the Bayes references, or the report of a preset variant
                raise stop_message(fabric, f"before {work.name} (the finished runs are saved)", request.signal_name)
            read = control_run if work.kind == "control" else train_run
            try:
                asked = RunContext(work.spec, work.seeds[0], context.corpus, work.train, work.run_dirs[0],
                                   context.yardsticks, progress)
                found.append([(read(fabric, asked, reuse=work.reuse), None)])
            except TrainingDiverged as error:
                found.append([(None, error.record)])
    return found


def run_isolated(context: Context, work: Work) -> tuple[str, object]:
    """A work in a process of its own (a pool's worker or a Slurm job): ("done", outcomes), or ("stopped", message)
    after a stop signal (its state saved; RunStopped itself does not pickle), or ("skipped", message) where the
    signal came before the work started."""
    if context.threads:
        torch.set_num_threads(context.threads)
    with stop_on_signals() as request:
        if request.signal_name is not None:  # arrived while this process waited for work: start nothing
            return "skipped", f"stopped by {request.signal_name} before {work.name}"
        fabric = _fabric(context.accelerator, context.precision)
        try:
            return "done", executed(fabric, [work], context, progress=False)[0]
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


def run_pooled(works: Sequence[Work], context: Context, slots: Slots, quiet: bool) -> list[list[Outcome]]:
    """Every work's outcomes, in the order given, `slots.jobs` at once; one line per finished work. A stop signal
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


@contextmanager
def threads(count: int | None) -> Iterator[None]:
    """torch's threads set to `count` (None: left as they are) for the block, as before them after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count or before)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def cpu_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def visible_gpus() -> tuple[str, ...]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES names them to a child."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        return tuple(part.strip() for part in given.split(",") if part.strip())
    return tuple(str(index) for index in range(torch.cuda.device_count()))


def choose_slots(plan: Plan, device: torch.device, works: Sequence[Work]) -> Slots:
    """How many of the works not finished run at once, and on how many threads each. Both follow from the whole
    comparison, never from what is left of it, so that a resumed run gets the thread count (and so the numbers) it
    would have had: --jobs, else auto_jobs when all its runs together hold enough training; never more at once than
    there are works left."""
    hardware, training = plan.config.hardware, plan.config.training
    gpus = visible_gpus() if device.type == "cuda" else ()
    flops = training.budget * training.seeds * len(plan.specs)
    jobs = hardware.jobs or (auto_jobs(plan, device, gpus) if flops >= PARALLEL_MIN_FLOPS else 1)
    threads = hardware.threads_per_run or (max(1, cpu_cores() // jobs) if jobs > 1 else None)
    return Slots(max(1, min(jobs, sum(not work.finished() for work in works))), gpus, threads)


def auto_jobs(plan: Plan, device: torch.device, gpus: tuple[str, ...]) -> int:
    """What the machine uses well for runs long enough to repay the workers' start: on a CPU one run per core
    (measured on 2 cores: two 1-thread runs at once are 1.25x faster than one 2-thread run after another, and stay
    so when another process holds a core); on GPUs one run per device, several when steps are too small to keep one
    busy (never more of them than CPU cores, which launch their kernels); never more than memory holds."""
    hardware, train = plan.config.hardware, plan.train
    windows = hardware.micro_batch or train.batch_size
    need = max(step_memory(objective, windows, plan.schedule.longest, hardware.precision, device).total
               for objective in plan.objectives)
    if gpus:
        fit = device_memory_bytes(device) // (need + CUDA_CONTEXT_BYTES)
        small = train.batch_size * plan.schedule.final < SMALL_STEP_TOKENS
        per_gpu = max(1, min(PER_GPU_SMALL if small else 1, fit, cpu_cores() // len(gpus)))
        return len(gpus) * per_gpu
    return max(1, min(cpu_cores(), device_memory_bytes(device) // need))


# --- Slurm jobs: one job per run, this command waiting for them, gathering their results and writing the report.
# Each job writes its result.json into its run's folder, so a rerun with --resume reads the finished ones back,
# waits for those still queued or running, and resubmits the rest (an interrupted run continues from its checkpoint).
# One large run across GPUs and nodes is not this: it is Fabric DDP (srun or torchrun, docs/scaling.md).


JOB_RECORD = "slurm_job.json"  # in a run's folder: the job last submitted for it, to wait for rather than duplicate
LIVE = ("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "CONFIGURING", "COMPLETING")


def run_job(context: Context, work: Work) -> tuple[str, object]:
    """A work as a Slurm job: run_isolated, with submitit's timeout warning (SIGUSR2, --signal USR2@90) also asking
    for a save at the end of the step, so a job at its time limit stops cleanly and a rerun resumes it."""
    with stop_on_signals() as request:
        signal.signal(signal.SIGUSR2, request)
        return run_isolated(context, work)


def executor_for(hardware: HardwareConfig, out: Path):
    import submitit
    folder = hardware.slurm_folder or out / "slurm"
    executor = submitit.AutoExecutor(folder=folder, cluster="local" if hardware.launcher == "local" else "slurm")
    gpus = hardware.slurm_gpus_per_job
    gpus = (0 if on_cpu(hardware) and hardware.launcher == "local" or hardware.accelerator == "cpu" else 1) \
        if gpus is None else gpus
    executor.update_parameters(name="objective-bench", timeout_min=hardware.slurm_time, nodes=1, tasks_per_node=1,
                               cpus_per_task=hardware.slurm_cpus_per_job or hardware.threads_per_run or 1,
                               gpus_per_node=gpus,
                               **({"slurm_partition": hardware.slurm_partition} if hardware.slurm_partition else {}))
    return executor


def submitted(fabric, works: list[Work], context: Context, hardware: HardwareConfig, out: Path,
              quiet: bool) -> list[list[Outcome]]:
    """Every work's outcomes: finished ones read back here, live jobs of an earlier session waited for, the others
    submitted (as one job array). Jobs that failed are listed once all are done, and the command exits 1."""
    finished = [index for index, work in enumerate(works) if work.finished()]
    outcomes: list = [None] * len(works)
    for index, read_back in zip(finished, executed(fabric, [works[index] for index in finished], context, False)):
        outcomes[index] = read_back
    live = waiting(works, outcomes, hardware)
    jobs = {**live, **submit(works, outcomes, set(live.values()), context, hardware, out)}
    failed, stopped = gather(jobs, works, outcomes, hardware.launcher, quiet)
    if stopped:
        raise RunStopped(report_stop(stopped), EXIT_STOPPED)
    if failed:
        logs = hardware.slurm_folder or out / "slurm"
        print(f"{len(failed)} run job(s) failed (logs in {logs}); rerun with --resume to resubmit them:",
              file=sys.stderr)
        for line in failed:
            print(f"  {line}", file=sys.stderr)
        raise SystemExit(1)
    return outcomes


def waiting(works: list[Work], outcomes: list, hardware: HardwareConfig) -> dict:
    """{job: index} for works whose job from an earlier session is still queued or running (Slurm only)."""
    if hardware.launcher != "slurm":
        return {}
    import submitit
    found = {}
    for index, work in enumerate(works):
        record = work.run_dirs[0] / JOB_RECORD
        if outcomes[index] is None and work.reuse and record.exists():
            saved = read_json(record)
            job = submitit.SlurmJob(folder=saved["folder"], job_id=saved["job_id"])
            if job.state in LIVE:
                found[job] = index
    return found


def submit(works: list[Work], outcomes: list, live: set[int], context: Context, hardware: HardwareConfig,
           out: Path) -> dict:
    """{job: index} for the works neither finished nor waited for, each job recorded in its run's folder."""
    todo = [index for index in range(len(works)) if outcomes[index] is None and index not in live]
    if not todo:
        return {}
    executor = executor_for(hardware, out)
    with executor.batch():
        jobs = [executor.submit(run_job, context, works[index]) for index in todo]
    for job, index in zip(jobs, todo):
        works[index].run_dirs[0].mkdir(parents=True, exist_ok=True)
        write_json(works[index].run_dirs[0] / JOB_RECORD, {"job_id": job.job_id, "folder": str(executor.folder)})
    return dict(zip(jobs, todo))


def gather(jobs: dict, works: list[Work], outcomes: list, launcher: str, quiet: bool) -> tuple[list[str], list]:
    """Wait for the jobs, filling `outcomes`: (failed "NAME: why" lines, stop messages of jobs that were stopped).
    A stop signal to this command leaves the jobs running: a rerun with --resume waits for them again."""
    import submitit
    failed, stopped, request = [], [], current_stop_request()
    for count, job in enumerate(submitit.helpers.as_completed(list(jobs), poll_frequency=1 if launcher == "local"
                                                               else 30), start=1):
        index = jobs[job]
        try:
            state, value = job.result()
        except Exception as error:  # noqa: BLE001 - submitit's FailedJobError and a job's own exception alike
            failed.append(f"{works[index].name}: {str(error).strip().splitlines()[-1][:200]}")
            continue
        if state in ("stopped", "skipped"):  # the job's process was signalled (Slurm's preemption, a scancel)
            stopped.append(value)
        else:
            outcomes[index] = value
            if not quiet:
                print(f"{works[index].name}: done (job {job.job_id}, {count}/{len(jobs)})", file=sys.stderr)
        if request.signal_name is not None:
            stopped.append(f"stopped by {request.signal_name} while the other run jobs go on")
            break
    return failed, stopped


def report_stop(stopped: list[str]) -> str:
    message = f"{stopped[-1]}; run the same command with --resume to collect the finished runs and continue the rest"
    print(message, file=sys.stderr, flush=True)
    return message
