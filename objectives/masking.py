"""Choosing masked positions and rewriting them: the pieces MLM and ELECTRA share.

Every function is a deterministic function of (shape or tokens, generator) built from whole-tensor operations: no
Python loops over tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

from objectives.base import Vocab
from objectives.draws import Randomness, categorical, integers, uniform

RULES = ("exact", "bernoulli")

# What happened to each position, stored in Corrupted.info["rewrite"].
UNTOUCHED, MASKED, RANDOM, KEPT = 0, 1, 2, 3


def exact_count(seq_len: int, rate: float) -> int:
    """BERT's rule: max(1, round(rate · T)) positions per sequence (Python 3 rounding: ties go to even)."""
    return max(1, int(round(seq_len * rate)))


def expected_count(seq_len: int, rate: float, rule: str) -> float:
    """Expected chosen positions per sequence: exactly round(rate·T) under BERT's rule, rate·T under Bernoulli."""
    return float(exact_count(seq_len, rate)) if rule == "exact" else seq_len * rate


def select_positions(shape: tuple[int, int], rate: float, rule: str, generator: Randomness,
                     excluded: Tensor | None = None) -> Tensor:
    """Boolean (batch, T) mask of the chosen positions.

    "exact": exactly exact_count(T, rate) positions per sequence, uniformly without replacement (BERT).
    "bernoulli": each position independently with probability `rate` (Hugging Face's collator).
    `excluded` positions are never chosen; BERT still counts them in T (its [CLS] and [SEP]).
    """
    scores = uniform(generator, shape)
    if excluded is not None:
        scores = scores.masked_fill(excluded, -1.0)  # below every draw, so top-k never reaches them
    if rule == "bernoulli":
        return (scores < rate) & (scores >= 0)
    chosen = scores.topk(exact_count(shape[1], rate), dim=1).indices
    return torch.zeros(shape, dtype=torch.bool).scatter_(1, chosen, True)


def word_index(word_starts: Tensor) -> Tensor:
    """(batch, T): the index of the word each position belongs to, counted from 0 in each row."""
    return word_starts.long().cumsum(1) - 1


def select_whole_words(word_starts: Tensor, count: int, generator: Randomness) -> Tensor:
    """Whole-word masking, as BERT's `create_masked_lm_predictions` with `do_whole_word_mask`: go through the words in
    a random order and take each one whole if it still fits in the budget of `count` tokens, else skip it. The loop
    runs over word ranks, for every sequence at once, and stops as soon as every budget is full."""
    batch, seq_len = word_starts.shape
    words = word_index(word_starts)
    lengths = torch.zeros(batch, seq_len, dtype=torch.long).scatter_add_(1, words, torch.ones_like(words))
    scores = uniform(generator, (batch, seq_len)).masked_fill(lengths == 0, float("inf"))
    order = scores.argsort(dim=1)  # word ids in a random order (empty word slots last)
    lengths_in_order = lengths.gather(1, order)
    taken_in_order = torch.zeros(batch, seq_len, dtype=torch.bool)
    chosen = torch.zeros(batch, dtype=torch.long)
    for rank in range(seq_len):
        length = lengths_in_order[:, rank]
        fits = (length > 0) & (chosen + length <= count)
        taken_in_order[:, rank] = fits
        chosen += torch.where(fits, length, 0)
        if bool((chosen == count).all()):
            break
    taken = torch.zeros_like(taken_in_order).scatter_(1, order, taken_in_order)
    return taken.gather(1, words)


def span_length_distribution(p: float, max_words: int) -> Tensor:
    """SpanBERT's span lengths in words: Geometric(p) clipped at max_words (renormalised)."""
    lengths = torch.arange(1, max_words + 1, dtype=torch.float64)
    weights = p * (1 - p) ** (lengths - 1)
    return weights / weights.sum()


def select_spans(word_starts: Tensor, count: int, p: float, max_words: int,
                 generator: Randomness) -> tuple[Tensor, Tensor]:
    """SpanBERT's span masking: draw a length in words and a random anchor word not yet masked, mask that many
    whole words from the anchor, and repeat until exactly `count` tokens are chosen (the last span is cut at the
    budget, as in SpanBERT). One draw per iteration for every sequence at once (with a generator per row, only the
    rows still short draw).

    Returns (selected (batch, T) bool, span id per position: the position where its span starts, -1 where not
    selected)."""
    batch, seq_len = word_starts.shape
    positions = torch.arange(seq_len).expand(batch, seq_len)
    words = word_index(word_starts)
    num_words = words[:, -1] + 1
    # start position of word w in each row, with one past the end for w = num_words
    word_start_at = torch.full((batch, seq_len + 1), seq_len, dtype=torch.long)
    word_start_at.scatter_(1, torch.where(word_starts, words, seq_len), positions.clone())
    word_start_at[:, seq_len] = seq_len  # the scatter parked every non-start there
    distribution = span_length_distribution(p, max_words)
    selected = torch.zeros(batch, seq_len, dtype=torch.bool)
    span_id = torch.full((batch, seq_len), -1, dtype=torch.long)
    chosen = torch.zeros(batch, dtype=torch.long)
    for _ in range(100 * count + 100):  # bounded; each round adds a span to every sequence still short of `count`
        short = chosen < count
        if not short.any():
            break
        # only the rows still short draw: with a generator per row, a row's draws never depend on the others
        length = categorical(generator, distribution, batch, active=short) + 1
        anchor = (uniform(generator, (batch,), active=short) * num_words).long()
        low = word_start_at.gather(1, anchor[:, None])
        high = word_start_at.gather(1, torch.minimum(anchor + length, num_words)[:, None])
        fresh = short & ~selected.gather(1, low.clamp(max=seq_len - 1)).squeeze(1)  # SpanBERT skips a masked anchor
        new = (positions >= low) & (positions < high) & ~selected & fresh[:, None]
        new &= new.long().cumsum(1) <= (count - chosen)[:, None]  # cut the last span at the budget
        selected |= new
        span_id = torch.where(new, low, span_id)  # a fresh anchor is never selected, so its start is unique and < T
        chosen += new.sum(1)
    return selected, span_id


def rewrite(tokens: Tensor, selected: Tensor, mask: float, random: float, vocab: Vocab,
            generator: Randomness, unit: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """BERT's 80/10/10: each selected position becomes [MASK] (p = mask), a random ordinary token (p = random) or
    stays as it is (the rest). Random tokens are never special ids. Positions with the same `unit` id share one
    decision (SpanBERT decides per span); by default every position decides for itself (BERT, per sub-token).

    Returns (inputs, rewrite kind per position: UNTOUCHED / MASKED / RANDOM / KEPT).
    """
    draw = uniform(generator, tuple(tokens.shape))
    if unit is not None:
        draw = draw.gather(1, unit.clamp(min=0))
    random_tokens = integers(generator, vocab.first_ordinary, vocab.end_ordinary, tuple(tokens.shape))
    kind = torch.full(tokens.shape, KEPT)
    kind[draw < mask + random] = RANDOM
    kind[draw < mask] = MASKED
    kind[~selected] = UNTOUCHED
    inputs = torch.where(kind == MASKED, vocab.MASK, torch.where(kind == RANDOM, random_tokens, tokens))
    return inputs, kind
