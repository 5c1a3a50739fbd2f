"""Where a comparison's runs and untrained controls execute (`executed`): here, one after another; several at once
(--jobs N, docs/scaling.md "Many runs at once"), each in a process of its own pinned to its threads (CPU) or to one
GPU, since they share nothing but data and configuration; or as Slurm jobs through submitit (--launcher slurm;
--launcher local runs each as a process of its own the same way, on this machine). A run's numbers never depend on
its neighbours: at the same thread count its result.json is the one it writes alone.

This module chooses where; the works and how one runs here (bench.orchestration.works), the pool of worker processes
(bench.orchestration.pool) and the Slurm jobs (bench.orchestration.slurm) are modules of their own.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Sequence

import torch

from bench.orchestration.memory import device_memory_bytes, step_memory
from bench.orchestration.planning import Plan
from bench.orchestration.pool import Slots, run_pooled
from bench.orchestration.slurm import submitted
from bench.orchestration.works import Outcome, run_here
from bench.training.state import Context, Work

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


def executed(fabric, works: Sequence[Work], plan: Plan) -> list[Outcome]:
    """Each work's outcome, where the comparison's plan runs them: through submitit (--launcher), in a pool of
    processes (more than one at once: choose_slots) or here, one after another. A work that finished before is read
    back where --resume asked; a run that diverged is its record, and the others go on."""
    hardware, progress = plan.config.hardware, not plan.config.output.quiet
    context = Context(plan.corpus, tuple(plan.yardsticks), hardware.accelerator, hardware.precision)
    if hardware.launcher != "pool" and not all(work.finished() for work in works):
        cpus = hardware.slurm_cpus_per_job or hardware.threads_per_run or 1
        return submitted(fabric, works, replace(context, threads=cpus), hardware, plan.out, not progress)
    slots = choose_slots(plan, fabric.device, works) if fabric.world_size == 1 else Slots(1)
    if slots.jobs > 1:
        return run_pooled(works, replace(context, threads=slots.threads), slots, not progress)
    return run_here(fabric, works, context, progress, slots.threads or hardware.threads_per_run)


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
