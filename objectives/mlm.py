"""Masked language modelling (BERT): choose `rate` of the positions, rewrite them 80/10/10, predict the originals.

Only the chosen positions are projected onto the vocabulary: at T = 512 that is 77 rows, not 512.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from backbone import ConfigError
from objectives.base import IGNORE, Corrupted, FloorSpec, Objective, Options, Output, check_fraction, check_split, \
    lm_flops, lm_forward
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


class MaskedLM(Objective):
    name = "mlm"
    options_class = MLMOptions
    attention = "bidirectional"

    def corrupt(self, tokens: Tensor, generator: torch.Generator) -> Corrupted:
        o = self.options
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

    @property
    def static_copies(self) -> int:
        return self.options.static

    def expected_supervised_positions(self, seq_len: int) -> float:
        """Exact rule and span masking: round(rate·T). Bernoulli: rate·T. Whole-word masking: round(rate·T) is its
        upper bound (reached when every token is a word); the measured count is reported beside it."""
        return expected_count(seq_len, self.options.rate, self.options.rule)

    def expected_split(self, seq_len: int) -> dict[str, float]:
        """Expected [MASK] / random / kept positions per sequence."""
        supervised = self.expected_supervised_positions(seq_len)
        return {share: supervised * getattr(self.options, share) for share in ("mask", "random", "keep")}

    def describe(self, seq_len: int) -> dict:
        split = self.expected_split(seq_len)
        # whole words fill round(rate·T) only when they fit exactly: the analytic count is then an upper bound
        upper_bound = self.options.whole_word and self.vocab.continuation is not None
        return {**split, "upper_bound": upper_bound,
                "parts": f"{split['mask']:.2f} / {split['random']:.2f} / {split['keep']:.2f}"}

    def measure_parts(self, batch: Corrupted) -> dict[str, float]:
        kinds, sequences = batch.info["rewrite"], batch.inputs.shape[0]
        return {f"measured_{share}": int((kinds == kind).sum()) / sequences
                for share, kind in (("mask", MASKED), ("random", RANDOM), ("keep", KEPT))}

    def bayes_floors(self) -> list[FloorSpec]:
        if self.options.span:
            return []  # one 80/10/10 decision per span couples the positions; the per-position model does not hold
        o = self.options
        return [FloorSpec("loss", "masked_token", keep=o.keep, random=o.random, mask=o.mask)]

    def forward(self, batch: Corrupted) -> Output:
        return lm_forward(self.backbone, batch)

    def flops(self, batch: Corrupted) -> int:
        return lm_flops(self.backbone, batch)

    def expected_flops_per_sequence(self, seq_len: int) -> float:
        # FLOPs are linear in the projected rows, so the expectation is the count at the expected row number.
        base = self.backbone.flops(1, seq_len, 0).training_step
        per_row = self.backbone.flops(1, seq_len, 1).training_step - base
        return base + per_row * self.expected_supervised_positions(seq_len)
