"""A causal backbone with learned positions (`positions=learned`) as a stock `GPT2LMHeadModel`.

GPT-2's block is the suite's: pre-norm LayerNorm with biases, a fused [q; k; v] projection in the suite's own row
order, an MLP (with exact GELU here: activation_function "gelu", not GPT-2's tanh approximation), a final LayerNorm
and a tied output. GPT-2 stores its projections as Conv1D, (in, out): each weight is transposed.
"""

from __future__ import annotations

from torch import Tensor

from backbone import Backbone
from objectives import Vocab


def gpt2_config(backbone: Backbone, vocab: Vocab) -> dict:
    c = backbone.config
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": c.vocab_size, "n_positions": c.max_seq_len, "n_embd": c.d_model, "n_layer": c.n_layer,
        "n_head": c.n_head, "n_inner": c.d_ff, "activation_function": "gelu", "layer_norm_epsilon": c.norm_eps,
        "resid_pdrop": c.dropout, "embd_pdrop": c.dropout, "attn_pdrop": c.dropout, "scale_attn_weights": True,
        "tie_word_embeddings": True, "initializer_range": 0.02,
        "bos_token_id": vocab.EOS, "eos_token_id": vocab.EOS, "pad_token_id": vocab.PAD,
        "use_cache": True, "torch_dtype": "float32",
    }


def gpt2_tensors(backbone: Backbone) -> dict[str, Tensor]:
    transformer = backbone.transformer
    tensors = {"transformer.wte.weight": backbone.token_embedding.weight,
               "transformer.wpe.weight": backbone.position_embedding.weight,
               "transformer.ln_f.weight": transformer.norm.weight, "transformer.ln_f.bias": transformer.norm.bias}
    for i, block in enumerate(transformer.blocks):
        prefix = f"transformer.h.{i}."
        for name, norm in (("ln_1", block.norm1), ("ln_2", block.norm2)):
            tensors[prefix + name + ".weight"], tensors[prefix + name + ".bias"] = norm.weight, norm.bias
        for name, linear in (("attn.c_attn", block.attention.qkv), ("attn.c_proj", block.attention.proj),
                             ("mlp.c_fc", block.mlp[0]), ("mlp.c_proj", block.mlp[2])):
            tensors[prefix + name + ".weight"], tensors[prefix + name + ".bias"] = linear.weight.t(), linear.bias
    return tensors
