"""Slurm jobs: one job per run, this command waiting for them, gathering their results and writing the report
(--launcher slurm; --launcher local, the same through submitit's local executor, on this machine). Each job writes
its result.json into its run's folder, so a rerun with --resume reads the finished ones back, waits for those still
queued or running, and resubmits the rest (an interrupted run continues from its checkpoint). One large run across
GPUs and nodes is not this: it is Fabric DDP (srun or torchrun, docs/scaling.md).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from bench.common.files import read_json, write_json
from bench.common.stopping import EXIT_STOPPED, RunStopped, current_stop_request, stop_on_signals
from bench.orchestration.config import HardwareConfig, on_cpu
from bench.orchestration.pool import run_isolated
from bench.orchestration.works import Outcome, run_here
from bench.training.state import Context, Work


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
              quiet: bool) -> list[Outcome]:
    """Every work's outcome: finished ones read back here, live jobs of an earlier session waited for, the others
    submitted (as one job array). Jobs that failed are listed once all are done, and the command exits 1."""
    finished = [index for index, work in enumerate(works) if work.finished()]
    outcomes: list = [None] * len(works)
    for index, read_back in zip(finished, run_here(fabric, [works[index] for index in finished], context, False,
                                                   context.threads)):
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
        record = work.run_dir / JOB_RECORD
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
        works[index].run_dir.mkdir(parents=True, exist_ok=True)
        write_json(works[index].run_dir / JOB_RECORD, {"job_id": job.job_id, "folder": str(executor.folder)})
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

