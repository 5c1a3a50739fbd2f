"""Two CPU processes under DDP (gloo, spawned) for test_ddp.py: `python tests/training/ddp_job.py JOB OUT`.

Each rank writes what it saw under OUT as JSON; rank 0 also leaves each run's result.json there. A hang is the
caller's to catch, with a timeout: nothing here waits on its own.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
from dataclasses import replace
from pathlib import Path

import torch
from lightning_fabric import Fabric

import bench.yardsticks.probes
from backbone import ConfigError
from bench.common.stopping import RunStopped
from bench.data.corpus import load_corpus
from bench.training.distributed import agree_on_folder
from bench.training.loop import TrainingDiverged
from bench.training.recipe import RunConfig
from bench.training.runs import train_run
from bench.training.state import Context, Work
from bench.yardsticks.probes import ProbeConfig, Probes
from objectives import CausalLM, MaskedLM

SEQ_LEN, BATCH = 16, 4
DATA = "synthetic:train=64,heldout=16,words=64,lexicon=8"
# name: (spec, micro-batch); the first five are compared with one process, the pairs with each other. NSP's
# negatives borrow windows from the other process's rows of the global batch.
RUNS = {"mlm": ("mlm", None), "ar": ("ar", None), "span": ("span", None), "bernoulli": ("mlm:rule=bernoulli", None),
        "nsp": ("mlm:pair=nsp", None), "bernoulli-micro": ("mlm:rule=bernoulli", 1), "electra": ("electra", None),
        "electra-micro": ("electra", 1), "schedule": ("ar>mlm:rule=bernoulli@0.5", None)}


def config(micro_batch: int | None = None) -> RunConfig:
    return RunConfig(budget_flops=1e8, model="tiny", batch_size=BATCH, eval_windows=8, eval_points=2, lr=3e-3,
                       micro_batch=micro_batch)


def corpus():
    return load_corpus(DATA, SEQ_LEN)


def acting_forward(cls: type, call: int, action):
    """`cls.forward`, but running `action(output)` on the output of this process's `call`-th (1-based) training
    forward of objective class `cls`."""
    real, calls = cls.forward, []

    def forward(self, batch):
        output = real(self, batch)
        if self.training:
            calls.append(1)
            if len(calls) == call:
                action(output)
        return output

    return forward


def on_training_forward(cls: type, call: int, action) -> None:
    cls.forward = acting_forward(cls, call, action)  # a spawned rank of its own: nothing to restore


def counting_collectives(seen: dict) -> None:
    """Count the all-reduces each run makes, and the process groups made beside the training one."""
    real_all_reduce, real_new_group = torch.distributed.all_reduce, torch.distributed.new_group

    def all_reduce(tensor, *args, **kwargs):
        seen["all_reduces"] += 1
        return real_all_reduce(tensor, *args, **kwargs)

    def new_group(*args, **kwargs):
        seen["new_groups"] += 1
        return real_new_group(*args, **kwargs)

    torch.distributed.all_reduce, torch.distributed.new_group = all_reduce, new_group


def train(fabric: Fabric, out: Path) -> None:
    data = corpus()
    seen = {}
    counting_collectives(seen)
    for name, (spec, micro_batch) in RUNS.items():
        seen.update(all_reduces=0, new_groups=0)
        train_run(fabric, Work(spec, 0, config(micro_batch), out / name), Context(data))
        (out / name / f"collectives-rank{fabric.global_rank}.json").write_text(json.dumps(seen))
    # probes at every checkpoint and at the end: counted per rank, run on rank 0 only
    calls, real = [], bench.yardsticks.probes.run_probes
    bench.yardsticks.probes.run_probes = lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs)
    probe = ProbeConfig(train_windows=8, test_windows=8, iterations=5, finetune_steps=2, finetune_batch=4)
    train_run(fabric, Work("mlm", 0, replace(config(), probe_every_eval=True), out / "probed"),
              Context(data, [Probes(data, probe)]))
    (out / f"probes-rank{fabric.global_rank}.json").write_text(json.dumps({"calls": len(calls)}))
    wrapped = fabric.setup_module(torch.nn.Linear(2, 2))._forward_module  # the DDP module the suite's strategy builds
    (out / f"ddp-rank{fabric.global_rank}.json").write_text(json.dumps(
        {"gradient_as_bucket_view": wrapped.gradient_as_bucket_view, "broadcast_buffers": wrapped.broadcast_buffers}))


def stops(fabric: Fabric, out: Path) -> None:
    data, rank = corpus(), fabric.global_rank
    if rank == 1:  # a NaN loss on rank 1 only, at its third step
        on_training_forward(MaskedLM, 3, lambda output: setattr(output, "loss", output.loss * math.nan))
    try:
        train_run(fabric, Work("mlm", 0, config(), out / "nan"), Context(data))
        seen = {"outcome": "finished"}
    except TrainingDiverged as error:
        seen = {"outcome": "diverged", "message": str(error)}
    (out / f"nan-rank{rank}.json").write_text(json.dumps(seen))

    if rank == 1:  # SIGUSR1 to rank 1 only, during its third step
        on_training_forward(CausalLM, 3, lambda output: os.kill(os.getpid(), signal.SIGUSR1))
    try:
        train_run(fabric, Work("ar", 0, config(), out / "signal"), Context(data))
        seen = {"outcome": "finished"}
    except RunStopped as stop:
        saved = torch.load(out / "signal" / "checkpoint.pt", weights_only=True)["counters"]["step"]
        seen = {"outcome": "stopped", "code": stop.code, "message": stop.message, "saved_step": saved}
    (out / f"signal-rank{rank}.json").write_text(json.dumps(seen))


def shared(fabric: Fabric, out: Path) -> None:
    """One folder for both ranks passes; a folder per rank (as on nodes without a shared filesystem) is refused by
    both, after a short wait (a late NFS view is given a minute in real runs)."""
    bench.training.distributed.FOLDER_WAIT_SECONDS = 2
    seen = {"same": str(agree_on_folder(fabric, out / f"rank{fabric.global_rank}"))}  # rank 0's folder wins
    if fabric.global_rank == 1:  # rank 1 cannot see what rank 0 writes under "separate": another node's disk
        real_exists = Path.exists
        Path.exists = lambda path: False if path.parent.name == "separate" else real_exists(path)
    try:
        agree_on_folder(fabric, out / "separate")
        seen["separate"] = "accepted"
    except ConfigError as error:
        seen["separate"] = str(error)
    (out / f"shared-rank{fabric.global_rank}.json").write_text(json.dumps(seen))


JOBS = {"train": train, "stops": stops, "shared": shared}

if __name__ == "__main__":
    job, out = sys.argv[1], Path(sys.argv[2])
    fabric = Fabric(accelerator="cpu", devices=2,
                    strategy=bench.training.distributed.ddp_settings("ddp_spawn"))  # as the suite runs
    fabric.launch(JOBS[job], out)
