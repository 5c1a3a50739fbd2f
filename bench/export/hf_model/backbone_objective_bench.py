"""The backbone of an objective-bench export for `transformers` (trust_remote_code=True); the heads are in
modeling_objective_bench.py. Shipped by `python -m bench.export`.

The forward is the suite's own (backbone/model.py), operation for operation, so that its outputs equal the suite's
bit for bit in float32: pre-norm blocks on `scaled_dot_product_attention`, RoPE on interleaved pairs computed from
the positions in float64, logits from the token embedding matrix. No stock class has this MLM head (every HF
masked-LM head puts dense -> act -> LayerNorm before the decoder), hence this file. It imports nothing of the suite.

Padding: each row's tokens must be one contiguous run (left or right padding). A row is rotated so that its tokens
start at position 0, read as the suite reads a right-padded example (bidirectional over the tokens with the padding
masked, or causal), and rotated back: left and right padding give the same numbers.
"""

from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import ModelOutput

from .configuration_objective_bench import ObjectiveBenchConfig


# --- positions and attention, as backbone/model.py computes them -----------------------------------------------

def rope_tables(head_dim: int, positions: Tensor, base: float) -> tuple[Tensor, Tensor]:
    """(cos, signed sin) at `positions`, each (*positions.shape, head_dim): features rotate in pairs (0, 1), (2, 3),
    ...; angles in float64 on the host, as the suite builds its tables, so each value is the suite's."""
    positions = positions.cpu()
    inverse_frequency = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64)[..., None] * inverse_frequency
    sign = torch.tensor([-1.0, 1.0], dtype=torch.float64)
    return (angles.cos().repeat_interleave(2, dim=-1).float(),
            (angles.sin().unsqueeze(-1) * sign).flatten(-2).float())


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x: (batch, heads, T, head_dim); each (even, odd) pair rotated by its position's angle."""
    swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    return x * cos.to(x.dtype) + swapped * sin.to(x.dtype)


def prefix_mask(seq_len: int, prefix_len: Union[int, Tensor], device: torch.device) -> Tensor:
    """Key j is visible from query i when j <= i or j lies inside the prefix (True: allowed)."""
    positions = torch.arange(seq_len, device=device)
    causal = positions[None, :] <= positions[:, None]
    if isinstance(prefix_len, int):
        return causal | (positions < prefix_len)
    prefix = torch.as_tensor(prefix_len, device=device).reshape(-1, 1, 1, 1)
    return causal | (positions < prefix)


@dataclass
class Padding:
    """Where each row's tokens start and how many there are; None for a batch without padding."""

    starts: Optional[Tensor] = None
    lengths: Optional[Tensor] = None

    @classmethod
    def of(cls, attention_mask: Optional[Tensor]) -> "Padding":
        if attention_mask is None or bool(attention_mask.bool().all()):
            return cls()
        mask = attention_mask.bool()
        index = torch.arange(mask.shape[1], device=mask.device)
        lengths = mask.sum(1)
        starts = mask.int().argmax(1) * (lengths > 0)
        if not torch.equal((index >= starts[:, None]) & (index < (starts + lengths)[:, None]), mask):
            raise ValueError("attention_mask must mark one contiguous run of tokens per row (left or right padding)")
        return cls(starts, lengths)

    def shift(self, x: Optional[Tensor], back: bool = False) -> Optional[Tensor]:
        """Rotate each row of x (batch, T, ...) so its tokens start at 0 (or, `back`, to where they were)."""
        if x is None or self.starts is None:
            return x
        offset = -self.starts if back else self.starts
        index = (torch.arange(x.shape[1], device=x.device)[None, :] + offset[:, None].to(x.device)) % x.shape[1]
        index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)
        return x.gather(1, index)


# --- the backbone -----------------------------------------------------------------------------------------------

class Attention(nn.Module):
    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__()
        self.n_head, self.head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = config.hidden_dropout_prob

    def forward(self, x: Tensor, mask: Optional[Tensor], is_causal: bool,
                rope: Optional[tuple[Tensor, Tensor]]) -> Tensor:
        batch, seq_len, width = x.shape
        q, k, v = self.qkv(x).view(batch, seq_len, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(batch, seq_len, width))


class Block(nn.Module):
    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.norm1 = nn.LayerNorm(d, eps=eps)
        self.attention = Attention(config)
        self.norm2 = nn.LayerNorm(d, eps=eps)
        self.mlp = nn.Sequential(nn.Linear(d, config.intermediate_size), nn.GELU(),
                                 nn.Linear(config.intermediate_size, d), nn.Dropout(config.hidden_dropout_prob))
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, *attention_args) -> Tensor:
        x = x + self.dropout(self.attention(self.norm1(x), *attention_args))
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class ObjectiveBenchPreTrainedModel(PreTrainedModel):
    config_class = ObjectiveBenchConfig
    base_model_prefix = "model"
    _supports_sdpa = True

    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


@dataclass
class Encoded:
    """Final hidden states with each row's tokens from position 0 (`hidden`), every layer's input (`states`), and
    the padding that rotated them."""

    hidden: Tensor
    states: list
    padding: Padding


