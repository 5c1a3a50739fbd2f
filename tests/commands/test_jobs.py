"""Runs as independent jobs (bench.orchestration.jobs): several at once, or each a process of its own through
submitit's local executor, give the results one after another gives, at the same thread count per run."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from bench.common.cli import run
from bench.common.stopping import EXIT_STOPPED
from bench.compare import main, parse_config
from bench.orchestration.jobs import auto_jobs, choose_slots
from bench.orchestration.pipeline import control_works, measurement, run_works
from bench.orchestration.planning import make_plan
from bench.orchestration.pool import Slots, _pooled, _pools, context_file, pool, run_pooled, signals_held
from bench.training.distributed import make_fabric
from bench.training.recipe import RunConfig
from bench.training.state import Context, Work

TINY = ["--model", "tiny", "--seq-len", "32", "--batch-size", "4", "--budget", "3e8", "--eval-points", "3",
        "--data", "synthetic:train=64,heldout=16,words=64,lexicon=8", "--quiet", "--accelerator", "cpu",
        "--downstream", "synthetic:states,size=64,synthetic:topic,size=16", "--finetune-steps", "2",
        "--finetune-lrs", "1e-3", "--objectives", "mlm,ar", "--seeds", "2", "--threads-per-run", "1"]
# what may differ between two sessions of the same comparison: the clock, and the words of the command
TIMINGS = ("wall_seconds", "train_seconds", "tokens_per_second", "probe_seconds", "downstream_seconds",
           "final_seconds", "checkpoint_seconds", "revision", "written", "command")


def numbers(value: object) -> object:
    if isinstance(value, dict):
        return {key: numbers(item) for key, item in value.items() if key not in TIMINGS}
    if isinstance(value, list):
        return [numbers(item) for item in value]
    return value


def results(folder: Path) -> dict:
    return numbers(json.loads((folder / "results.json").read_text()))


@pytest.fixture(scope="module")
def one_by_one(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("jobs") / "one-by-one"
    main([*TINY, "--jobs", "1", "--out", str(out)])
    return out


@pytest.mark.slow
def test_runs_at_once_give_the_results_of_runs_one_by_one(one_by_one, tmp_path, capsys):
    main([*TINY, "--jobs", "2", "--out", str(tmp_path / "at-once")])
    assert results(tmp_path / "at-once") == results(one_by_one)
    # and a resumed comparison reads every run back rather than training it again
    main([*TINY, "--jobs", "2", "--out", str(tmp_path / "at-once"), "--resume"])
    assert results(tmp_path / "at-once") == results(one_by_one)


@pytest.mark.slow
def test_runs_as_submitit_jobs_give_the_results_of_runs_in_this_process(one_by_one, tmp_path):
    pytest.importorskip("submitit")
    out = tmp_path / "local"
    main([*TINY, "--launcher", "local", "--out", str(out)])
    assert results(out) == results(one_by_one)
    assert list((out / "slurm").glob("*_log.out"))  # submitit's logs, beside the runs
    assert all((out / "runs" / name / "slurm_job.json").exists() for name in ("mlm-seed0", "ar-seed1"))


@pytest.mark.parametrize("args, message", [
    (["--jobs", "2", "--devices", "2"], "--jobs 2 runs each run on one device; --devices 2"),
    (["--jobs", "0"], "--jobs must be >= 1, got 0"),
    (["--threads-per-run", "0"], "--threads-per-run must be >= 1"),
    (["--slurm-partition", "gpu"], "--slurm-partition needs --launcher slurm"),
    (["--launcher", "slurm"], "--launcher slurm: no sbatch"),
])
def test_job_flags_that_cannot_work_are_one_line(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    with pytest.raises(SystemExit) as exit_info:
        run(main, [*TINY, *args, "--out", str(tmp_path / "out")])
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_launcher_without_submitit_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if not installed
    with pytest.raises(SystemExit) as exit_info:
        run(main, [*TINY, "--launcher", "local", "--out", str(tmp_path / "out")])
    stderr = capsys.readouterr().err
    assert exit_info.value.code == 2 and stderr.strip() == \
        "error: --launcher local needs submitit: pip install -e '.[slurm]'"


def test_by_default_short_runs_go_one_by_one_and_long_ones_one_per_core(tmp_path, monkeypatch):
    monkeypatch.setattr("bench.orchestration.jobs.cpu_cores", lambda: 8)
    fabric = make_fabric("cpu", launch=False)
    for budget, jobs in (("3e8", 1), ("1e12", 4)):  # the workers' start would cost more than 4 short runs gain
        plan = make_plan(parse_config([*TINY, "--budget", budget, "--out", str(tmp_path / budget)]), fabric)
        assert choose_slots(plan, fabric.device, run_works(plan)).jobs == jobs


def test_runs_and_controls_go_to_the_workers_as_one_queue(tmp_path, monkeypatch):
    # a worker freed while the last runs train starts a control instead of idling until every run is done: the
    # default's 15 runs on 2 cores left one core idle for the last run's 49 s when the controls were a second queue
    queued = []

    class Queued(Exception):
        pass

    def executed(fabric, works, plan):
        queued.append([work.name for work in works])
        raise Queued

    monkeypatch.setattr("bench.orchestration.pipeline.executed", executed)
    with pytest.raises(Queued):
        main([*TINY, "--out", str(tmp_path)])
    assert queued == [["mlm-seed0", "mlm-seed1", "ar-seed0", "ar-seed1", "untrained-bidirectional-seed0",
                       "untrained-bidirectional-seed1", "untrained-causal-seed0", "untrained-causal-seed1"]]
    # the outcomes come back in the queue's order: runs, the diverged ones apart, then the controls
    fabric = make_fabric("cpu", launch=False)
    plan = make_plan(parse_config([*TINY, "--out", str(tmp_path / "split")]), fabric)
    works = run_works(plan) + control_works(plan)
    outcomes = [(f"{work.kind} {work.name}", {"diverged": True} if work.name == "ar-seed1" else None)
                for work in works]
    monkeypatch.setattr(type(fabric), "is_global_zero", property(lambda self: False))
    assert measurement(fabric, plan, {}, works, outcomes).diverged == [{"diverged": True}]


@pytest.mark.parametrize("cores, free_gib, jobs", [(16, 140, 16), (64, 140, 16), (4, 140, 4), (16, 2.5, 4), (16, 1, 2)])
def test_on_gpus_small_runs_share_a_device_up_to_the_cores_and_memory(cores, free_gib, jobs, tmp_path, monkeypatch):
    # two GPUs, steps of 2,048 tokens (too few to keep one busy): PER_GPU_SMALL (8) each, fewer where the cores
    # that launch their kernels or the memory (each run's step + its CUDA context) run out, never fewer than one
    monkeypatch.setattr("bench.orchestration.jobs.cpu_cores", lambda: cores)
    monkeypatch.setattr("bench.orchestration.jobs.device_memory_bytes", lambda device: int(free_gib * 2 ** 30))
    need = type("Need", (), {"total": 2 ** 28})
    monkeypatch.setattr("bench.orchestration.jobs.step_memory", lambda *args, **kwargs: need)
    fabric = make_fabric("cpu", launch=False)
    plan = make_plan(parse_config([*TINY, "--budget", "1e12", "--batch-size", "64", "--out", str(tmp_path)]), fabric)
    assert auto_jobs(plan, torch.device("cuda"), ("0", "1")) == jobs


@pytest.mark.slow
def test_a_stop_signal_reaches_the_runs_at_once_and_resume_finishes_them(one_by_one, tmp_path):
    out = tmp_path / "stopped"
    command = [sys.executable, "-m", "bench.compare", *TINY, "--jobs", "2", "--out", str(out)]
    # a session of its own, so that a hung command and its workers can be killed whole (the test fails either way)
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(out.glob("runs/*/curve.jsonl")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)  # as a scheduler would, while the workers train
    try:
        _, stderr = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"the stopped command did not exit within 120 s; its stderr:\n{process.communicate()[1]}")
    assert process.returncode == EXIT_STOPPED, stderr
    assert "run the same command with --resume" in stderr.strip().splitlines()[-1]
    assert not (out / "results.json").exists()
    main([*TINY, "--jobs", "2", "--out", str(out), "--resume"])
    assert results(out) == results(one_by_one)


# a context no work reads: the works below end before they would (skipped, or their worker killed)
UNREAD = Context(corpus=None, yardsticks=(), accelerator="cpu", precision="32-true", threads=1)


def mlm_work(seed: int, folder: Path) -> Work:
    return Work("mlm", seed, RunConfig(budget_flops=1.0, model="tiny", lr=1e-3), folder / f"mlm-seed{seed}")


@pytest.fixture
def no_pool() -> None:
    """The command's pool shut down (earlier tests leave theirs), so the next one starts its workers afresh."""
    for started in _pools.values():
        started.shutdown()
    _pools.clear()


