"""Sentence pairs: BERT's next-sentence prediction (NSP) and ALBERT's sentence-order prediction (SOP).

A window of T tokens becomes "[BOS] a [EOS] b [EOS]": its first C = T − 3 tokens are cut at a random point h into
a (the first h) and b (the rest), and the model is told which segment each position is in. Half the pairs are the
window as it was ("is next"); the other half are negatives:
- nsp: b is replaced by the same positions of another window of the batch, i.e. another sequence (another document;
  on the embedded language usually another component), so NSP can be solved by the topic alone, the known critique;
- sop: the two segments swap places, "[BOS] b [EOS] a [EOS]": the same tokens and topic, only the order is wrong.
The cut h is uniform over a range that is symmetric under h -> C − h, so a swap leaves the separator's position
distributed as before: where [EOS] sits says nothing about the label.

Everything is a deterministic function of (tokens, generator), shared by the pretraining objective (mlm:pair=...) and
the embedded pair tasks (bench.yardsticks.embedded_tasks synthetic:order and synthetic:same-source), so a probe asks
exactly the question the objective trained on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from objectives.base import Vocab
from objectives.draws import Randomness, integers, uniform

PAIR_TASKS = ("nsp", "sop")
# the embedded downstream task that asks each pair question of held-out pairs made the same way (synthetic:NAME)
EMBEDDED_TASK_OF = {"nsp": "same-source", "sop": "order"}
SPECIAL_POSITIONS = 3  # [BOS], the separating [EOS] and the final [EOS]


@dataclass
class Pairs:
    """A batch of pairs before the layout: the C content tokens of each row in the order they are shown, the length
    of the first segment, and the label (1: the pair is a true continuation in order)."""

    content: Tensor  # (batch, C)
    first_length: Tensor  # (batch,) h: the first segment is content[:h]
    is_next: Tensor  # (batch,) long, 1 for positives


def cut_range(content_length: int) -> tuple[int, int]:
    """The inclusive range the cut h is drawn from: the middle half of the content, symmetric under h -> C − h."""
    low = max(1, content_length // 4)
    return low, content_length - low


def make_pairs(task: str, tokens: Tensor, generator: Randomness, batch: Tensor | None = None,
               first_row: int = 0) -> Pairs:
    """Cut each window's first T − 3 tokens into two segments and make half of the rows negatives of `task`.
    `tokens` are rows first_row, first_row + 1, ... of `batch` (by default the whole batch): NSP's negatives borrow
    from any window of `batch`, so a process corrupting its own rows of a global batch pairs them as the whole batch
    would."""
    if task not in PAIR_TASKS:
        raise ValueError(f"unknown pair task {task!r}; choose one of {', '.join(PAIR_TASKS)}")
    batch = tokens if batch is None else batch
    rows, seq_len = tokens.shape
    content_length = seq_len - SPECIAL_POSITIONS
    low, high = cut_range(content_length)
    cut = integers(generator, low, high + 1, (rows,))
    is_next = (uniform(generator, (rows,)) < 0.5).long()
    other = (torch.arange(rows) + first_row + integers(generator, 1, max(2, len(batch)), (rows,))) % len(batch)
    content = tokens[:, :content_length]
    positions = torch.arange(content_length).expand(rows, content_length)
    negative = is_next == 0
    if task == "nsp":
        # b from another window, at the positions it would have held: a true continuation of that other sequence
        borrowed = torch.where(positions >= cut[:, None], batch[other, :content_length], content)
        return Pairs(torch.where(negative[:, None], borrowed, content), cut, is_next)
    # sop: rotate the content left by h, so b comes first; the first segment is then C − h long
    rotated = content.gather(1, (positions + cut[:, None]) % content_length)
    return Pairs(torch.where(negative[:, None], rotated, content),
                 torch.where(negative, content_length - cut, cut), is_next)


def pair_layout(pairs: Pairs, vocab: Vocab) -> tuple[Tensor, Tensor, Tensor]:
    """(tokens, segments, special), each (batch, C + 3): "[BOS] first [EOS] second [EOS]", segment 0 up to and
    including the separating [EOS], 1 after it, and where the three special positions are (never masked, as in
    BERT; a text window may hold [EOS] tokens of its own, so they are found by position, not by id)."""
    batch, content_length = pairs.content.shape
    seq_len = content_length + SPECIAL_POSITIONS
    positions = torch.arange(seq_len).expand(batch, seq_len)
    separator = pairs.first_length[:, None] + 1  # [BOS] occupies position 0
    # content index read by each position: i − 1 before the separator, i − 2 after it
    index = torch.where(positions < separator, positions - 1, positions - 2).clamp(0, content_length - 1)
    special = (positions == 0) | (positions == separator) | (positions == seq_len - 1)
    tokens = pairs.content.gather(1, index)
    tokens[:, 0] = vocab.BOS
    tokens[special & (positions > 0)] = vocab.EOS
    return tokens, (positions > separator).long(), special


def segments_from_separators(tokens: Tensor, separator: int = Vocab.EOS) -> Tensor:
    """Segment ids of laid-out pairs, read back from their tokens: 1 after the first separator, 0 up to it."""
    is_separator = (tokens == separator).long()
    return ((is_separator.cumsum(1) - is_separator) > 0).long()
