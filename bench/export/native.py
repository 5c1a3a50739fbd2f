"""Backbones no stock class holds, as the small model family shipped with the export (hf_model/, model_type
"objective_bench", loaded with trust_remote_code=True): the config, the weights under its names, the auto_map.

The family's modules carry the suite's own names (token_embedding, transformer.blocks.N.attention.qkv, ...) under
the base model's prefix "model.", so a backbone's state dict maps one to one. ELECTRA's discriminator head is named
as ElectraForPreTraining names it (discriminator_predictions.dense, .dense_prediction); its generator is the same
family with a narrower transformer between a projection of the shared embeddings and a dense-GELU-LayerNorm
transform before the tied logits.
"""

from __future__ import annotations

from pathlib import Path

from torch import Tensor, nn

from backbone import Backbone, BackboneConfig
from objectives import Vocab

CODE = Path(__file__).parent / "hf_model"
CODE_FILES = ("configuration_objective_bench.py", "backbone_objective_bench.py", "modeling_objective_bench.py")
MODEL_TYPE = "objective_bench"
CLASSES = {"AutoModel": "ObjectiveBenchModel", "AutoModelForMaskedLM": "ObjectiveBenchForMaskedLM",
           "AutoModelForCausalLM": "ObjectiveBenchForCausalLM",
           "AutoModelForPreTraining": "ObjectiveBenchForPreTraining",
           "AutoModelForSequenceClassification": "ObjectiveBenchForSequenceClassification",
           "AutoModelForTokenClassification": "ObjectiveBenchForTokenClassification"}
FINETUNING = ("AutoModel", "AutoModelForSequenceClassification", "AutoModelForTokenClassification")


def auto_map(heads: tuple[str, ...]) -> dict[str, str]:
    """AutoConfig and the Auto classes the export answers to: the fine-tuning ones and its pretraining `heads`."""
    mapped = {"AutoConfig": "configuration_objective_bench.ObjectiveBenchConfig"}
    mapped.update({auto: f"modeling_objective_bench.{CLASSES[auto]}" for auto in (*FINETUNING, *heads)})
    return mapped


def native_config(config: BackboneConfig, vocab: Vocab, attention: str, heads: tuple[str, ...], **fields) -> dict:
    """config.json of the family for a backbone of shape `config` read in `attention` mode; `fields` set the rest
    (type_vocab_size, pretraining_head, mlm_transform, embedding_size)."""
    architecture = CLASSES[heads[0]] if heads else "ObjectiveBenchModel"
    return {
        "architectures": [architecture], "model_type": MODEL_TYPE, "auto_map": auto_map(heads),
        "vocab_size": config.vocab_size, "hidden_size": config.d_model, "num_hidden_layers": config.n_layer,
        "num_attention_heads": config.n_head, "intermediate_size": config.d_ff,
        "max_position_embeddings": config.max_seq_len, "layer_norm_eps": config.norm_eps,
        "hidden_dropout_prob": config.dropout, "hidden_act": "gelu", "position_embedding_type": config.positions,
        "rope_base": 10000.0, "attention": attention, "embedding_size": config.d_model, "type_vocab_size": 0,
        "mlm_transform": False, "pretraining_head": "",
        # each family's own read: a causal model at its last token (GPT's), else the mean of its tokens
        "classifier_pooling": "last" if attention == "causal" else "mean", "initializer_range": 0.02,
        # a causal reader's BOS is [EOS], as its tokenizer's (bench.export.tokenizer)
        "pad_token_id": vocab.PAD, "bos_token_id": vocab.EOS if attention == "causal" else vocab.BOS,
        "eos_token_id": vocab.EOS,
        "tie_word_embeddings": False, "torch_dtype": "float32", **fields,
    }


def backbone_tensors(backbone: Backbone) -> dict[str, Tensor]:
    return {f"model.{name}": tensor for name, tensor in backbone.state_dict().items()}


def linear_tensors(prefix: str, linear: nn.Linear) -> dict[str, Tensor]:
    return {f"{prefix}.weight": linear.weight, f"{prefix}.bias": linear.bias}


def encoder_export(backbone: Backbone, vocab: Vocab, attention: str, heads: tuple[str, ...],
                   pair_head: nn.Sequential | None = None,
                   transform: nn.Sequential | None = None) -> tuple[dict, dict[str, Tensor]]:
    """(config.json, weights) of a backbone read in `attention` mode, with a sentence-pair objective's heads
    (BERT's pooler and classifier: pair_predictions.dense, .classifier) and a masked LM's transform (dense, GELU,
    LayerNorm before the tied logits) where it has them."""
    segments = 0 if backbone.segment_embedding is None else backbone.segment_embedding.num_embeddings
    tensors = backbone_tensors(backbone)
    fields: dict = {"type_vocab_size": segments}
    if transform is not None:
        fields["mlm_transform"] = True
        tensors |= linear_tensors("transform.0", transform[0])
        tensors |= {"transform.2.weight": transform[2].weight, "transform.2.bias": transform[2].bias}
    if pair_head is not None:
        heads, fields["pretraining_head"] = (*heads, "AutoModelForPreTraining"), "pair"
        tensors |= linear_tensors("pair_predictions.dense", pair_head[0])
        tensors |= linear_tensors("pair_predictions.classifier", pair_head[2])
    return native_config(backbone.config, vocab, attention, heads, **fields), tensors


def discriminator_export(backbone: Backbone, vocab: Vocab, head: nn.Sequential) -> tuple[dict, dict[str, Tensor]]:
    """ELECTRA's discriminator: the backbone and its replaced-token head (dense, GELU, dense_prediction)."""
    config, tensors = encoder_export(backbone, vocab, "bidirectional", ("AutoModelForPreTraining",))
    config["pretraining_head"] = "electra"
    tensors |= linear_tensors("discriminator_predictions.dense", head[0])
    tensors |= linear_tensors("discriminator_predictions.dense_prediction", head[2])
    return config, tensors


def generator_export(backbone: Backbone, vocab: Vocab, config: BackboneConfig, project: nn.Linear,
                     transformer: nn.Module, head: nn.Sequential) -> tuple[dict, dict[str, Tensor]]:
    """ELECTRA's generator as a masked LM: the shared embeddings (width d), `project` into the generator's width,
    its `transformer` (of shape `config`), then `head` (dense back to d, GELU, LayerNorm) and the tied logits."""
    tensors = {"model.token_embedding.weight": backbone.token_embedding.weight}
    if backbone.position_embedding is not None:
        tensors["model.position_embedding.weight"] = backbone.position_embedding.weight
    tensors |= linear_tensors("model.embeddings_project", project)
    tensors |= {f"model.transformer.{name}": tensor for name, tensor in transformer.state_dict().items()}
    tensors |= linear_tensors("transform.0", head[0])
    tensors |= {"transform.2.weight": head[2].weight, "transform.2.bias": head[2].bias}
    exported = native_config(config, vocab, "bidirectional", ("AutoModelForMaskedLM",),
                             embedding_size=backbone.config.d_model, mlm_transform=True)
    return exported, tensors
