"""The heads of an objective-bench export for `transformers` (trust_remote_code=True), on the backbone of
backbone_objective_bench.py. Shipped by `python -m bench.export`; it imports nothing of the suite.

Vocabulary logits are the token embedding matrix times the final states (no separate tied lm_head): the suite's
tied, bias-free output. Every forward names its inputs (Trainer and generate read the signature).
"""

from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from transformers.generation import GenerationMixin
from transformers.modeling_outputs import (CausalLMOutput, MaskedLMOutput, SequenceClassifierOutput,
                                           TokenClassifierOutput)
from transformers.utils import ModelOutput

from .backbone_objective_bench import Encoded, ObjectiveBenchModel, ObjectiveBenchPreTrainedModel, pool
from .configuration_objective_bench import ObjectiveBenchConfig

IGNORE = -100
PrefixLen = Union[int, Tensor, None]

__all__ = ["ObjectiveBenchConfig", "ObjectiveBenchModel", "ObjectiveBenchForMaskedLM", "ObjectiveBenchForCausalLM",
           "ObjectiveBenchForPreTraining", "ObjectiveBenchForSequenceClassification",
           "ObjectiveBenchForTokenClassification"]


@dataclass
class ObjectiveBenchForPreTrainingOutput(ModelOutput):
    """ELECTRA's discriminator: `logits` (batch, T), one per position (> 0: replaced). A sentence-pair objective:
    `prediction_logits` (the masked-LM head) and `seq_relationship_logits` (batch, 2), as BertForPreTraining."""

    loss: Optional[Tensor] = None
    logits: Optional[Tensor] = None
    prediction_logits: Optional[Tensor] = None
    seq_relationship_logits: Optional[Tensor] = None
    hidden_states: Optional[tuple] = None


def cross_entropy(logits: Tensor, labels: Optional[Tensor]) -> Optional[Tensor]:
    if labels is None:
        return None
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1).to(logits.device),
                           ignore_index=IGNORE)


class WithBackbone(ObjectiveBenchPreTrainedModel):
    """A head on the backbone; ELECTRA's generator has its dense-GELU-LayerNorm transform before the logits."""

    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__(config)
        self.model = ObjectiveBenchModel(config)
        self.transform = (nn.Sequential(nn.Linear(config.hidden_size, config.embedding_size), nn.GELU(),
                                        nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps))
                          if config.mlm_transform else None)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.token_embedding

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.token_embedding = value

    def vocabulary_logits(self, encoded: Encoded) -> Tensor:
        hidden = encoded.hidden if self.transform is None else self.transform(encoded.hidden)
        return encoded.padding.shift(F.linear(hidden, self.model.token_embedding.weight), back=True)

    def finish(self, encoded: Encoded, kind: type, return_dict: Optional[bool], output_hidden_states: Optional[bool],
               **fields) -> Union[ModelOutput, tuple]:
        return self.model.outputs(encoded, kind, return_dict, output_hidden_states, **fields)


class ObjectiveBenchForMaskedLM(WithBackbone):
    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__(config)
        self.post_init()

    def forward(self, input_ids: Optional[Tensor] = None, attention_mask: Optional[Tensor] = None,
                token_type_ids: Optional[Tensor] = None, position_ids: Optional[Tensor] = None,
                prefix_len: PrefixLen = None, inputs_embeds: Optional[Tensor] = None, labels: Optional[Tensor] = None,
                output_hidden_states: Optional[bool] = None, return_dict: Optional[bool] = None,
                **kwargs) -> Union[MaskedLMOutput, tuple]:
        encoded = self.model.encode(input_ids, attention_mask, token_type_ids, position_ids, prefix_len, inputs_embeds)
        logits = self.vocabulary_logits(encoded)
        return self.finish(encoded, MaskedLMOutput, return_dict, output_hidden_states,
                           loss=cross_entropy(logits, labels), logits=logits)


class ObjectiveBenchForCausalLM(WithBackbone, GenerationMixin):
    """Next-token logits: a causal backbone, or a prefix LM (span corruption) that reads its prompt bidirectionally
    and continues causally; `generate` makes the prompt the prefix. No KV cache (the suite caches causal reads only):
    each step reads the whole sequence again."""

    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__(config)
        self.post_init()

    def forward(self, input_ids: Optional[Tensor] = None, attention_mask: Optional[Tensor] = None,
                token_type_ids: Optional[Tensor] = None, position_ids: Optional[Tensor] = None,
                prefix_len: PrefixLen = None, inputs_embeds: Optional[Tensor] = None, labels: Optional[Tensor] = None,
                output_hidden_states: Optional[bool] = None, return_dict: Optional[bool] = None,
                **kwargs) -> Union[CausalLMOutput, tuple]:
        encoded = self.model.encode(input_ids, attention_mask, token_type_ids, position_ids, prefix_len, inputs_embeds)
        logits = self.vocabulary_logits(encoded)
        loss = None if labels is None else cross_entropy(logits[:, :-1], labels[:, 1:])
        return self.finish(encoded, CausalLMOutput, return_dict, output_hidden_states, loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids: Tensor, attention_mask: Optional[Tensor] = None,
                                      token_type_ids: Optional[Tensor] = None, prefix_len: PrefixLen = None,
                                      **kwargs) -> dict:
        return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
                "prefix_len": prefix_len}

    def generate(self, inputs: Optional[Tensor] = None, prefix_len: PrefixLen = None,
                 **kwargs) -> Union[Tensor, ModelOutput]:
        prompt = inputs if inputs is not None else kwargs.get("input_ids")
        if prefix_len is None and self.config.attention == "prefix" and prompt is not None:
            prefix_len = prompt.shape[1]
        return super().generate(inputs, prefix_len=prefix_len, **kwargs)


