"""Processes and devices: Fabric and its launchers (torchrun, Slurm), the one all-reduce a step makes
(`agree`: the loss, the stop and save flags and the next step's counts), the output folder every process must
see, and the stop signals every process agrees on.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch
from lightning_fabric import Fabric
from lightning_fabric.strategies import DDPStrategy
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from backbone import ConfigError
from bench.common.stopping import EXIT_STOPPED, STOP_SIGNALS, RunStopped, StopRequest
from bench.training.batches import StepCounts


class WithoutTF32Advice(logging.Filter):
    """Drops the advice Lightning logs when a Fabric starts on a GPU with tensor cores and fp32 matmuls are still at
    "highest": it comes before the run sets them itself (bench.training.recipe.configure_matmuls: TF32 under
    32-true), so it was noise at the top of every GPU comparison's log, and advice against the run's own setting."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "set_float32_matmul_precision" not in record.getMessage()


logging.getLogger("lightning_fabric.utilities.rank_zero").addFilter(WithoutTF32Advice())


def make_fabric(accelerator: str = "cpu", devices: int | str = 1, num_nodes: int = 1, strategy: str = "auto",
                precision: str = "32-true", launch: bool = True) -> Fabric:
    """Fabric for these flags; with launch=False the processes are not started yet, so checks that can fail run
    once, in one process, and print one line."""
    problem = slurm_without_srun(os.environ, devices, num_nodes)
    if problem:
        raise ConfigError(problem)
    try:
        fabric = Fabric(accelerator=accelerator, devices=devices, num_nodes=num_nodes, strategy=ddp_settings(strategy),
                        precision=precision)
    except (ValueError, RuntimeError, TypeError) as error:  # Fabric reports bad flags this way
        raise ConfigError(f"Fabric: {str(error).splitlines()[0]}") from None
    if launch:
        launch_processes(fabric)
    return fabric


def slurm_without_srun(environ: Mapping[str, str], devices: int | str, num_nodes: int) -> str | None:
    """Why this command cannot run as started, inside a Slurm job without srun, or None. Fabric takes SLURM_NTASKS
    (set in an sbatch job's own shell) to mean Slurm started that many processes, and the one process that is there then
    waits for the others, for NCCL's or gloo's timeout (about 30 min). srun sets SLURM_STEP_NUM_TASKS for the tasks
    it starts; Fabric ignores Slurm in a job named bash or interactive (salloc's shell, `--job-name interactive`)."""
    if "SLURM_NTASKS" not in environ or "SLURM_STEP_NUM_TASKS" in environ or "TORCHELASTIC_RUN_ID" in environ:
        return None
    if environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None
    tasks = environ["SLURM_NTASKS"]
    if tasks == "1" and str(devices) == "1" and num_nodes == 1:
        return None  # one process, and Slurm's world of one agrees
    per_node = devices if str(devices).isdigit() else "DEVICES_PER_NODE"
    return (f"inside a Slurm job (SLURM_NTASKS={tasks}) the processes must be started by srun, one per device: "
            f"srun --ntasks-per-node {per_node} python -m bench.compare ... (run from the sbatch script; started "
            "without srun, this process would wait about 30 min for processes that never come)")


TORCHRUN_FORWARDS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"  # what torchrun's agent handles unless told otherwise


