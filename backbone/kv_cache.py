"""Key/value cache for incremental causal decoding.

A plain object the caller creates and passes to `Backbone.forward(..., kv_cache=cache)`: each forward appends the new
keys and values of every layer, so the next call only processes the new tokens. Preallocated to `max_len` so that
decoding does not reallocate (and copy) the whole cache every token.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    def __init__(self, batch_size: int, n_layer: int, n_head: int, head_dim: int, max_len: int,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> None:
        shape = (n_layer, batch_size, n_head, max_len, head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.max_len = max_len
        self.length = 0  # positions already cached; also the position offset of the next call

    def append(self, layer: int, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Store `key`/`value` (batch, heads, new, head_dim) after the cached positions; return all of them."""
        end = self.length + key.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; {end} requested")
        self.keys[layer, :, :, self.length:end] = key
        self.values[layer, :, :, self.length:end] = value
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]

    def advance(self, new_positions: int) -> None:
        """Called once per forward, after every layer has appended."""
        self.length += new_positions
