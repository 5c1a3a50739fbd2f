"""Live metrics of a training run, so a long run can be watched: every `log_every` steps, the loss, learning rate,
gradient norm, throughput (tokens/s per device, the whole step timed, data included), model FLOPs utilisation against
the device's peak from Lightning's table, peak memory and the loss scale, written through Fabric's loggers: CSV always
(runs/NAME/logs/from-step-S/metrics.csv, one file per session so a resumed run never overwrites what was logged),
TensorBoard where it is installed (`pip install -e ".[tensorboard]"`). Rank 0 writes; nothing here synchronises more
than the step already does (the loss was read by then), except the gradient norm, read at logging steps only.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import torch
from lightning_fabric.loggers import CSVLogger, Logger
from lightning_fabric.utilities.throughput import get_available_flops


def peak_flops(device: torch.device, precision: str) -> float | None:
    """The device's peak FLOP/s for the precision's matmuls, from Lightning's table; None where it has no entry
    (CPUs, unknown GPUs): MFU is then not reported rather than guessed."""
    if device.type != "cuda":
        return None
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16, "64-true": torch.float64}.get(precision)
    if dtype is None:  # 32-true runs its matmuls in TF32 on CUDA (bench.train.tf32_matmuls)
        dtype = "tfloat32"
    flops = get_available_flops(device, dtype)
    return float(flops) if flops else None


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 30
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the process's peak resident size (KiB on Linux)
    return kib / (2 ** 30 if sys.platform == "darwin" else 2 ** 20)


def open_loggers(run_dir: Path, first_step: int) -> list[Logger]:
    folder = f"from-step-{first_step}"
    loggers: list[Logger] = [CSVLogger(run_dir, name="logs", version=folder, flush_logs_every_n_steps=1)]
    try:
        from lightning_fabric.loggers import TensorBoardLogger

        import tensorboard  # noqa: F401  (TensorBoardLogger needs it, or tensorboardX, to write anything)
        loggers.append(TensorBoardLogger(run_dir, name="tensorboard", version=folder))
    except ImportError:
        pass
    return loggers


class LiveMetrics:
    """What fit() calls after each step; writes a row every `every` steps on rank 0."""

    def __init__(self, run_dir: Path, first_step: int, every: int, device: torch.device, precision: str,
                 world_size: int, enabled: bool) -> None:
        self.every, self.device, self.world_size = every, device, world_size
        self.loggers = open_loggers(run_dir, first_step) if enabled and every > 0 else []
        self.peak = peak_flops(device, precision)
        self.since = time.perf_counter()
        self.tokens = self.flops = 0

    def restart(self) -> None:
        """Leave out what happened since the last step (an evaluation): throughput is of training steps."""
        self.since, self.tokens, self.flops = time.perf_counter(), 0, 0

    def step(self, step: int, loss: float, lr: float, tokens: int, flops: int, grad_norm: torch.Tensor | None,
             scaler: object | None) -> None:
        self.tokens += tokens
        self.flops += flops
        if not self.loggers or step % self.every:
            return
        seconds = time.perf_counter() - self.since
        per_device_flops = self.flops / seconds / self.world_size
        row = {"loss": loss, "lr": lr, "tokens_per_second_per_device": self.tokens / seconds / self.world_size,
               "flops_per_second_per_device": per_device_flops, "peak_memory_gib": peak_memory_gib(self.device)}
        if grad_norm is not None:
            row["grad_norm"] = float(grad_norm)
        if self.peak:
            row["mfu"] = per_device_flops / self.peak
        if scaler is not None:  # 16-mixed's dynamic loss scale
            row["loss_scale"] = float(scaler.get_scale())
        for logger in self.loggers:
            logger.log_metrics(row, step=step)
        self.restart()

    def close(self) -> None:
        for logger in self.loggers:
            logger.finalize("success")
