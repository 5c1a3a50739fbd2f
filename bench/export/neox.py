"""A causal backbone with RoPE as a stock `GPTNeoXForCausalLM` (no remote code).

The suite's block is GPT-NeoX's sequential-residual block (`use_parallel_residual=False`): pre-norm LayerNorm with
biases, exact GELU MLP, a final LayerNorm, a tied bias-free output; RoPE over the whole head (`rotary_pct=1.0`) with
base 10000. Two layouts differ, fixed by permuting the rows of the fused qkv projection: the suite's rows are
[q; k; v] each head after head, NeoX's [q_h, k_h, v_h] per head; and the suite rotates interleaved pairs (0, 1),
(2, 3), ... where NeoX rotates feature i with i + head_dim / 2 (`rotate_half`), so q's and k's rows within each head
are reordered evens first, then odds (as transformers' convert_llama_weights_to_hf.py `permute` does). Attention
scores are unchanged: q and k are permuted alike.
"""

from __future__ import annotations

import torch
from torch import Tensor

from backbone import Backbone
from objectives import Vocab

ROPE_BASE = 10000.0  # backbone.model.rope_tables' base


def qkv_rows(n_head: int, head_dim: int) -> Tensor:
    """For each row of NeoX's fused qkv, the row of the suite's that it takes."""
    width = n_head * head_dim
    half_split = torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])
    rows = [part * width + head * head_dim + (half_split if part < 2 else torch.arange(head_dim))
            for head in range(n_head) for part in range(3)]  # part 0, 1, 2: q, k, v
    return torch.cat(rows)


def neox_config(backbone: Backbone, vocab: Vocab) -> dict:
    """config.json. Both RoPE spellings: transformers v4 reads rotary_pct / rotary_emb_base (and falls back to
    rotary_pct = 0.25 without them); v5 reads rope_parameters."""
    c = backbone.config
    return {
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
        "vocab_size": c.vocab_size, "hidden_size": c.d_model, "num_hidden_layers": c.n_layer,
        "num_attention_heads": c.n_head, "intermediate_size": c.d_ff, "hidden_act": "gelu",
        "max_position_embeddings": c.max_seq_len, "layer_norm_eps": c.norm_eps, "use_parallel_residual": False,
        "tie_word_embeddings": True, "attention_bias": True, "initializer_range": 0.02,
        "hidden_dropout": c.dropout, "attention_dropout": c.dropout,  # the suite's dropout sits where NeoX's does
        "rotary_pct": 1.0, "rotary_emb_base": ROPE_BASE, "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_BASE, "partial_rotary_factor": 1.0},
        "bos_token_id": vocab.EOS, "eos_token_id": vocab.EOS, "pad_token_id": vocab.PAD,
        "use_cache": True, "torch_dtype": "float32",
    }


def neox_tensors(backbone: Backbone) -> dict[str, Tensor]:
    """The weights under GPT-NeoX's names; the output projection is left to tie_word_embeddings."""
    c, transformer = backbone.config, backbone.transformer
    rows = qkv_rows(c.n_head, c.head_dim)
    tensors = {"gpt_neox.embed_in.weight": backbone.token_embedding.weight,
               "gpt_neox.final_layer_norm.weight": transformer.norm.weight,
               "gpt_neox.final_layer_norm.bias": transformer.norm.bias}
    for i, block in enumerate(transformer.blocks):
        prefix = f"gpt_neox.layers.{i}."
        parts = {"input_layernorm": block.norm1, "post_attention_layernorm": block.norm2,
                 "attention.dense": block.attention.proj, "mlp.dense_h_to_4h": block.mlp[0],
                 "mlp.dense_4h_to_h": block.mlp[2]}
        for name, module in parts.items():
            tensors[prefix + name + ".weight"], tensors[prefix + name + ".bias"] = module.weight, module.bias
        qkv = block.attention.qkv
        tensors[prefix + "attention.query_key_value.weight"] = qkv.weight[rows]
        tensors[prefix + "attention.query_key_value.bias"] = qkv.bias[rows]
    return tensors
