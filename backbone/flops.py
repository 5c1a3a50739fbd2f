"""Analytic FLOP counting, under one convention for every objective.

Convention (the one `torch.utils.flop_counter.FlopCounterMode` measures, so the two can be checked against each other):
- only matrix products count, at 2·m·n·k; element-wise work (norms, activations, softmax, sampling) does not;
- attention scores and values are counted over the full T × T, whatever the mask;
- a dense product's backward is two products (gradient of the input and of the weight): 2 × its forward;
- fused attention's backward recomputes the score matrix and then runs four products: 2.5 × its forward (this is what
  the flash / memory-efficient kernels execute on CPU and GPU alike);
- the vocabulary projection is counted only on the rows where it is computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils import flop_counter


@dataclass(frozen=True)
class Flops:
    """Forward FLOPs, split by how their backward scales."""

    dense: int = 0  # weight products: backward = 2 × forward
    attention: int = 0  # q·kᵀ and p·v: backward = 2.5 × forward

    def __add__(self, other: "Flops") -> "Flops":
        return Flops(self.dense + other.dense, self.attention + other.attention)

    @property
    def forward(self) -> int:
        return self.dense + self.attention

    @property
    def training_step(self) -> int:
        """Forward + backward."""
        return 3 * self.dense + (7 * self.attention) // 2  # attention is a multiple of 4, so this is exact


def transformer_flops(batch_size: int, seq_len: int, d_model: int, d_ff: int, n_layer: int) -> Flops:
    tokens = batch_size * seq_len
    per_layer_dense = 2 * tokens * d_model * (3 * d_model + d_model + 2 * d_ff)  # qkv, output projection, MLP
    per_layer_attention = 2 * 2 * batch_size * seq_len * seq_len * d_model  # scores and values, summed over heads
    return Flops(dense=n_layer * per_layer_dense, attention=n_layer * per_layer_attention)


def _register_cpu_attention_formulas() -> None:
    # torch's FlopCounterMode has formulas for the CUDA fused attention kernels but not for the CPU one, so on CPU it
    # silently leaves attention out. Reuse torch's own SDPA formulas for the CPU op and its backward.
    aten, registry = torch.ops.aten, flop_counter.flop_registry

    def forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)

    def backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)

    for op, formula in ((aten._scaled_dot_product_flash_attention_for_cpu, forward),
                        (aten._scaled_dot_product_flash_attention_for_cpu_backward, backward)):
        if op not in registry:
            flop_counter.register_flop_formula(op)(formula)
            # torch 2.4 files a packet's formula under each of its overloads, but the counter looks formulas up by
            # packet: without this the CPU attention would still count 0 there (tests/test_backbone.py checks it)
            registry.setdefault(op, registry.get(op.default))


def measure_flops(step: Callable[[], object]) -> int:
    """FLOPs that torch's FlopCounterMode measures while `step()` runs (CPU attention included)."""
    _register_cpu_attention_formulas()
    with flop_counter.FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()
