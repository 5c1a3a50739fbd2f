"""What every objective shares: the vocabulary layout, the corrupted batch, the output, and the base class.

An objective is two halves. `corrupt(tokens, generator)` is a pure, seeded function of token ids (no model, easy to
test and to print). `forward(batch)` runs the shared backbone and returns the loss with the exact number of positions
that carried it. Each objective also states, analytically, how many positions it supervises and how many FLOPs one
training step executes, so the comparison can stop every objective at the same accounted compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from itertools import accumulate
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from backbone import Backbone, ConfigError
from backbone.fused_loss import linear_cross_entropy
from objectives.draws import Randomness, RowGenerators
from objectives.options import Options

IGNORE = -100  # target of a position that carries no loss (PyTorch's cross_entropy ignore_index)
# The one home of the special-token layout: ids 0-4 of every vocabulary (a trained tokenizer holds all five; the
# embedded language has no unknown words, so its ordinary tokens start at 4), and T5's sentinels on top of it.
SPECIAL_TOKENS = ("[PAD]", "[MASK]", "[BOS]", "[EOS]", "[UNK]")
NUM_SENTINELS = 100  # as T5's extra_ids; span corruption needs one per span (23 at T = 512)


@dataclass(frozen=True, eq=False)
class Vocab:
    """Token id layout: specials first ([PAD], [MASK], [BOS], [EOS], and [UNK] for a trained tokenizer), ordinary
    tokens next, T5 sentinels counting down from the top. `continuation` marks the ids that continue a word (WordPiece's
    "##" pieces), so whole-word and span masking know where words start; None means every token is a word."""

    size: int
    num_sentinels: int = 0
    first_ordinary: int = 4
    continuation: Tensor | None = None  # (size,) bool
    PAD = 0
    MASK = 1
    BOS = 2
    EOS = 3

    def __post_init__(self) -> None:
        if self.num_ordinary < 2:
            raise ConfigError(f"vocabulary of {self.size} ids with {self.num_sentinels} sentinels leaves "
                              f"{self.num_ordinary} ordinary tokens; need at least 2")

    @classmethod
    def for_words(cls, num_words: int, num_sentinels: int = NUM_SENTINELS) -> "Vocab":
        """A vocabulary whose ordinary tokens are `num_words` word types: word w is token w + 4."""
        return cls(4 + num_words + num_sentinels, num_sentinels)

    @classmethod
    def for_tokenizer(cls, tokenizer_size: int, continuation: Tensor | None = None) -> "Vocab":
        """The vocabulary of a tokenizer of `tokenizer_size` ids (the five special tokens included), with the
        sentinels added on top. This is what `--vocab-size` means in every command."""
        if tokenizer_size < len(SPECIAL_TOKENS) + 2:
            raise ConfigError(f"--vocab-size must be >= {len(SPECIAL_TOKENS) + 2} (5 special tokens and 2 ordinary "
                              f"ones), got {tokenizer_size}")
        return cls(tokenizer_size + NUM_SENTINELS, NUM_SENTINELS, len(SPECIAL_TOKENS), continuation)

    def word_starts(self, tokens: Tensor) -> Tensor:
        """(batch, T) bool: where a word starts. A window's first token always starts one (its word may have begun
        in the previous window, but nothing before it is visible)."""
        if self.continuation is None:
            return torch.ones_like(tokens, dtype=torch.bool)
        starts = ~self.continuation[tokens]
        starts[:, 0] = True
        return starts

    @property
    def end_ordinary(self) -> int:
        return self.size - self.num_sentinels

    @property
    def num_ordinary(self) -> int:
        return self.end_ordinary - self.first_ordinary

    def sentinel(self, index: Tensor | int) -> Tensor | int:
        """Id of the index-th sentinel (<extra_id_0> is the last id of the vocabulary, as in T5)."""
        return self.size - 1 - index


@dataclass
class Corrupted:
    """A corrupted batch: what the model sees and what it must predict, position by position.

    `supervised` lists the positions that carry a loss as flat (row-major) indices, and `row_offsets` where each row's
    share of them starts. Both are found once, on the host, when the batch is made (corrupt() runs on the CPU): a
    training step that looked them up on the device (`nonzero`, a count) would have to wait for the device to answer
    before it could launch the rest of its work."""

    inputs: Tensor  # (batch, T) token ids fed to the backbone
    targets: Tensor  # (batch, T) the token the output at each position must predict, IGNORE where unsupervised
    attention: str  # "bidirectional" | "causal" | "prefix"
    original: Tensor  # (batch, T_raw) the uncorrupted tokens the batch was made from
    prefix_len: int | None = None  # bidirectional prefix, for "prefix" attention
    info: dict[str, Tensor] = field(default_factory=dict)  # per-objective extras (e.g. the MLM rewrite kind)
    supervised: Tensor | None = None  # (supervised positions,) flat indices; found from `targets` when not given
    row_offsets: tuple[int, ...] = ()  # row r's indices are supervised[row_offsets[r]:row_offsets[r + 1]]
    piece: int = 0  # which piece of an objective schedule (objectives.schedule) made the batch; 0 for the others

    def __post_init__(self) -> None:
        if self.supervised is None:
            self.supervised = supervised_rows(self.targets)
            self.row_offsets = tuple(accumulate((self.targets != IGNORE).sum(1).tolist(), initial=0))

    @property
    def num_supervised(self) -> int:
        """Positions that carry a loss, known without looking at the device."""
        return self.row_offsets[-1]

    @staticmethod
    def concat(batches: list["Corrupted"]) -> "Corrupted":
        """Stack batches of one objective (same attention and prefix) into one."""
        first = batches[0]
        cat = lambda name: torch.cat([getattr(b, name) for b in batches])  # noqa: E731
        seq_len, rows, offsets, shifted = first.targets.shape[1], 0, [0], []
        for b in batches:
            shifted.append(b.supervised + rows * seq_len)
            base = offsets[-1]
            offsets.extend(base + offset for offset in b.row_offsets[1:])
            rows += len(b.targets)
        return Corrupted(cat("inputs"), cat("targets"), first.attention, cat("original"), first.prefix_len,
                         {k: torch.cat([b.info[k] for b in batches]) for k in first.info}, torch.cat(shifted),
                         tuple(offsets), first.piece)

    def rows(self, index: slice) -> "Corrupted":
        """The sequences `index` (a contiguous slice) of the batch: a process's share of a global batch, a
        micro-batch. Slicing only: no lookup that would wait for the device."""
        start, stop, stride = index.indices(len(self.targets))
        if stride != 1:
            raise ValueError("Corrupted.rows takes a contiguous slice")
        low, high = self.row_offsets[start], self.row_offsets[stop]
        supervised = self.supervised[low:high] - start * self.targets.shape[1]
        return Corrupted(self.inputs[index], self.targets[index], self.attention, self.original[index],
                         self.prefix_len, {k: v[index] for k, v in self.info.items()}, supervised,
                         tuple(offset - low for offset in self.row_offsets[start:stop + 1]), self.piece)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Corrupted":
        return self.apply(lambda tensor: tensor.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "Corrupted":
        """The batch in page-locked host memory, which a CUDA device copies from while the host goes on."""
        return self.apply(Tensor.pin_memory)

    def apply(self, function: Callable[[Tensor], Tensor]) -> "Corrupted":
        """The batch with `function` applied to each of its tensors."""
        return Corrupted(function(self.inputs), function(self.targets), self.attention, function(self.original),
                         self.prefix_len, {k: function(v) for k, v in self.info.items()}, function(self.supervised),
                         self.row_offsets, self.piece)


@dataclass
class Output:
    loss: Tensor  # scalar, what the optimiser minimises
    supervised_positions: int  # positions that carried a loss in this batch
    # per-objective diagnostics (accuracy, discriminator accuracy, ...): 0-d tensors (or floats), read only when
    # evaluating, so a training step need not wait for the device to compute them
    metrics: dict[str, Tensor | float]
    tensors: dict[str, Tensor] = field(default_factory=dict)  # detached intermediates worth inspecting
    # The loss as a sum of means, by the names Objective.loss_counts gives their counts under; None: one mean
    # (the loss itself, under "loss"). Gradient accumulation and DDP weigh each mean by its own counts.
    terms: dict[str, Tensor] | None = None

    def loss_terms(self) -> dict[str, Tensor]:
        return self.terms if self.terms is not None else {"loss": self.loss}


@dataclass(frozen=True)
class FloorSpec:
    """Which Bayes floor bounds one of an objective's held-out metrics, stated as the task the metric measures, so
    the bench computes floors without knowing objectives. "next_token": predict every next token from the left
    context. "masked_token": predict the chosen positions, each corrupted independently: [MASK] with probability
    `mask`, a uniformly random ordinary token with `random`, left as it is with `keep`. "span_tokens": T5's span
    corruption, each span of a uniform composition of the noise replaced by one sentinel, the targets each span's
    sentinel and words, then EOS (the batch's info holds the noise mask)."""

    metric: str  # the held-out metric it bounds, e.g. "loss" or "generator_loss"
    task: str  # "next_token" | "masked_token" | "span_tokens"
    keep: float = 0.0
    random: float = 0.0
    mask: float = 1.0


# What a backbone can be trained on, by name: a yardstick that asks one of these questions (or shows its input) mirrors
# every objective that has it, and then it can diagnose them but rank nobody (bench.analysis.measures).
SIGNALS = {
    "mask_token": "[MASK] in the input, and what it hides asked for",
    "next_token": "the next position asked for, from the left context",
    "replaced_token": "replaced tokens in the input, told apart from the originals",
    "sentence_order": "whether two segments are in their order",
    "next_sentence": "whether the second segment continues the first",
}


class Objective(nn.Module):
    name: str = ""
    options_class: type[Options] = Options
    attention: str = "bidirectional"  # the mode the backbone runs in; also the natural mode for probing features
    can_generate: bool = False  # whether incremental (KV-cached) generation is possible
    static_copies: int = 0  # > 0: each window has this many fixed corruptions, used in turn (BERT's dupe_factor)
    # A probe reading this backbone's features sees what its attention lets it see: the whole window ("smoothing",
    # the Bayes ceiling from the whole sequence) or only the left context ("filtering").
    tagging_ceiling: str = "smoothing"
    starts: tuple[float, ...] = (0.0,)  # an objective schedule's: where each piece starts, as shares of the budget

    def __init__(self, backbone: Backbone, vocab: Vocab, options: Options | None = None) -> None:
        super().__init__()
        if backbone.config.vocab_size != vocab.size:
            raise ConfigError(f"backbone vocab_size {backbone.config.vocab_size} != vocabulary size {vocab.size}")
        self.backbone = backbone
        self.vocab = vocab
        self.options = options if options is not None else self.options_class()
        self.options.validate()

    def piece(self, index: int) -> "Objective":
        """The objective that makes and scores the batches of piece `index` of a schedule: itself, for every
        objective but a schedule (objectives.schedule)."""
        return self

    # --- the pure half ---
    def corrupt(self, tokens: Tensor, generator: Randomness) -> Corrupted:
        raise NotImplementedError

    def corrupt_rows(self, tokens: Tensor, rows: slice, generator: RowGenerators) -> Corrupted:
        """Rows `rows` of the corruption of the batch `tokens`, each drawn from its own generator: what one process
        corrupts of a global batch, equal to the same rows of the whole batch's corruption. The rows are corrupted
        alone unless an objective's rows depend on the others (NSP's negatives borrow other windows)."""
        return self.corrupt(tokens[rows], generator)

    def check_seq_len(self, seq_len: int) -> None:
        """Raise ConfigError when this objective cannot run on windows of `seq_len` tokens."""
        if seq_len > self.backbone.config.max_seq_len:
            raise ConfigError(f"{self.name}: seq_len {seq_len} exceeds the model's max_seq_len "
                              f"{self.backbone.config.max_seq_len}")

    def expected_supervised_positions(self, seq_len: int) -> float:
        """Analytic loss-bearing positions per sequence of `seq_len` tokens."""
        raise NotImplementedError

    def counted_positions(self, batch: Corrupted) -> int:
        """Loss-bearing positions of a corrupted batch, counted without the model (forward reports the same)."""
        return batch.num_supervised

    def loss_counts(self, batch: Corrupted) -> dict[str, int]:
        """How many positions each mean in the loss (Output.loss_terms) averages over in this batch, counted on the
        host. A step split over processes or micro-batches weighs each part's mean by its share of these counts in
        the whole batch, so the accumulated gradient is the whole batch's. Default: the loss is one mean over the
        supervised positions."""
        return {"loss": self.counted_positions(batch)}

    # --- the model half ---
    def forward(self, batch: Corrupted) -> Output:
        raise NotImplementedError

    def flops(self, batch: Corrupted) -> int:
        """FLOPs of one training step (forward + backward) on this corrupted batch, under backbone.flops' convention."""
        raise NotImplementedError

    def expected_flops_per_sequence(self, seq_len: int) -> float:
        """Analytic training-step FLOPs per sequence, at the expected number of supervised positions."""
        raise NotImplementedError

    # --- what the bench asks, so that it never branches on an objective's name or class ---
    @property
    def signals(self) -> frozenset[str]:
        """What its backbone trains on (SIGNALS): the yardsticks that copy any of it mirror this objective."""
        return frozenset()

    def describe(self, seq_len: int) -> dict:
        """What the supervised positions per sequence are made of, analytically: named counts, plus "parts", one
        line for the signal-density table (empty when there is nothing to split)."""
        return {"parts": ""}

    def measure_parts(self, batch: Corrupted) -> dict[str, float]:
        """The measured counterpart of describe()'s counts, per sequence of this corrupted batch."""
        return {}

    def pooled_metrics(self, outputs: list[Output]) -> dict[str, float]:
        """Held-out metrics that are not means over batches (a ROC AUC), computed from the evaluation outputs'
        tensors together."""
        return {}

    def pieces_with_own_parameters(self) -> list[str]:
        """A schedule's pieces that hold parameters beside the shared backbone (objectives.schedule); none here."""
        return []

    def replacement_story(self, batch: Corrupted) -> tuple[Tensor, float] | None:
        """For an objective whose task is telling replaced tokens apart (ELECTRA): the distribution each position's
        replacement would be drawn from, (N, L, vocab), and the probability that a position is drawn, so that the
        embedded language can give the Bayes reference answer on exactly these held-out windows. None otherwise."""
        return None

    def bayes_floors(self) -> list[FloorSpec]:
        """The Bayes floors that bound this objective's held-out metrics; none when its corruption is not one the
        floors can express (coupled positions, packed spans)."""
        return []

    def probe_attention(self, seq_len: int) -> dict:
        """The attention a probe reads a whole clean window with: the objective's own mode (a prefix LM's
        bidirectional prefix stretched over the whole window)."""
        if self.attention == "prefix":
            return {"attention": "prefix", "prefix_len": seq_len}
        return {"attention": self.attention}

    @classmethod
    def tuning_trials(cls, spec: str, rates: tuple[float, ...]) -> list[tuple[str, float]]:
        """(spec to train, peak rate) of each pretraining trial bench.tune gives `spec`, as many as `rates` so that
        every objective gets the same number: by default the spec at every rate. An objective whose known failure
        turns on one of its options tunes that option together with the rate (ELECTRA's λ)."""
        return [(spec, rate) for rate in rates]

    @classmethod
    def report_note(cls, metrics: dict[str, str], closed: dict[str, str]) -> str | None:
        """A sentence the report prints below the loss table about this objective's own held-out metrics, given
        them formatted as "mean ± CI" (`metrics`) and the share of each floor-bounded metric's learnable range its
        runs closed (`closed`); None when the loss table says it all."""
        return None

    @property
    def perf_peer(self) -> str | None:
        """The Hugging Face peer bench.perf times this objective against (one of its peers' names), or None."""
        return self.name

    def spec(self) -> str:
        changed = [f"{f.name}={getattr(self.options, f.name)}" for f in fields(self.options)
                   if getattr(self.options, f.name) != f.default]
        return self.name + (":" + ",".join(changed) if changed else "")


def supervised_rows(targets: Tensor) -> Tensor:
    """Flat indices of the positions that carry a loss."""
    return (targets.reshape(-1) != IGNORE).nonzero().squeeze(1)


def token_loss(logits: Tensor, targets: Tensor) -> tuple[Tensor, dict[str, Tensor | float]]:
    """Mean cross-entropy over the given rows, with accuracy (a tensor). Zero rows give a zero loss, not NaN."""
    if targets.numel() == 0:
        return logits.sum() * 0.0, {"accuracy": float("nan")}
    loss = F.cross_entropy(logits.float(), targets)
    return loss, {"accuracy": (logits.argmax(-1) == targets).float().mean()}


def lm_forward(backbone: Backbone, batch: Corrupted, hidden: Tensor | None = None,
               transform: nn.Module | None = None) -> Output:
    """Run the backbone (unless its `hidden` states are given) and project only the supervised rows, through
    `transform` first where the objective's head has one (BERT's): the shared forward of mlm, ar and span. The
    projection and the cross-entropy are fused (backbone.fused_loss): the full logits never exist at once."""
    if hidden is None:
        hidden = backbone(batch.inputs, attention=batch.attention, prefix_len=batch.prefix_len)
    rows = batch.supervised
    read = hidden.reshape(-1, hidden.shape[-1]).index_select(0, rows)
    if rows.numel() == 0:
        # a zero loss that still reaches every parameter (the head's through its empty rows): DDP syncs gradients
        # only when every parameter has one, on every process, whatever rows a process's micro-batch drew
        head = transform(read).sum() * 0.0 if transform is not None else 0.0
        return Output(hidden.sum() * 0.0 + head, 0, {"accuracy": float("nan")})
    loss, correct = linear_cross_entropy(read if transform is None else transform(read),
                                         backbone.token_embedding.weight, batch.targets.reshape(-1).index_select(0, rows))
    # a tensor, divided in float64 where the device has it: the number a host-side count / rows would give
    exact = torch.float32 if correct.device.type == "mps" else torch.float64
    return Output(loss, rows.numel(), {"accuracy": correct.to(exact) / rows.numel()})


def lm_flops(backbone: Backbone, batch: Corrupted) -> int:
    batch_size, seq_len = batch.inputs.shape
    return backbone.flops(batch_size, seq_len, batch.num_supervised, batch.attention).training_step
