"""Analytic FLOP counting, under one convention for every objective.

Convention (the one `torch.utils.flop_counter.FlopCounterMode` measures, so the two can be checked against each other):
- only matrix products count, at 2·m·n·k; element-wise work (norms, activations, softmax, sampling) does not;
- attention scores and values are counted over the full T × T, whatever the mask;
- a dense product's backward is two products (gradient of the input and of the weight): 2 × its forward;
- fused attention's backward recomputes the score matrix and then runs four products: 2.5 × its forward (this is what
  the flash / memory-efficient kernels execute on CPU and GPU alike);
- the vocabulary projection is counted only on the rows where it is computed.

That is the *dense* convention. Under the *executed* one, causal and prefix attention are charged only for the
TILE × TILE blocks of the score matrix a tiled (flash-style) kernel computes: a block the mask hides entirely is
skipped, in the forward and the backward alike. For a causal window of n tiles that is n(n + 1)/2 of the n² blocks
(5/8 at T = 512, about half at long T); a window of one tile (T ≤ TILE) saves nothing.
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


CONVENTIONS = ("dense", "executed")
TILE = 128  # query rows and key columns of one block of a tiled attention kernel (FlashAttention-2's usual tile)


def attention_entries(seq_len: int, attention: str = "bidirectional", convention: str = "dense") -> int:
    """Entries (query, key) of one head's score matrix charged for a window: all T² under the dense convention;
    under the executed one, those of the blocks a tiled kernel computes. Causal attention reaches SDPA as
    `is_causal`, and its flash kernels skip a block whose every key comes after every query of it. A prefix LM's
    mask reaches SDPA as a boolean tensor, which no SDPA kernel skips blocks of (the CPU's runs all of it, and on a
    GPU a mask rules the flash kernel out): it is charged all T², as bidirectional attention is."""
    if convention not in CONVENTIONS:
        raise ValueError(f"FLOP convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}")
    if convention == "dense" or attention != "causal":
        return seq_len * seq_len
    entries = 0
    for first_query in range(0, seq_len, TILE):
        rows = min(TILE, seq_len - first_query)
        for first_key in range(0, first_query + rows, TILE):  # blocks with a key at or before the last query
            entries += rows * min(TILE, seq_len - first_key)
    return entries


def transformer_flops(batch_size: int, seq_len: int, d_model: int, d_ff: int, n_layer: int,
                      score_entries: int | None = None) -> Flops:
    """`score_entries`: of one head's score matrix per window (attention_entries); T² when not given."""
    tokens = batch_size * seq_len
    entries = seq_len * seq_len if score_entries is None else score_entries
    per_layer_dense = 2 * tokens * d_model * (3 * d_model + d_model + 2 * d_ff)  # qkv, output projection, MLP
    per_layer_attention = 2 * 2 * batch_size * entries * d_model  # scores and values, summed over heads
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
            # packet: without this the CPU attention would still count 0 there (tests/backbone/test_backbone.py checks it)
            registry.setdefault(op, registry.get(op.default))


def measure_flops(step: Callable[[], object]) -> int:
    """FLOPs that torch's FlopCounterMode measures while `step()` runs (CPU attention included)."""
    _register_cpu_attention_formulas()
    with flop_counter.FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()