def head(**layers: nn.Module) -> nn.Module:
    module = nn.Module()
    for name, layer in layers.items():
        module.add_module(name, layer)
    return module


class ObjectiveBenchForPreTraining(WithBackbone):
    """ELECTRA's discriminator head (named as ElectraForPreTraining names it) or a sentence-pair objective's MLM
    and pair heads (BERT's pooler, dense and tanh, on the first position, then a two-way classifier)."""

    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__(config)
        d = config.hidden_size
        if config.pretraining_head == "electra":
            self.discriminator_predictions = head(dense=nn.Linear(d, d), dense_prediction=nn.Linear(d, 1))
        elif config.pretraining_head == "pair":
            self.pair_predictions = head(dense=nn.Linear(d, d), classifier=nn.Linear(d, 2))
        else:
            raise ValueError(f"pretraining_head must be 'electra' or 'pair', got {config.pretraining_head!r}")
        self.post_init()

    def forward(self, input_ids: Optional[Tensor] = None, attention_mask: Optional[Tensor] = None,
                token_type_ids: Optional[Tensor] = None, position_ids: Optional[Tensor] = None,
                prefix_len: PrefixLen = None, inputs_embeds: Optional[Tensor] = None, labels: Optional[Tensor] = None,
                next_sentence_label: Optional[Tensor] = None, output_hidden_states: Optional[bool] = None,
                return_dict: Optional[bool] = None, **kwargs) -> Union[ObjectiveBenchForPreTrainingOutput, tuple]:
        encoded = self.model.encode(input_ids, attention_mask, token_type_ids, position_ids, prefix_len, inputs_embeds)
        kind, outputs = ObjectiveBenchForPreTrainingOutput, (return_dict, output_hidden_states)
        if self.config.pretraining_head == "electra":
            predictions = self.discriminator_predictions
            logits = predictions.dense_prediction(F.gelu(predictions.dense(encoded.hidden))).squeeze(-1)
            logits = encoded.padding.shift(logits, back=True)
            loss = None if labels is None else F.binary_cross_entropy_with_logits(logits.float(), labels.float())
            return self.finish(encoded, kind, *outputs, loss=loss, logits=logits)
        predictions = self.pair_predictions
        prediction = self.vocabulary_logits(encoded)
        relationship = predictions.classifier(torch.tanh(predictions.dense(encoded.hidden[:, 0])))
        loss = None
        if labels is not None and next_sentence_label is not None:
            loss = cross_entropy(prediction, labels) + cross_entropy(relationship, next_sentence_label)
        return self.finish(encoded, kind, *outputs, loss=loss, prediction_logits=prediction,
                           seq_relationship_logits=relationship)


def classification_loss(config: ObjectiveBenchConfig, logits: Tensor, labels: Optional[Tensor]) -> Optional[Tensor]:
    """As transformers' sequence classifiers choose theirs: regression for one label, else cross-entropy (or
    binary cross-entropy per label for multi-label problems)."""
    if labels is None:
        return None
    problem = config.problem_type or ("regression" if config.num_labels == 1 else "single_label_classification")
    if problem == "regression":
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    if problem == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())
    return cross_entropy(logits, labels)


class ObjectiveBenchForSequenceClassification(WithBackbone):
    """A linear head on the sequence read as each family reads it (config.classifier_pooling: the mean over the
    tokens for a bidirectional backbone, the last token for a causal one, GPT's read)."""

    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__(config)
        self.transform = None  # a masked LM's vocabulary head is not a classifier's: its weights stay unused
        self.num_labels = config.num_labels
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids: Optional[Tensor] = None, attention_mask: Optional[Tensor] = None,
                token_type_ids: Optional[Tensor] = None, position_ids: Optional[Tensor] = None,
                prefix_len: PrefixLen = None, inputs_embeds: Optional[Tensor] = None, labels: Optional[Tensor] = None,
                output_hidden_states: Optional[bool] = None, return_dict: Optional[bool] = None,
                **kwargs) -> Union[SequenceClassifierOutput, tuple]:
        encoded = self.model.encode(input_ids, attention_mask, token_type_ids, position_ids, prefix_len, inputs_embeds)
        logits = self.classifier(pool(encoded.hidden, encoded.padding, self.config.classifier_pooling))
        return self.finish(encoded, SequenceClassifierOutput, return_dict, output_hidden_states,
                           loss=classification_loss(self.config, logits, labels), logits=logits)


class ObjectiveBenchForTokenClassification(WithBackbone):
    def __init__(self, config: ObjectiveBenchConfig) -> None:
        super().__init__(config)
        self.transform = None  # as in the sequence classifier
        self.num_labels = config.num_labels
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids: Optional[Tensor] = None, attention_mask: Optional[Tensor] = None,
                token_type_ids: Optional[Tensor] = None, position_ids: Optional[Tensor] = None,
                prefix_len: PrefixLen = None, inputs_embeds: Optional[Tensor] = None, labels: Optional[Tensor] = None,
                output_hidden_states: Optional[bool] = None, return_dict: Optional[bool] = None,
                **kwargs) -> Union[TokenClassifierOutput, tuple]:
        encoded = self.model.encode(input_ids, attention_mask, token_type_ids, position_ids, prefix_len, inputs_embeds)
        logits = encoded.padding.shift(self.classifier(encoded.hidden), back=True)
        return self.finish(encoded, TokenClassifierOutput, return_dict, output_hidden_states,
                           loss=cross_entropy(logits, labels), logits=logits)
