"""Labelled examples as padded token windows: a task's splits (Split), the task (Task), what it is tokenized with
(TaskContext), and the encoders every source uses.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Callable

import torch
from tokenizers import Tokenizer
from torch import Tensor

from bench.common.seeds import derive_seed
from bench.data import synthetic
from objectives import IGNORE, Vocab

SPLIT_SEED = 0



@dataclass(frozen=True)
class TaskOptions:
    text: str = "text"  # field of the (first) text
    text_pair: str = ""  # field of the second text of a pair task; empty: single texts
    label: str = "label"
    dev: str = ""  # a file, or the share of train drawn as dev (default 0.1)
    test: str = ""  # a file, or the share of the examples drawn as test (default 0.2)
    metric: str = ""  # accuracy, f1 (binary: class id 1 is positive), macro_f1, mcc, span_f1
    train: int = 0  # keep at most this many training examples (0: all)
    size: int = 512  # synthetic tasks: training examples (dev a quarter of it, test half)
    # the training signals (objectives.SIGNALS) the task's question copies, "+"-separated (replaced_token for a
    # replaced-word task, say): such a task diagnoses the objectives that have them and ranks nobody
    copies: str = ""


@dataclass
class Split:
    tokens: Tensor  # (N, T) int64, [PAD] after each example's last token
    lengths: Tensor  # (N,) tokens before the padding
    labels: Tensor  # (N,) class ids, or (N, T) for tagging with IGNORE where nothing is scored

    def __len__(self) -> int:
        return len(self.tokens)

    def rows(self, index: Tensor | slice) -> "Split":
        return Split(self.tokens[index], self.lengths[index], self.labels[index])


@dataclass
class Task:
    name: str  # how reports name it: the spec, or a file task's file (or folder) name (bench.yardsticks.tasks)
    level: str  # "sequence" (one label per example) or "token" (one per word)
    metrics: tuple[str, ...]  # computed on the test split; the task's score is their mean
    label_names: list[str]
    train: Split
    dev: Split
    test: Split
    source: str  # where the examples and splits came from, for the report
    pair: bool = False
    first_position: bool = False  # "[BOS] a [EOS] b [EOS]" pairs: bidirectional backbones read them at [BOS]
    # the embedded language's tasks: per kind of reader (Objective.tagging_ceiling), the Bayes classifier's expected
    # accuracy on the test split by exact inference in the language that generated it; empty where the truth is unknown
    ceilings: dict[str, float] = field(default_factory=dict)
    input_only: float | None = None  # the score of what the input alone gives (embedded tasks: exact or a probe)
    copies: tuple[str, ...] = ()  # the training signals (objectives.SIGNALS) the task's question copies
    spec: str = ""  # the spec as given, which loads it again (config.json); "" where it is the name

    @property
    def copied(self) -> tuple[str, ...]:
        """The signals it copies, a [MASK] shown in its inputs among them: a cloze is masked-LM's own question."""
        masked = any(bool((split.tokens == Vocab.MASK).any()) for split in (self.train, self.test))
        return tuple(dict.fromkeys([*self.copies, *(["mask_token"] if masked else [])]))

    @property
    def classes(self) -> int:
        return len(self.label_names)

    @property
    def seed(self) -> int:
        """Fine-tuning batches of this task are drawn from it: the same for every objective, seed and rate."""
        return derive_seed(SPLIT_SEED, zlib.crc32(self.name.encode()))

    def majority_accuracy(self) -> float:
        """The trivial baseline: always answer the most frequent training label, scored on the test split."""
        train, test = (split.labels[split.labels != IGNORE] for split in (self.train, self.test))
        return (test == train.bincount(minlength=self.classes).argmax()).double().mean().item()

    def describe(self) -> dict:
        return {"task": self.name, "level": self.level, "metric": " & ".join(self.metrics), "classes": self.classes,
                "train": len(self.train), "dev": len(self.dev), "test": len(self.test), "source": self.source,
                "majority_accuracy": self.majority_accuracy(), "ceilings": self.ceilings, "input_only": self.input_only,
                "copies": list(self.copied)}


@dataclass
class TaskContext:
    """What tasks are tokenized with: the comparison's window, vocabulary, and tokenizer or embedded language."""

    seq_len: int
    vocab: Vocab
    tokenizer: Tokenizer | None = None
    language: synthetic.Language | None = None
    spell: Callable[[int], str] | None = None  # synthetic:text: words are spelled, then tokenized with `tokenizer`


def encode(context: TaskContext, texts: list[str], pairs: list[str] | None, labels: Tensor) -> Split:
    """Tokenize; a single text is "a [EOS]", a pair "a [EOS] b [EOS]", the longer side truncated first."""
    tokenizer, window, eos = context.tokenizer, context.seq_len, Vocab.EOS
    first = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    second = [e.ids for e in tokenizer.encode_batch(pairs, add_special_tokens=False)] if pairs is not None else None
    rows = []
    for i, a in enumerate(first):
        if second is None:
            rows.append(a[:window - 1] + [eos])
            continue
        b = second[i]
        room = window - 2
        keep_a = min(len(a), max(room // 2, room - len(b)))
        keep_b = min(len(b), room - keep_a)
        rows.append(a[:keep_a] + [eos] + b[:keep_b] + [eos])
    return pad(rows, labels, window)


def pad(rows: list[list[int]], labels: Tensor, window: int) -> Split:
    tokens = torch.full((len(rows), window), Vocab.PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    return Split(tokens, torch.tensor([len(row) for row in rows], dtype=torch.long), labels)


def encode_tagged(context: TaskContext, sentences: list[list[str]], tags: list[list[int]]) -> Split:
    """Each word's first piece carries its tag (the rest are not scored, as in BERT's NER); truncated to the window."""
    window = context.seq_len
    encodings = context.tokenizer.encode_batch(sentences, is_pretokenized=True, add_special_tokens=False)
    rows, labels = [], torch.full((len(sentences), window), IGNORE, dtype=torch.long)
    for i, encoding in enumerate(encodings):
        ids, seen = encoding.ids[:window - 1], set()
        for position, word in enumerate(encoding.word_ids[:window - 1]):
            if word is not None and word not in seen:
                seen.add(word)
                labels[i, position] = tags[i][word]
        rows.append(ids + [Vocab.EOS])
    return pad(rows, labels, window)
