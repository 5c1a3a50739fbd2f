"""Choosing masked positions and rewriting them: the pieces MLM and ELECTRA share.

Every function is a deterministic function of (shape or tokens, generator) built from whole-tensor operations: no
Python loops over tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from objectives.base import Vocab

RULES = ("exact", "bernoulli")

# What happened to each position, stored in Corrupted.info["rewrite"].
UNTOUCHED, MASKED, RANDOM, KEPT = 0, 1, 2, 3


def exact_count(seq_len: int, rate: float) -> int:
    """BERT's rule: max(1, round(rate · T)) positions per sequence (Python 3 rounding: ties go to even)."""
    return max(1, int(round(seq_len * rate)))


def select_positions(shape: tuple[int, int], rate: float, rule: str, generator: torch.Generator) -> Tensor:
    """Boolean (batch, T) mask of the chosen positions.

    "exact": exactly exact_count(T, rate) positions per sequence, uniformly without replacement (BERT).
    "bernoulli": each position independently with probability `rate` (Hugging Face's collator).
    """
    scores = torch.rand(shape, generator=generator)
    if rule == "bernoulli":
        return scores < rate
    chosen = scores.topk(exact_count(shape[1], rate), dim=1).indices
    return torch.zeros(shape, dtype=torch.bool).scatter_(1, chosen, True)


def rewrite(tokens: Tensor, selected: Tensor, mask: float, random: float, vocab: Vocab,
            generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """BERT's 80/10/10: each selected position independently becomes [MASK] (p = mask), a random ordinary token
    (p = random) or stays as it is (the rest). Random tokens are never special ids.

    Returns (inputs, rewrite kind per position: UNTOUCHED / MASKED / RANDOM / KEPT).
    """
    draw = torch.rand(tokens.shape, generator=generator)
    random_tokens = torch.randint(vocab.first_ordinary, vocab.end_ordinary, tokens.shape, generator=generator)
    kind = torch.full(tokens.shape, KEPT)
    kind[draw < mask + random] = RANDOM
    kind[draw < mask] = MASKED
    kind[~selected] = UNTOUCHED
    inputs = torch.where(kind == MASKED, vocab.MASK, torch.where(kind == RANDOM, random_tokens, tokens))
    return inputs, kind
