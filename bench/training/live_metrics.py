"""Live metrics of a training run, so a long run can be watched: every `log_every` steps, the loss, learning rate,
gradient norm, throughput (tokens/s per device, the whole step timed, data included), model FLOPs utilisation against
the device's dense peak (the suite's table of datasheet figures, then Lightning's), peak memory and the loss scale,
written through Fabric's loggers: CSV always (runs/NAME/logs/from-step-S/metrics.csv, one file per session so a
resumed run never overwrites what was logged), TensorBoard where it is installed (`pip install -e ".[tensorboard]"`).
Rank 0 writes; nothing here synchronises more than the step already does (the loss was read by then), except the
gradient norm, read at logging steps only.
"""

from __future__ import annotations

import re
import resource
import sys
import time
from pathlib import Path

import torch
from lightning_fabric.loggers import CSVLogger, Logger
from lightning_fabric.utilities.throughput import get_available_flops


# Dense peak FLOP/s of the matrix units per device and the dtype each precision's matmuls run in (32-true runs in TF32
# on CUDA: bench.training.recipe.tf32_matmuls; 64-true on the FP64 tensor cores), from NVIDIA's datasheets, never the
# "with sparsity" figures: H100 and H200 Tensor Core GPU datasheets (SXM, PCIe, NVL), A100 (SXM and PCIe alike), L4,
# L40S, L40, A10 / A10G, V100 (SXM2; no TF32 or bf16) and T4 (no TF32 or bf16). Lightning's own table names H200 only as
# "h200 sxm1" / "h200 nvl1" (the datasheet's footnote marks), while the device reports "NVIDIA H200", and gives H100 NVL
# its sparse figure: the suite's table comes first, Lightning's is the fallback. Patterns are tried in order against the
# lower-cased device name, the more specific first.


PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"h200.*nvl", {"bf16": 835e12, "fp16": 835e12, "tf32": 417.5e12, "fp64": 60e12}),
    (r"h200", {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp64": 67e12}),
    (r"h100.*nvl", {"bf16": 835e12, "fp16": 835e12, "tf32": 417.5e12, "fp64": 60e12}),
    (r"h100.*pcie", {"bf16": 756e12, "fp16": 756e12, "tf32": 378e12, "fp64": 51e12}),
    (r"h100", {"bf16": 989.4e12, "fp16": 989.4e12, "tf32": 494.7e12, "fp64": 67e12}),  # SXM: "NVIDIA H100 80GB HBM3"
    (r"a100", {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp64": 19.5e12}),
    (r"l40s", {"bf16": 362.05e12, "fp16": 362.05e12, "tf32": 183e12}),
    (r"\bl40\b", {"bf16": 181.05e12, "fp16": 181.05e12, "tf32": 90.5e12}),
    (r"\bl4\b", {"bf16": 121e12, "fp16": 121e12, "tf32": 60e12}),
    (r"\ba10g?\b", {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12}),
    (r"v100", {"fp16": 125e12, "tf32": 15.7e12, "fp64": 7.8e12}),  # no TF32: 32-true runs on the fp32 units
    (r"\bt4\b", {"fp16": 65e12, "tf32": 8.1e12}),  # likewise
)
MATMUL_DTYPE = {"bf16-mixed": "bf16", "16-mixed": "fp16", "32-true": "tf32", "64-true": "fp64"}


def peak_flops(device_name: str, precision: str) -> float | None:
    """The dense peak FLOP/s of a GPU named `device_name` (as torch.cuda.get_device_name gives it) for the matmuls
    of `precision`, from the suite's table; None where it has no entry."""
    name = device_name.lower()
    for pattern, peaks in PEAKS:
        if re.search(pattern, name):
            return peaks.get(MATMUL_DTYPE.get(precision, ""))
    return None


def device_peak(device: torch.device, precision: str) -> tuple[float, str] | None:
    """(peak FLOP/s, where it comes from) for the device a run is on: the suite's table, then Lightning's; None on
    CPUs and unknown GPUs, where MFU is then not reported rather than guessed."""
    if device.type != "cuda":
        return None
    found = peak_flops(torch.cuda.get_device_name(device), precision)
    if found:
        return found, "the suite's table"
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16, "64-true": torch.float64}.get(precision,
                                                                                                   "tfloat32")
    flops = get_available_flops(device, dtype)
    return (float(flops), "Lightning's table") if flops else None


def peak_memory_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 30
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the process's peak resident size (KiB on Linux)
    return kib / (2 ** 30 if sys.platform == "darwin" else 2 ** 20)


def open_loggers(run_dir: Path, first_step: int) -> list[Logger]:
    folder = f"from-step-{first_step}"
    loggers: list[Logger] = [CSVLogger(run_dir, name="logs", version=folder, flush_logs_every_n_steps=1)]
    try:
        import tensorboard  # noqa: F401  (TensorBoardLogger needs it, or tensorboardX, to write anything)
        from lightning_fabric.loggers import TensorBoardLogger
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
        self.peak = (device_peak(device, precision) or (None,))[0]
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
