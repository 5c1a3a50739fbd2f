"""Which Hugging Face format each objective's trained backbone becomes: the one place that knows the objectives.

- ar: a stock causal LM, GPT-NeoX for RoPE and GPT-2 for learned positions (a causal backbone that also carries
  segment embeddings, from a schedule that began with mlm:pair=..., has no stock home: the shipped family);
- mlm: the shipped family's masked LM (and a sentence-pair objective's pair head, for AutoModelForPreTraining);
- electra: its discriminator (AutoModelForPreTraining), and its generator as a masked LM in generator/;
- span: the shipped family's prefix LM (AutoModelForCausalLM generates with the prompt as the prefix).
A schedule is exported as its last piece, as the suite judges it. An objective not named here has no export.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import Tensor

from backbone import ConfigError
from bench.export.gpt2 import gpt2_config, gpt2_tensors
from bench.export.native import discriminator_export, encoder_export, generator_export
from bench.export.neox import neox_config, neox_tensors
from objectives import Objective


@dataclass
class Folder:
    """One folder `transformers` loads: config.json, the weights, whether the model code ships with it, and how its
    tokenizer and sentence-transformers read it."""

    name: str  # "" for the export's own folder, else a subfolder
    config: dict
    tensors: dict[str, Tensor]
    shipped: bool  # the family's code is copied beside the weights (trust_remote_code=True)
    causal: bool  # reads left to right: last-token sentence embeddings, its tokenizer's BOS is [EOS]
    segments: bool  # reads token_type_ids
    generates: bool  # writes generation_config.json


def last_piece(objective: Objective) -> Objective:
    """The objective a schedule is judged as (its last piece); any other objective itself."""
    return objective.piece(len(objective.starts) - 1)


def causal_folders(piece: Objective) -> list[Folder]:
    backbone, vocab = piece.backbone, piece.vocab
    if backbone.segment_embedding is not None:
        config, tensors = encoder_export(backbone, vocab, "causal", ("AutoModelForCausalLM",))
        return [Folder("", config, tensors, True, True, True, True)]
    if backbone.config.positions == "learned":
        return [Folder("", gpt2_config(backbone, vocab), gpt2_tensors(backbone), False, True, False, True)]
    return [Folder("", neox_config(backbone, vocab), neox_tensors(backbone), False, True, False, True)]


def masked_folders(piece: Objective) -> list[Folder]:
    backbone = piece.backbone
    config, tensors = encoder_export(backbone, piece.vocab, "bidirectional", ("AutoModelForMaskedLM",),
                                     getattr(piece, "pair_head", None), getattr(piece, "transform", None))
    return [Folder("", config, tensors, True, False, backbone.segment_embedding is not None, False)]


def electra_folders(piece: Objective) -> list[Folder]:
    backbone, vocab = piece.backbone, piece.vocab
    discriminator = discriminator_export(backbone, vocab, piece.discriminator_head)
    generator = generator_export(backbone, vocab, piece.generator_config, piece.generator_in, piece.generator,
                                 piece.generator_head)
    return [Folder("", *discriminator, True, False, False, False),
            Folder("generator", *generator, True, False, False, False)]


def prefix_folders(piece: Objective) -> list[Folder]:
    backbone = piece.backbone
    config, tensors = encoder_export(backbone, piece.vocab, "prefix", ("AutoModelForCausalLM",))
    return [Folder("", config, tensors, True, False, backbone.segment_embedding is not None, True)]


MAPPINGS: dict[str, Callable[[Objective], list[Folder]]] = {
    "ar": causal_folders, "mlm": masked_folders, "electra": electra_folders, "span": prefix_folders}


def folders_for(objective: Objective, spec: str) -> list[Folder]:
    """The folders `objective` (run as `spec`) is exported to; ConfigError when it has no export mapping."""
    piece = last_piece(objective)
    if piece.name not in MAPPINGS:
        raise ConfigError(f"objective {piece.name!r} (of {spec!r}) has no export mapping; exportable: "
                          f"{', '.join(MAPPINGS)}")
    return MAPPINGS[piece.name](piece)