def unforwarded_stop_signals(environ: Mapping[str, str]) -> list[str]:
    """The stop signals a torchrun agent would not pass on to this worker: one it does not handle ends the agent,
    and the workers with it, mid-step. A torchrun with --signals-to-handle records it in the workers' environment;
    older ones handle the default four only."""
    if "TORCHELASTIC_RUN_ID" not in environ:
        return []
    forwarded = {name.strip() for name in environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", TORCHRUN_FORWARDS).split(",")}
    return [signal.Signals(number).name for number in STOP_SIGNALS if signal.Signals(number).name not in forwarded]


def ddp_settings(strategy: str) -> object:
    """"ddp" (and "ddp_spawn", which the tests launch from pytest) as a DDPStrategy with the suite's settings; any
    other strategy as named. Gradients are views of DDP's all-reduce buckets, so no step copies them into and out of
    the buckets; buffers are not re-broadcast before every forward, since the only ones are RoPE's tables, which each
    rank builds from the same config (and a resumed run reloads nothing else)."""
    if strategy not in ("ddp", "ddp_spawn"):
        return strategy
    return DDPStrategy(start_method="spawn" if strategy == "ddp_spawn" else "popen", gradient_as_bucket_view=True,
                       **no_forward_buffer_sync())


def no_forward_buffer_sync() -> dict[str, bool]:
    """DDP's switch for re-broadcasting buffers before every forward: torch 2.13 renamed broadcast_buffers (which
    now warns on every launch) to forward_sync_buffers, which still syncs them once at init, harmless here."""
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def launch_processes(fabric: Fabric) -> None:
    if os.environ.get("LT_CLI_USED", "0") != "1":  # `fabric run` has launched the processes already
        fabric.launch()


def step_counts(fabric: Fabric, local: StepCounts) -> StepCounts:
    """The global batch's counts from this process's: an exact (int64) all-reduce on the training device, for a
    step whose counts did not ride in the previous step's all-reduce (a run's first step, a resumed run's)."""
    if fabric.world_size == 1:
        return local
    summed = torch.tensor(local.values(), dtype=torch.long).to(fabric.device)
    torch.distributed.all_reduce(summed)
    return local.with_values(summed.tolist())


@dataclass(frozen=True)
class Agreement:
    """What every process knows after a step's all-reduce."""

    loss: float  # the global batch's
    stop: bool  # whether any process was asked to stop
    save: bool  # whether any wants to save
    ahead: StepCounts | None  # the next step's global counts, when its local ones were given


HALF = 2 ** 32


def agree(fabric: Fabric, loss_part: Tensor, stop: bool, save: bool, ahead: StepCounts | None = None) -> Agreement:
    """The step's only synchronisation: the processes' loss parts summed (a NaN or inf on one reaches all), their
    requests or-ed and the next step's local counts (`ahead`) summed, in one all-reduce, read with one transfer to
    the host. Agreeing is what lets every process stop at the same step; one that stopped alone would leave the
    others waiting in a collective."""
    if fabric.world_size == 1:
        return Agreement(loss_part.item(), stop, save, ahead)
    # float64 adds integers exactly below 2**53, and a step's FLOPs pass that at scale: each count travels as two
    # 32-bit halves, exact summed over up to 2**20 processes. The values are filled on the device
    # (torch.tensor(list, device=cuda) would be a blocking copy), and the all-reduce is torch's own: Fabric's runs a
    # barrier before it, a second wait at every step.
    halves = [half for count in (ahead.values() if ahead else []) for half in divmod(count, HALF)]
    loss_part = loss_part.reshape(1).double()
    values = torch.cat([loss_part, *(loss_part.new_full((1,), float(value)) for value in (stop, save, *halves))])
    torch.distributed.all_reduce(values, op=torch.distributed.ReduceOp.SUM)
    total, stops, saves, *summed = values.tolist()
    counts = [int(high) * HALF + int(low) for high, low in zip(summed[::2], summed[1::2])]
    return Agreement(total, stops > 0, saves > 0, ahead.with_values(counts) if ahead else None)


def agree_on_folder(fabric: Fabric, out: Path) -> Path:
    """Rank 0's output folder for every process (a default folder is named by each process's own clock), checked to
    be one folder that every process sees: rank 0 decides what is finished and writes, the others read its
    checkpoints. Rank 0 leaves a marker; a process that cannot see it is on another filesystem."""
    out = Path(fabric.broadcast(str(out.absolute()), src=0))
    if fabric.world_size == 1:
        return out
    marker = out / f".shared-{fabric.broadcast(uuid.uuid4().hex, src=0)}"
    if fabric.is_global_zero:
        out.mkdir(parents=True, exist_ok=True)
        marker.touch()
    fabric.barrier()
    seen = fabric.all_reduce(torch.tensor(float(sees(marker)), device=fabric.device), reduce_op="min")
    fabric.barrier()
    if fabric.is_global_zero:
        marker.unlink()
    if seen.item() < 1:
        raise ConfigError(f"--out {out} is not one folder that every process sees (waited {FOLDER_WAIT_SECONDS:g} s); "
                          "on several nodes, give an --out on a filesystem they all share")
    return out


FOLDER_WAIT_SECONDS = 60.0  # an NFS client keeps an earlier "not there" for up to its acdirmax, 30-60 s by default


def sees(path: Path, poll_seconds: float = 1.0) -> bool:
    """Whether this process sees `path`, waiting up to FOLDER_WAIT_SECONDS for it: on NFS a folder this node looked
    at before rank 0 wrote into it can stay cached as it was. Listing the folder makes the client read it again."""
    deadline = time.monotonic() + FOLDER_WAIT_SECONDS
    while True:
        try:
            os.listdir(path.parent)
        except OSError:
            pass
        if path.exists():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_seconds)


# --- Signals (bench.common.stopping): every process agrees on a stop, at points where all of them pass.


def any_process(fabric: Fabric, flag: bool) -> bool:
    """Whether `flag` holds on any process, the same answer on every process (a collective: call it where all of
    them pass)."""
    if fabric.world_size == 1:
        return flag
    return bool(fabric.all_reduce(torch.tensor(float(flag), device=fabric.device), reduce_op="max").item())


def stop_agreed(fabric: Fabric, request: StopRequest) -> bool:
    """Whether any process was asked to stop, the same answer on every process (a collective)."""
    return any_process(fabric, request.signal_name is not None)


def stop_message(fabric: Fabric, where: str, signal_name: str | None) -> RunStopped:
    message = (f"stopped by {signal_name or 'a signal to another process'} {where}; run the same command with "
               "--resume to continue")
    if fabric.is_global_zero:
        print(message, file=sys.stderr, flush=True)
    return RunStopped(message, EXIT_STOPPED if fabric.is_global_zero else 0)
