"""Masked language modelling (BERT): choose `rate` of the positions, rewrite them 80/10/10, predict the originals.

Only the chosen positions are projected onto the vocabulary: at T = 512 that is 77 rows, not 512.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from backbone import ConfigError
from objectives.base import IGNORE, Corrupted, Objective, Options, Output, check_fraction, check_split, lm_flops, \
    lm_forward
from objectives.masking import RULES, exact_count, rewrite, select_positions


@dataclass(frozen=True)
class MLMOptions(Options):
    rate: float = 0.15  # share of positions chosen for prediction
    mask: float = 0.8  # of the chosen: replaced by [MASK]
    random: float = 0.1  # of the chosen: replaced by a random ordinary token
    keep: float = 0.1  # of the chosen: left as they are
    rule: str = "exact"  # "exact": round(rate·T) per sequence (BERT); "bernoulli": each with p = rate (Hugging Face)

    def validate(self) -> None:
        check_fraction("mlm rate", self.rate, allow_zero=False)
        check_split("mlm", mask=self.mask, random=self.random, keep=self.keep)
        if self.rule not in RULES:
            raise ConfigError(f"mlm rule must be one of {', '.join(RULES)}, got {self.rule!r}")


class MaskedLM(Objective):
    name = "mlm"
    options_class = MLMOptions
    attention = "bidirectional"

    def corrupt(self, tokens: Tensor, generator: torch.Generator) -> Corrupted:
        o = self.options
        selected = select_positions(tuple(tokens.shape), o.rate, o.rule, generator)
        inputs, kind = rewrite(tokens, selected, o.mask, o.random, self.vocab, generator)
        targets = torch.where(selected, tokens, IGNORE)
        return Corrupted(inputs, targets, "bidirectional", tokens, info={"rewrite": kind})

    def expected_supervised_positions(self, seq_len: int) -> float:
        return float(exact_count(seq_len, self.options.rate)) if self.options.rule == "exact" \
            else seq_len * self.options.rate

    def expected_split(self, seq_len: int) -> dict[str, float]:
        """Expected [MASK] / random / kept positions per sequence."""
        supervised = self.expected_supervised_positions(seq_len)
        return {share: supervised * getattr(self.options, share) for share in ("mask", "random", "keep")}

    def forward(self, batch: Corrupted) -> Output:
        return lm_forward(self.backbone, batch)

    def flops(self, batch: Corrupted) -> int:
        return lm_flops(self.backbone, batch)

    def expected_flops_per_sequence(self, seq_len: int) -> float:
        # FLOPs are linear in the projected rows, so the expectation is the count at the expected row number.
        base = self.backbone.flops(1, seq_len, 0).training_step
        per_row = self.backbone.flops(1, seq_len, 1).training_step - base
        return base + per_row * self.expected_supervised_positions(seq_len)
