"""The one transformer every objective shares.

Pre-norm blocks on `scaled_dot_product_attention`, tied input/output embeddings, RoPE or learned positions, and three
attention modes:
- "bidirectional": every position sees every position (MLM, ELECTRA);
- "causal": position i sees positions <= i (AR), optionally continuing from a KV cache;
- "prefix": bidirectional inside the first `prefix_len` positions, causal after them (span corruption packed as
  [inputs ; targets]).
The output projection is a separate call, `logits(hidden)`, so an objective projects only the rows it supervises.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from backbone.flops import Flops, attention_entries, transformer_flops
from backbone.kv_cache import KVCache
from backbone.sizes import BackboneConfig

ATTENTION_MODES = ("bidirectional", "causal", "prefix")


def rope_tables(head_dim: int, max_len: int, base: float = 10000.0) -> tuple[Tensor, Tensor]:
    """(cos, signed sin), each (max_len, head_dim): features are rotated in pairs (0, 1), (2, 3), ..., so each
    angle is repeated for both of its pair, and the sin carries the minus sign of the pair's first feature."""
    inverse_frequency = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(max_len, dtype=torch.float64), inverse_frequency)
    sign = torch.tensor([-1.0, 1.0], dtype=torch.float64)
    return (angles.cos().repeat_interleave(2, dim=-1).float(),
            (angles.sin().unsqueeze(-1) * sign).flatten(-2).float())


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: (batch, heads, T, head_dim); each (even, odd) pair of features rotated by its position's angle:
    (even·cos − odd·sin, odd·cos + even·sin), as x·cos + swapped(x)·signed sin: whole-width passes over x in x's
    dtype (bf16 activations are not promoted to fp32 tables) instead of strided halves stacked back together. In
    fp32 every value is bit for bit the pairwise formula's, since negating a factor and adding instead of
    subtracting are exact (not with addcmul, whose fused multiply-add rounds once: tests/backbone/test_backbone.py)."""
    swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    return x * cos.to(x.dtype) + swapped * sin.to(x.dtype)


def attention_mask(mode: str, seq_len: int, past_len: int, prefix_len: int | Tensor | None,
                   device: torch.device) -> tuple[Tensor | None, bool]:
    """(attn_mask, is_causal) for SDPA. Boolean masks are True where attention is allowed."""
    if mode == "bidirectional":
        return None, False
    if mode == "causal":
        if past_len == 0:
            return None, True
        if seq_len == 1:  # one new token sees the whole cache
            return None, False
        # SDPA's is_causal aligns to the top-left corner, which is wrong once a cache precedes the new queries.
        query = torch.arange(seq_len, device=device)[:, None] + past_len
        return torch.arange(past_len + seq_len, device=device)[None, :] <= query, False
    # prefix: key j is visible from query i when j <= i (causal part) or j lies inside the prefix.
    positions = torch.arange(seq_len, device=device)
    causal = positions[None, :] <= positions[:, None]
    if isinstance(prefix_len, int):  # one prefix for the batch (span corruption's): no copy to the device per forward
        return causal | (positions < prefix_len), False
    prefix = torch.as_tensor(prefix_len, device=device).reshape(-1, 1, 1, 1)  # (batch or 1, 1, 1, 1)
    return causal | (positions < prefix), False


class Attention(nn.Module):
    def __init__(self, config: BackboneConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.dropout = config.dropout

    def forward(self, x: Tensor, mask: Tensor | None, is_causal: bool, rope: tuple[Tensor, Tensor] | None,
                kv_cache: KVCache | None, layer: int) -> Tensor:
        batch, seq_len, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq_len, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        if kv_cache is not None:
            k, v = kv_cache.append(layer, k, v)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(batch, seq_len, width))


class Block(nn.Module):
    def __init__(self, config: BackboneConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.attention = Attention(config)
        self.norm2 = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, config.d_ff), nn.GELU(),
                                 nn.Linear(config.d_ff, config.d_model), nn.Dropout(config.dropout))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, *attention_args) -> Tensor:
        x = x + self.dropout(self.attention(self.norm1(x), *attention_args))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """The stack of blocks and the final norm, on hidden states. ELECTRA's generator is a narrower one of these.

    With `activation_checkpointing` set, a training forward keeps only each block's input and recomputes the block's
    inside during the backward pass: memory for one more forward. The RNG state is replayed, so dropout draws the same
    masks both times and the gradients are those of the plain forward."""

    def __init__(self, config: BackboneConfig) -> None:
        super().__init__()
        self.config = config
        self.activation_checkpointing = False  # a run setting, not part of the shape: set by the trainer
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        if config.positions == "rope":
            cos, sin = rope_tables(config.head_dim, config.max_seq_len)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(init_weights)
        for block in self.blocks:  # GPT-2: scale residual projections so the residual stream's variance stays flat
            for residual in (block.attention.proj, block.mlp[2]):
                nn.init.normal_(residual.weight, std=0.02 / math.sqrt(2 * config.n_layer))

    def forward(self, x: Tensor, *, attention: str, prefix_len: int | Tensor | None = None,
                kv_cache: KVCache | None = None, every_layer: bool = False) -> Tensor:
        """Final hidden states after the final norm; with `every_layer`, every layer's output side by side on the
        last axis, (batch, T, (n_layer + 1) · d): the input to the first block, each block's output, the last one
        after the final norm (as Hugging Face's hidden_states), for a reader that mixes the layers."""
        if attention not in ATTENTION_MODES:
            raise ValueError(f"unknown attention mode {attention!r}; choose one of {', '.join(ATTENTION_MODES)}")
        if kv_cache is not None and attention != "causal":
            raise ValueError("a KV cache is only valid with causal attention")
        if (attention == "prefix") != (prefix_len is not None):
            raise ValueError("prefix_len is required with, and only with, prefix attention")
        seq_len = x.shape[1]
        past_len = kv_cache.length if kv_cache is not None else 0
        if past_len + seq_len > self.config.max_seq_len:
            raise ValueError(f"sequence of {past_len + seq_len} positions exceeds max_seq_len={self.config.max_seq_len}")
        mask, is_causal = attention_mask(attention, seq_len, past_len, prefix_len, x.device)
        rope = None
        if self.config.positions == "rope":
            rope = (self.rope_cos[past_len:past_len + seq_len], self.rope_sin[past_len:past_len + seq_len])
        recompute = self.activation_checkpointing and torch.is_grad_enabled()
        layers = []
        for layer, block in enumerate(self.blocks):
            layers.append(x)
            if recompute:
                x = checkpoint(block, x, mask, is_causal, rope, kv_cache, layer, use_reentrant=False)
            else:
                x = block(x, mask, is_causal, rope, kv_cache, layer)
        if kv_cache is not None:
            kv_cache.advance(seq_len)
        return torch.cat([*layers, self.norm(x)], dim=-1) if every_layer else self.norm(x)

    def flops(self, batch_size: int, seq_len: int, score_entries: int | None = None) -> Flops:
        c = self.config
        return transformer_flops(batch_size, seq_len, c.d_model, c.d_ff, c.n_layer, score_entries)

    def activation_bytes(self, batch_size: int, seq_len: int, value_bytes: int, mixed: bool,
                         checkpointing: bool = False) -> int:
        """About how many bytes a training step keeps for the backward pass, at `value_bytes` per value (2 under
        bf16/fp16 autocast): per block and token, ten values of width d (the input, two norm outputs, q, k, v, the
        attention output, the projections' inputs, the residual) and the MLP's two of width d_ff. Fused attention
        keeps no T × T scores; a prefix mask is T × T booleans (T²/4 values of 4 bytes). With activation
        checkpointing only each block's input (width d) is kept, plus one block's inside while it is recomputed in
        the backward pass. Autocast keeps the residual stream in fp32: each block's two norm inputs are kept at 4
        bytes beside the half-precision copies the matrix products save, and a checkpointed block's input is fp32
        (measured with saved_tensors_hooks under CPU bf16 autocast: within 3 % at d_ff = 2d, 4d and 8d)."""
        c = self.config
        tokens = batch_size * seq_len
        residual = 4 if mixed else value_bytes
        inside = value_bytes * (10 * c.d_model + 2 * c.d_ff) + (4 * 2 * c.d_model if mixed else 0)
        per_token = c.n_layer * residual * c.d_model + inside if checkpointing else c.n_layer * inside
        return tokens * per_token + seq_len * seq_len


class Backbone(nn.Module):
    def __init__(self, config: BackboneConfig) -> None:
        super().__init__()
        self.config = config
        # how attention FLOPs are charged (backbone.flops): "dense", or "executed" for a run that asks
        self.flops_convention = "dense"
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = (nn.Embedding(config.max_seq_len, config.d_model)
                                   if config.positions == "learned" else None)
        self.segment_embedding: nn.Embedding | None = None  # see add_segment_embedding
        self.dropout = nn.Dropout(config.dropout)
        self.transformer = Transformer(config)
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        if self.position_embedding is not None:
            nn.init.normal_(self.position_embedding.weight, std=0.02)

    def add_segment_embedding(self) -> None:
        """BERT's segment (token-type) embeddings for segments A and B, for an objective that feeds sentence pairs
        (mlm:pair=...). The objective adds them, so every other backbone keeps its parameters and checkpoints."""
        if self.segment_embedding is None:
            weight = self.token_embedding.weight
            self.segment_embedding = nn.Embedding(2, self.config.d_model, device=weight.device, dtype=weight.dtype)
            nn.init.normal_(self.segment_embedding.weight, std=0.02)

    def embed(self, input_ids: Tensor, past_len: int = 0, segments: Tensor | None = None) -> Tensor:
        """Token (+ learned position, + segment) embeddings; shared with ELECTRA's generator. A backbone with segment
        embeddings reads a single text as segment A (as BERT does) when no segments are given."""
        x = self.token_embedding(input_ids)
        if self.position_embedding is not None:
            positions = torch.arange(past_len, past_len + input_ids.shape[1], device=input_ids.device)
            x = x + self.position_embedding(positions)
        if self.segment_embedding is not None:
            x = x + (self.segment_embedding.weight[0] if segments is None else self.segment_embedding(segments))
        elif segments is not None:
            raise ValueError("segments given to a backbone without segment embeddings")
        return self.dropout(x)

    def forward(self, input_ids: Tensor, *, attention: str, prefix_len: int | Tensor | None = None,
                kv_cache: KVCache | None = None, segments: Tensor | None = None, every_layer: bool = False) -> Tensor:
        """Final hidden states (batch, T, d_model) after the final norm; with `every_layer`, every layer's
        (batch, T, (n_layer + 1) · d_model), the embeddings first (Transformer.forward)."""
        past_len = kv_cache.length if kv_cache is not None else 0
        return self.transformer(self.embed(input_ids, past_len, segments), attention=attention,
                                prefix_len=prefix_len, kv_cache=kv_cache, every_layer=every_layer)

    def logits(self, hidden: Tensor) -> Tensor:
        """Tied output projection of whichever rows the caller passes."""
        return F.linear(hidden, self.token_embedding.weight)

    def new_kv_cache(self, batch_size: int, max_len: int | None = None) -> KVCache:
        c = self.config
        weight = self.token_embedding.weight
        return KVCache(batch_size, c.n_layer, c.n_head, c.head_dim, max_len or c.max_seq_len, weight.device,
                       weight.dtype)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops(self, batch_size: int, seq_len: int, logit_rows: int, attention: str = "bidirectional") -> Flops:
        """FLOPs of a forward over (batch_size, seq_len) in `attention` mode that projects `logit_rows` rows onto
        the vocabulary, under the backbone's `flops_convention` (backbone.flops: "dense" unless a run asks)."""
        entries = attention_entries(seq_len, attention, self.flops_convention)
        projection = Flops(dense=2 * logit_rows * self.config.d_model * self.config.vocab_size)
        return self.transformer.flops(batch_size, seq_len, entries) + projection


def init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
