"""Two processes under DDP on the CPU (gloo): what one process computes, two compute too, and they stop together.

Each job runs in a subprocess (ddp_job.py, spawning its two ranks) under a timeout, so a hang in a collective
fails the test instead of blocking the suite.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ddp_job import RUNS, config, corpus

from bench.common.stopping import EXIT_STOPPED
from bench.training.distributed import make_fabric
from bench.training.runs import train_run
from bench.training.state import Context, Work

pytestmark = pytest.mark.slow  # two processes under gloo DDP, in subprocesses

TIMEOUT = 240
COUNTS = ("steps", "flops", "tokens", "supervised_positions")


def run_job(job: str, out: Path) -> str:
    # one thread per rank: two ranks' thread pools on a small machine would stall each other
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, str(Path(__file__).with_name("ddp_job.py")), job, str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment,
                               start_new_session=True)  # its own process group: a timeout kills the ranks too
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"the two-process {job} job did not finish in {TIMEOUT} s: a rank waits in a collective")
    assert process.returncode == 0, output
    return output


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("ddp")
    output = run_job("train", out)
    assert "is deprecated" not in output  # DDP's buffer switch is named as this torch names it
    return {name: {**json.loads((out / name / "result.json").read_text()), "_out": str(out)} for name in RUNS}


@pytest.mark.parametrize("name", ["mlm", "ar", "span", "bernoulli", "nsp", "schedule"])
def test_two_processes_train_like_one(name, two_processes, tmp_path):
    # token-mean objectives: the same global batch, split over two processes, gives the same curve (ELECTRA's
    # samples and dropout are drawn per process, so it is compared only with itself, below)
    spec, micro_batch = RUNS[name]
    one = train_run(make_fabric(), Work(spec, 0, config(micro_batch), tmp_path), Context(corpus())).to_json()
    two = two_processes[name]  # as its result.json holds it
    assert {k: two[k] for k in COUNTS} == {k: one[k] for k in COUNTS}
    assert [row["step"] for row in two["curve"]] == [row["step"] for row in one["curve"]]
    for a, b in zip(two["curve"], one["curve"]):
        assert a["metrics"]["loss"] == pytest.approx(b["metrics"]["loss"], rel=1e-4)
        assert a["metrics"]["accuracy"] == pytest.approx(b["metrics"]["accuracy"], abs=1e-6)


def test_probes_run_on_rank_0_only(two_processes, tmp_path):
    out = Path(two_processes["mlm"]["_out"])
    calls = [json.loads((out / f"probes-rank{rank}.json").read_text())["calls"] for rank in (0, 1)]
    result = json.loads((out / "probed" / "result.json").read_text())
    assert calls == [1, 0]  # the final probes on rank 0; none on rank 1
    assert not any("probes" in row for row in result["curve"])  # diagnostics: no curve
    assert "replaced_word_finetuned" in result["probes"]


def test_ddp_keeps_gradients_in_its_buckets_and_does_not_rebroadcast_buffers(two_processes):
    # the runs above trained like one process with these settings: RoPE's tables are each rank's own, identical
    out = Path(two_processes["mlm"]["_out"])
    for rank in (0, 1):
        seen = json.loads((out / f"ddp-rank{rank}.json").read_text())
        assert seen == {"gradient_as_bucket_view": True, "broadcast_buffers": False}
    kwargs = make_fabric("cpu", devices=2, strategy="ddp", launch=False).strategy._ddp_kwargs
    assert kwargs.pop("gradient_as_bucket_view") is True
    assert kwargs in ({"broadcast_buffers": False}, {"forward_sync_buffers": False})  # torch 2.13 renamed it


@pytest.mark.parametrize("name", ["bernoulli", "electra"])
def test_micro_batches_under_ddp_train_like_the_whole_share(name, two_processes):
    whole, micro = two_processes[name], two_processes[f"{name}-micro"]
    assert {k: micro[k] for k in COUNTS} == {k: whole[k] for k in COUNTS}
    for a, b in zip(micro["curve"], whole["curve"], strict=True):
        assert a["step"] == b["step"] and a["metrics"]["loss"] == pytest.approx(b["metrics"]["loss"], rel=1e-5)


def test_a_nan_or_a_signal_on_one_rank_stops_both_at_the_same_step(tmp_path):
    run_job("stops", tmp_path)
    nan = [json.loads((tmp_path / f"nan-rank{rank}.json").read_text()) for rank in (0, 1)]
    assert nan[0] == nan[1] and nan[0]["outcome"] == "diverged"  # the same one line on both ranks
    assert nan[0]["message"].startswith("mlm seed 0 diverged: the loss became nan at step 2 (last finite loss ")
    assert len(nan[0]["message"].splitlines()) == 1
    stopped = [json.loads((tmp_path / f"signal-rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [s["outcome"] for s in stopped] == ["stopped", "stopped"]
    assert [s["code"] for s in stopped] == [EXIT_STOPPED, 0]  # the command's status comes from rank 0
    assert stopped[0]["saved_step"] == stopped[1]["saved_step"] == 3  # the signal came during step 3 of rank 1
    assert stopped[1]["message"].startswith("stopped by SIGUSR1 after step 3 of ar seed 0")
    assert stopped[0]["message"].startswith("stopped by a signal to another process after step 3 of ar seed 0")


def test_the_output_folder_is_rank_0s_and_must_be_shared(tmp_path):
    run_job("shared", tmp_path)
    seen = [json.loads((tmp_path / f"shared-rank{rank}.json").read_text()) for rank in (0, 1)]
    assert seen[0]["same"] == seen[1]["same"] == str(tmp_path / "rank0")  # e.g. default folders named by clock
    assert seen[0]["separate"] == seen[1]["separate"]  # both refuse, with the same line
    assert seen[0]["separate"].startswith(f"--out {tmp_path / 'separate'} is not one folder that every process sees")


def test_a_step_makes_one_collective_on_the_training_backend(two_processes):
    # the next step's counts ride in the step's own all-reduce: no host-side (gloo) group beside NCCL, and one
    # all-reduce per step (a cool-down branch's steps included), plus the first step's counts, the check that the
    # folder is shared and the end's stop check; and one per checkpoint evaluation, whether a stop signal dropped
    # its row on any process (each row of the curve is one), so that every process saves the same state
    out = Path(two_processes["mlm"]["_out"])
    for name in RUNS:
        steps = two_processes[name]["steps"] + two_processes[name]["cooldown_steps"]
        evaluations = len(two_processes[name]["curve"])
        for rank in (0, 1):
            seen = json.loads((out / name / f"collectives-rank{rank}.json").read_text())
            assert seen == {"all_reduces": steps + 3 + evaluations, "new_groups": 0}, (name, rank)


def test_lightnings_tf32_advice_is_dropped_and_its_other_lines_are_not(monkeypatch):
    # Fabric's start on a GPU with tensor cores advises TF32 before the run sets it itself (configure_matmuls). The
    # records are read on Lightning's own logger: it need not propagate them to the root, where caplog listens
    import logging

    import lightning_fabric.accelerators.cuda as cuda
    import torch
    from lightning_fabric.utilities.rank_zero import rank_zero_info
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(cuda, "_is_ampere_or_later", lambda device=None: True)
    logger, records, handler = logging.getLogger("lightning_fabric.utilities.rank_zero"), [], logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)
    monkeypatch.setattr(logger, "level", logging.INFO)
    try:
        cuda._check_cuda_matmul_precision(torch.device("cuda", 0))
        rank_zero_info("a line of Lightning's own")
    finally:
        logger.removeHandler(handler)
    assert [record.getMessage() for record in records] == ["a line of Lightning's own"]