class ObjectiveBenchModel(ObjectiveBenchPreTrainedModel):
    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__(config)
        e = config.embedding_size
        self.token_embedding = nn.Embedding(config.vocab_size, e)
        self.position_embedding = (nn.Embedding(config.max_position_embeddings, e)
                                   if config.position_embedding_type == "learned" else None)
        self.segment_embedding = nn.Embedding(config.type_vocab_size, e) if config.type_vocab_size else None
        self.embeddings_project = nn.Linear(e, config.hidden_size) if e != config.hidden_size else None
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.transformer = Transformer(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.token_embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.token_embedding = value

    def embed(self, input_ids: Optional[Tensor], inputs_embeds: Optional[Tensor], token_type_ids: Optional[Tensor],
              position_ids: Optional[Tensor]) -> Tensor:
        x = self.token_embedding(input_ids) if inputs_embeds is None else inputs_embeds
        if self.position_embedding is not None:
            positions = torch.arange(x.shape[1], device=x.device) if position_ids is None else position_ids
            x = x + self.position_embedding(positions)
        if self.segment_embedding is not None:  # a single text is segment A, as the suite reads it
            x = x + (self.segment_embedding.weight[0] if token_type_ids is None
                     else self.segment_embedding(token_type_ids))
        x = self.dropout(x)
        return x if self.embeddings_project is None else self.embeddings_project(x)

    def attention(self, seq_len: int, padding: Padding, prefix_len: Union[int, Tensor, None],
                  device: torch.device) -> tuple[Optional[Tensor], bool]:
        """(mask, is_causal) on rows whose tokens start at 0: the suite's mask for its own reading of them."""
        mode = self.config.attention
        if mode == "causal":  # padding after the tokens is never seen
            return None, True
        if prefix_len is not None and mode != "prefix":
            raise ValueError("prefix_len is for a prefix-LM backbone (attention='prefix')")
        if prefix_len is None:
            prefix = padding.lengths  # the whole example, the padding masked (None: no padding)
        elif padding.starts is None:
            prefix = prefix_len
        else:  # the prefix in the rotated rows, within the tokens
            prefix = torch.minimum((torch.as_tensor(prefix_len, device=device) - padding.starts).clamp_min(0),
                                   padding.lengths)
        if prefix is None:  # the suite reads a prefix LM's whole window as its prefix
            return (None, False) if mode == "bidirectional" else (prefix_mask(seq_len, seq_len, device), False)
        return prefix_mask(seq_len, prefix, device), False

    def encode(self, input_ids: Optional[Tensor] = None, attention_mask: Optional[Tensor] = None,
               token_type_ids: Optional[Tensor] = None, position_ids: Optional[Tensor] = None,
               prefix_len: Union[int, Tensor, None] = None, inputs_embeds: Optional[Tensor] = None) -> Encoded:
        padding = Padding.of(attention_mask)
        input_ids, token_type_ids, position_ids, inputs_embeds = (
            padding.shift(x) for x in (input_ids, token_type_ids, position_ids, inputs_embeds))
        if self.segment_embedding is None:
            token_type_ids = None  # a backbone without segment embeddings has nothing to read them with
        x = self.embed(input_ids, inputs_embeds, token_type_ids, position_ids)
        seq_len = x.shape[1]
        if seq_len > self.config.max_position_embeddings:
            raise ValueError(f"sequence of {seq_len} positions exceeds max_position_embeddings="
                             f"{self.config.max_position_embeddings}")
        mask, is_causal = self.attention(seq_len, padding, prefix_len, x.device)
        rope = None
        if self.config.position_embedding_type == "rope":
            positions = torch.arange(seq_len) if position_ids is None else position_ids[:, None]
            head_dim = self.config.hidden_size // self.config.num_attention_heads
            rope = tuple(t.to(x.device) for t in rope_tables(head_dim, positions, self.config.rope_base))
        states = [x]
        for block in self.transformer.blocks:
            x = block(x, mask, is_causal, rope)
            states.append(x)
        return Encoded(self.transformer.norm(x), states, padding)

    def forward(self, input_ids: Optional[Tensor] = None, attention_mask: Optional[Tensor] = None,
                token_type_ids: Optional[Tensor] = None, position_ids: Optional[Tensor] = None,
                prefix_len: Union[int, Tensor, None] = None, inputs_embeds: Optional[Tensor] = None,
                output_hidden_states: Optional[bool] = None, return_dict: Optional[bool] = None,
                **kwargs) -> Union[BaseModelOutput, tuple]:
        encoded = self.encode(input_ids, attention_mask, token_type_ids, position_ids, prefix_len, inputs_embeds)
        return self.outputs(encoded, BaseModelOutput, return_dict, output_hidden_states,
                            last_hidden_state=encoded.padding.shift(encoded.hidden, back=True))

    def outputs(self, encoded: Encoded, kind: type, return_dict: Optional[bool],
                output_hidden_states: Optional[bool], **fields) -> Union[ModelOutput, tuple]:
        """`kind(**fields)` with every layer's states where asked, or its tuple where return_dict is False."""
        if output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states:
            fields["hidden_states"] = tuple(encoded.padding.shift(s, back=True)
                                            for s in (*encoded.states[:-1], encoded.hidden))
        output = kind(**fields)
        as_dict = return_dict if return_dict is not None else getattr(self.config, "return_dict", True)
        return output if as_dict else output.to_tuple()


def pool(hidden: Tensor, padding: Padding, how: str) -> Tensor:
    """(batch, d) from rows whose tokens start at 0, as the suite's fine-tuning reads a sequence: the first position,
    the last token, or the mean over the tokens."""
    batch, seq_len = hidden.shape[:2]
    lengths = padding.lengths if padding.lengths is not None else torch.full((batch,), seq_len, device=hidden.device)
    if how == "first":
        return hidden[:, 0]
    if how == "last":
        return hidden[torch.arange(batch, device=hidden.device), lengths - 1]
    inside = (torch.arange(seq_len, device=hidden.device)[None, :] < lengths[:, None]).to(hidden.dtype)
    return (hidden * inside[..., None]).sum(1) / lengths[:, None].to(hidden.dtype)
