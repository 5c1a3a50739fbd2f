"""Masked language modelling (BERT): choose `rate` of the positions, rewrite them 80/10/10, predict the originals.

Only the chosen positions are projected onto the vocabulary: at T = 512 that is 77 rows, not 512.

With `pair=nsp` or `pair=sop` each window becomes a sentence pair (objectives.pairs) and a head on the first
position, BERT's pooler (dense, tanh) and a two-way classifier, predicts whether the pair is in order: loss = MLM +
pair loss, each a mean, as in BERT's pretraining loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from backbone import Backbone, ConfigError, Flops
from backbone.model import init_weights
from objectives.base import IGNORE, Corrupted, FloorSpec, Objective, Output, Vocab, lm_flops, lm_forward
from objectives.draws import Randomness, RowGenerators
from objectives.options import Options, check_fraction, check_split
from objectives.pairs import PAIR_TASKS, SPECIAL_POSITIONS, make_pairs, pair_layout
from objectives.masking import KEPT, MASKED, RANDOM, RULES, exact_count, expected_count, rewrite, select_positions, \
    select_spans, select_whole_words


@dataclass(frozen=True)
class MLMOptions(Options):
    rate: float = 0.15  # share of positions chosen for prediction
    mask: float = 0.8  # of the chosen: replaced by [MASK]
    random: float = 0.1  # of the chosen: replaced by a random ordinary token
    keep: float = 0.1  # of the chosen: left as they are
    rule: str = "exact"  # "exact": round(rate·T) per sequence (BERT); "bernoulli": each with p = rate (Hugging Face)
    whole_word: bool = False  # BERT's whole-word masking: words are the unit of selection, the split per sub-token
    span: str = ""  # "geometric": SpanBERT's span masking, lengths ~ Geometric(span_p) words clipped at span_max
    span_p: float = 0.2
    span_max: int = 10
    static: int = 0  # > 0: BERT's static masking, each window has this many fixed masks, used in turn by epoch
    pair: str = ""  # "nsp" | "sop": sentence pairs and a pair-classification loss beside MLM (objectives.pairs)

    def validate(self) -> None:
        check_fraction("mlm rate", self.rate, allow_zero=False)
        check_split("mlm", mask=self.mask, random=self.random, keep=self.keep)
        if self.rule not in RULES:
            raise ConfigError(f"mlm rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        if self.span not in ("", "geometric"):
            raise ConfigError(f"mlm span must be 'geometric' (or left out), got {self.span!r}")
        if self.span and self.whole_word:
            raise ConfigError("mlm span masking already masks whole words; drop whole_word")
        if (self.span or self.whole_word) and self.rule != "exact":
            raise ConfigError("mlm whole_word and span masking fill a budget of round(rate·T) tokens: use rule=exact")
        check_fraction("mlm span_p", self.span_p, allow_zero=False)
        if self.span_max < 1:
            raise ConfigError(f"mlm span_max must be >= 1, got {self.span_max}")
        if self.static < 0:
            raise ConfigError(f"mlm static must be >= 0 (0 = dynamic masking), got {self.static}")
        if self.pair not in ("", *PAIR_TASKS):
            raise ConfigError(f"mlm pair must be one of {', '.join(PAIR_TASKS)} (or left out), got {self.pair!r}")
        if self.pair and (self.span or self.whole_word):
            raise ConfigError("mlm pair= is built on token masking; drop whole_word and span")
        if self.pair and self.static:
            raise ConfigError("mlm pair= needs dynamic masking: static masking corrupts one window at a time, and "
                              "NSP's negatives come from the other windows of the batch")


class MaskedLM(Objective):
    name = "mlm"
    options_class = MLMOptions
    attention = "bidirectional"

    def __init__(self, backbone: Backbone, vocab: Vocab, options: MLMOptions | None = None) -> None:
        super().__init__(backbone, vocab, options)
        d = backbone.config.d_model
        # BERT's MLM head: dense, GELU, LayerNorm before the tied decoder, so the last layer is not itself pushed
        # to be the vocabulary's linear read (as GPT's tied head pushes AR's; ELECTRA's has its discriminator head)
        self.transform = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d, eps=backbone.config.norm_eps))
        self.transform.apply(init_weights)
        self.pair_head = None
        if self.options.pair:
            backbone.add_segment_embedding()
            self.pair_head = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, 2))  # BERT's pooler + classifier
            self.pair_head.apply(init_weights)

    def corrupt(self, tokens: Tensor, generator: Randomness) -> Corrupted:
        o = self.options
        if o.pair:
            return self.corrupt_pairs(tokens, generator)
        unit = None
        if o.span:
            selected, unit = select_spans(self.vocab.word_starts(tokens), exact_count(tokens.shape[1], o.rate),
                                          o.span_p, o.span_max, generator)
        elif o.whole_word:
            selected = select_whole_words(self.vocab.word_starts(tokens), exact_count(tokens.shape[1], o.rate),
                                          generator)
        else:
            selected = select_positions(tuple(tokens.shape), o.rate, o.rule, generator)
        inputs, kind = rewrite(tokens, selected, o.mask, o.random, self.vocab, generator, unit)
        targets = torch.where(selected, tokens, IGNORE)
        return Corrupted(inputs, targets, "bidirectional", tokens, info={"rewrite": kind})

    def corrupt_rows(self, tokens: Tensor, rows: slice, generator: RowGenerators) -> Corrupted:
        if not self.options.pair:
            return super().corrupt_rows(tokens, rows, generator)
        return self.corrupt_pairs(tokens[rows], generator, tokens, rows.start or 0)

    def corrupt_pairs(self, tokens: Tensor, generator: Randomness, batch: Tensor | None = None,
                      first_row: int = 0) -> Corrupted:
        """The window as a sentence pair (rows first_row, ... of `batch`, by default the whole batch: see
        make_pairs), then BERT's masking of round(rate·T) of its non-special positions."""
        o = self.options
        if o.pair == "nsp" and len(tokens if batch is None else batch) < 2:
            raise ValueError("mlm:pair=nsp draws its negatives from the other windows of a batch: need 2 or more")
        pairs = make_pairs(o.pair, tokens, generator, batch, first_row)
        laid_out, segments, special = pair_layout(pairs, self.vocab)
        selected = select_positions(tuple(laid_out.shape), o.rate, o.rule, generator, excluded=special)
        inputs, kind = rewrite(laid_out, selected, o.mask, o.random, self.vocab, generator)
        targets = torch.where(selected, laid_out, IGNORE)
        return Corrupted(inputs, targets, "bidirectional", tokens,
                         info={"rewrite": kind, "segments": segments, "is_next": pairs.is_next})

    def check_seq_len(self, seq_len: int) -> None:
        super().check_seq_len(seq_len)
        if self.options.pair and seq_len < SPECIAL_POSITIONS + 2:
            raise ConfigError(f"mlm:pair={self.options.pair} needs windows of at least {SPECIAL_POSITIONS + 2} tokens "
                              f"([BOS] a [EOS] b [EOS]), got {seq_len}")
        if self.options.pair and exact_count(seq_len, self.options.rate) > seq_len - SPECIAL_POSITIONS:
            raise ConfigError(f"mlm:pair={self.options.pair},rate={self.options.rate} masks more positions than the "
                              f"{seq_len - SPECIAL_POSITIONS} a window of {seq_len} has besides [BOS] and [EOS]")

    @property
    def static_copies(self) -> int:
        return self.options.static

    def expected_supervised_positions(self, seq_len: int) -> float:
        """Exact rule and span masking: round(rate·T). Bernoulli: rate·T. Whole-word masking: round(rate·T) is its
        upper bound (reached when every token is a word); the measured count is reported beside it. A pair objective
        adds its first position, which carries the pair loss."""
        return self.expected_masked_positions(seq_len) + (1 if self.options.pair else 0)

    def expected_masked_positions(self, seq_len: int) -> float:
        if self.options.pair and self.options.rule == "bernoulli":
            return (seq_len - SPECIAL_POSITIONS) * self.options.rate  # the special positions are never candidates
        return expected_count(seq_len, self.options.rate, self.options.rule)

    def expected_split(self, seq_len: int) -> dict[str, float]:
        """Expected [MASK] / random / kept positions per sequence."""
        masked = self.expected_masked_positions(seq_len)
        return {share: masked * getattr(self.options, share) for share in ("mask", "random", "keep")}

    def describe(self, seq_len: int) -> dict:
        split = self.expected_split(seq_len)
        # whole words fill round(rate·T) only when they fit exactly: the analytic count is then an upper bound
        upper_bound = self.options.whole_word and self.vocab.continuation is not None
        parts = f"{split['mask']:.2f} / {split['random']:.2f} / {split['keep']:.2f}"
        return {**split, "upper_bound": upper_bound, "parts": parts + (" + 1 pair" if self.options.pair else "")}

    def counted_positions(self, batch: Corrupted) -> int:
        return batch.num_supervised + (len(batch.targets) if self.options.pair else 0)

    def loss_counts(self, batch: Corrupted) -> dict[str, int]:
        if not self.options.pair:
            return super().loss_counts(batch)
        return {"masked": batch.num_supervised, "pair": len(batch.targets)}

    def measure_parts(self, batch: Corrupted) -> dict[str, float]:
        kinds, sequences = batch.info["rewrite"], batch.inputs.shape[0]
        return {f"measured_{share}": int((kinds == kind).sum()) / sequences
                for share, kind in (("mask", MASKED), ("random", RANDOM), ("keep", KEPT))}

    def bayes_floors(self) -> list[FloorSpec]:
        if self.options.span:
            return []  # one 80/10/10 decision per span couples the positions; the per-position model does not hold
        if self.options.pair:
            return []  # the windows are cut, spliced or swapped: no longer one contiguous sample of the language
        o = self.options
        return [FloorSpec("loss", "masked_token", keep=o.keep, random=o.random, mask=o.mask)]

    def forward(self, batch: Corrupted) -> Output:
        if not self.options.pair:
            return lm_forward(self.backbone, batch, transform=self.transform)
        hidden = self.backbone(batch.inputs, attention="bidirectional", segments=batch.info["segments"])
        masked = lm_forward(self.backbone, batch, hidden, self.transform)
        logits = self.pair_head(hidden[:, 0]).float()
        is_next = batch.info["is_next"]
        pair_loss = F.cross_entropy(logits, is_next)
        metrics = {**masked.metrics, "masked_loss": masked.loss.detach(), "pair_loss": pair_loss.detach(),
                   "pair_accuracy": (logits.argmax(-1) == is_next).float().mean()}
        return Output(masked.loss + pair_loss, masked.supervised_positions + len(is_next), metrics,
                      terms={"masked": masked.loss, "pair": pair_loss})

    def pair_head_flops(self, batch_size: int) -> Flops:
        """The pooler (d × d) and the classifier (d × 2) on each sequence's first position."""
        d = self.backbone.config.d_model
        return Flops(dense=2 * batch_size * d * (d + 2)) if self.options.pair else Flops()

    def transform_flops(self, rows: float) -> float:
        """The transform head (d × d) on the projected rows, forward and backward."""
        d = self.backbone.config.d_model
        return Flops(dense=2 * rows * d * d).training_step

    def vocabulary_logits(self, hidden: Tensor) -> Tensor:
        """What the MLM head makes of final hidden states: the transform, then the tied decoder."""
        return self.backbone.logits(self.transform(hidden))

    def flops(self, batch: Corrupted) -> int:
        return (lm_flops(self.backbone, batch) + int(self.transform_flops(batch.num_supervised))
                + self.pair_head_flops(len(batch.inputs)).training_step)

    def expected_flops_per_sequence(self, seq_len: int) -> float:
        # FLOPs are linear in the projected rows, so the expectation is the count at the expected row number.
        unprojected = self.backbone.flops(1, seq_len, 0).training_step
        per_row = self.backbone.flops(1, seq_len, 1).training_step - unprojected + self.transform_flops(1)
        return unprojected + self.pair_head_flops(1).training_step + per_row * self.expected_masked_positions(seq_len)

    @property
    def signals(self) -> frozenset[str]:
        o = self.options
        pair = {"nsp": "next_sentence", "sop": "sentence_order"}.get(o.pair)
        return frozenset(name for name, present in (("mask_token", o.mask > 0), ("replaced_token", o.random > 0),
                                                    (pair, pair is not None)) if present)

    @property
    def perf_peer(self) -> str | None:
        return None if self.options.pair else self.name