@pytest.mark.slow  # a second process
def test_a_worker_signalled_while_it_starts_skips_its_work_instead_of_breaking_the_pool(no_pool, tmp_path):
    # the driver forwards a stop to every worker; one still importing torch must not die of it (a broken pool
    # left the command waiting forever at exit): it starts with the signal held and answers once its handler is in
    work = mlm_work(0, tmp_path)
    executor = pool(Slots(jobs=1, threads=1))
    try:
        with context_file(UNREAD) as path:
            with signals_held():
                future = executor.submit(_pooled, path, work)
            (worker,) = executor._processes.values()
            os.kill(worker.pid, signal.SIGTERM)  # well within the worker's start, which takes seconds
            state, message, _ = future.result(timeout=120)
        assert (state, message) == ("skipped", "stopped by SIGTERM before mlm-seed0")
    finally:
        _pools.clear()
        executor.shutdown(wait=True)


def test_a_worker_killed_by_the_system_ends_the_command_in_one_line_naming_the_unfinished_runs(no_pool, tmp_path):
    def kill_the_worker() -> None:  # as the kernel's OOM killer would, while the worker still starts
        while not any(getattr(started, "_processes", None) for started in list(_pools.values())):
            time.sleep(0.01)
        for process in list(next(iter(_pools.values()))._processes.values()):
            os.kill(process.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_worker)
    killer.start()
    with pytest.raises(SystemExit) as exit_info:
        run_pooled([mlm_work(0, tmp_path), mlm_work(1, tmp_path)], UNREAD, Slots(jobs=1, threads=1), quiet=True)
    killer.join()
    message = str(exit_info.value.code)
    assert message.startswith("a worker process ended abruptly") and "mlm-seed0, mlm-seed1" in message
    assert "--resume" in message and not _pools
