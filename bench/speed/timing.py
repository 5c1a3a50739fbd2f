"""How bench.perf times a step: the median of a few calls with the device's work fenced on both sides, the
matrix-multiply peak MFU is measured against where no table lists the device, and a training step (AdamW under
autocast) for any model and loss, the suite's and its peers' alike.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import torch


def synchronize(device: torch.device) -> None:
    """Wait until the device has finished what was launched: a GPU runs asynchronously, so a clock read without
    this times the launches, not the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(step: Callable[[], object], repeats: int, warmup: int = 1,
                   device: torch.device = torch.device("cpu")) -> float:
    """Median wall time of `repeats` calls after `warmup` untimed ones, each call's device work included."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def matmul_peak(dtype: torch.dtype, size: int = 2048, repeats: int = 5, device: torch.device = torch.device("cpu"),
                long_seconds: float = 0.2) -> float:
    """FLOP/s of a large square matrix product in `dtype`, the best of a few: the roof MFU is measured against where
    no table lists the device (CPUs, unknown GPUs). The product grows from 256 to `size` until one takes
    `long_seconds`: a dtype the device only emulates (bf16 on a CPU without bf16 units, about 1 GFLOP/s) is then
    measured in seconds at 512, where 2048 took 15 s a product and bench.perf minutes."""
    side = 256
    while True:
        a, b = (torch.randn(side, side, dtype=dtype, device=device) for _ in range(2))
        first = median_seconds(lambda: a @ b, 1, warmup=1, device=device)
        if side >= size or first >= long_seconds:
            break
        side *= 2
    best = min([first, *(median_seconds(lambda: a @ b, 1, warmup=0, device=device) for _ in range(repeats - 1))])
    return 2 * side ** 3 / best


def autocast(dtype: torch.dtype | None, device: torch.device = torch.device("cpu")):
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


def train_step(model: torch.nn.Module, loss_of: Callable[[], torch.Tensor], dtype: torch.dtype | None,
               device: torch.device = torch.device("cpu")) -> Callable:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True if device.type == "cuda" else None)

    def step() -> None:
        with autocast(dtype, device):
            loss = loss_of()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return step

