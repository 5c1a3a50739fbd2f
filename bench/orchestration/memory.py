"""Will a training step fit on the device? An analytic estimate of what a step keeps (activations, heads, one chunk
of logits, the optimizer state), checked against free memory before anything is launched (bench.orchestration.planning),
and what bench.orchestration.jobs divides among runs that share a device.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from backbone import ConfigError, Transformer
from backbone.fused_loss import chunk_rows
from objectives import Objective


def device_memory_bytes(device: torch.device) -> int:
    """Memory free for this process now: on CUDA what the driver reports free (this process's context, other
    processes' use and the allocator's reserve already taken), on a CPU the kernel's MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


ALLOCATOR_SLACK = 1.10  # the caching allocator's fragmentation on top of the live tensors, about 5-15 % in training


@dataclass(frozen=True)
class StepMemory:
    """What one training step holds at its peak, in bytes, as check_memory estimates it."""

    activations: int  # what the transformer stacks keep for the backward pass
    heads: int  # what the heads and the fused vocabulary loss keep (its gradient buffers)
    chunk: int  # the fused loss's chunk of logits, alive while the loss is computed
    state: int  # fp32 weights, gradients and AdamW's two moments, and autocast's half copies of the weights

    @property
    def saved(self) -> int:
        """What autograd holds for the backward pass (tests/training/test_train.py measures it)."""
        return self.activations + self.heads

    @property
    def total(self) -> int:
        # DDP adds no gradient copy: the gradients are views of its all-reduce buckets (ddp_settings)
        return int((self.saved + self.chunk) * ALLOCATOR_SLACK) + self.state


def step_memory(objective: Objective, windows: int, seq_len: int, precision: str, device: torch.device,
                checkpointing: bool = False) -> StepMemory:
    """The peak memory of a training step of `windows` windows per forward; the objective may be on the meta
    device. Bounds rather than guesses where an objective's shape is not known here: each stack's head is counted
    as a vocabulary loss (ELECTRA's discriminator has a smaller one) with every position supervised."""
    value_bytes = 8 if precision.startswith("64") else 2 if "16" in precision else 4
    mixed = precision.endswith("-mixed")
    stacks = [stack for stack in objective.modules() if isinstance(stack, Transformer)]
    activations = sum(stack.activation_bytes(windows, seq_len, value_bytes, mixed, checkpointing) for stack in stacks)
    vocab = stacks[0].config.vocab_size
    float_bytes = max(4, value_bytes)  # the loss's buffers are fp32 at least (backbone.fused_loss)
    # the head's input and output, the gradients of the hidden rows and of the projection the loss keeps, and one
    # chunk of fp32 logits with their gradient cast to the compute dtype: no more rows than the step has positions
    # (a GPU's chunk, 2^28 bytes of fp32 logits and their gradient, counted 384 MiB at vocabulary 8,192: more than a
    # whole step of 4,096 positions peaked at on an H200, 275-323 MiB)
    heads = sum(float_bytes * (3 * windows * seq_len + vocab) * stack.config.d_model for stack in stacks)
    chunk = min(chunk_rows(device, vocab), windows * seq_len) * vocab * (float_bytes + value_bytes)
    parameters = sum(p.numel() for p in objective.parameters())
    state = (4 * value_bytes if not mixed else 16 + 2) * parameters
    return StepMemory(activations, heads, chunk, state)


def check_memory(objective: Objective, windows: int, seq_len: int, precision: str, device: torch.device,
                 checkpointing: bool = False) -> None:
    """Refuse, before anything runs, a step whose activations, weights and optimizer state cannot fit the device's
    free memory: an out-of-memory shape would otherwise swap or hang for minutes. `windows`: those in one forward
    (the micro-batch, or a process's whole share of the batch). The objective may be on the meta device."""
    needed = step_memory(objective, windows, seq_len, precision, device, checkpointing)
    available = device_memory_bytes(device)
    if needed.total > available:
        raise ConfigError(f"{objective.spec()}: one training step needs about {needed.total / 2 ** 30:,.1f} GiB "
                          f"({needed.activations / 2 ** 30:,.1f} GiB of activations at {windows} windows per forward, "
                          f"T = {seq_len}) but the {device.type} has {available / 2 ** 30:,.1f} GiB free; lower "
                          "--micro-batch, --seq-len or --model, or add --activation-checkpointing")

