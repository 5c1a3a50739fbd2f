"""T5 span corruption (Raffel et al. 2020, `random_spans_noise_mask`), run on the shared backbone as a prefix LM.

From `raw` tokens, round(raw · density) noise tokens are cut into round(noise / mean_span) spans; noise and non-noise
segments alternate, starting with non-noise. Inputs keep the non-noise tokens with each span replaced by a unique
sentinel, then EOS; targets are each span's sentinel followed by its tokens, then EOS. The packed sequence
[inputs ; targets] is read bidirectionally over the inputs and causally over the targets, so one decoder-only backbone
plays T5's encoder and decoder. `raw` is the largest length whose packed sequence fits in T; when the lengths skip T
(a new span adds 3 positions at once) the one or two left-over positions are padding that carries no loss.
The raw tokens are the first `raw` tokens of each window, so every objective reads the same windows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from backbone import ConfigError
from objectives.base import IGNORE, Corrupted, FloorSpec, Objective, Output, lm_flops, lm_forward
from objectives.options import Options, check_fraction
from objectives.draws import Randomness, uniform


@dataclass(frozen=True)
class SpanOptions(Options):
    density: float = 0.15  # share of raw tokens that become noise
    mean_span: float = 3.0  # mean noise-span length

    def validate(self) -> None:
        check_fraction("span density", self.density, allow_zero=False)
        if self.mean_span < 1:
            raise ConfigError(f"span mean_span must be >= 1, got {self.mean_span}")


@dataclass(frozen=True)
class SpanLengths:
    raw: int  # raw tokens consumed
    noise: int
    spans: int
    inputs: int  # raw − noise + spans + 1 (EOS): the bidirectional prefix
    targets: int  # noise + spans + 1 (EOS): the supervised positions
    padding: int  # packed length − inputs − targets (0, 1 or 2)


def noise_and_spans(raw: int, density: float, mean_span: float) -> tuple[int, int]:
    """T5's counts: noise = round(raw·density) clipped to [1, raw−1]; spans = max(1, round(noise / mean_span))."""
    noise = min(max(int(round(raw * density)), 1), raw - 1)
    return noise, max(1, int(round(noise / mean_span)))


def packed_lengths(seq_len: int, density: float, mean_span: float) -> SpanLengths:
    """The largest raw length whose [inputs ; targets] fits in `seq_len` positions."""
    best = None
    for raw in range(2, seq_len):  # packed length = raw + 2·spans + 2 grows with raw
        noise, spans = noise_and_spans(raw, density, mean_span)
        if raw + 2 * spans + 2 > seq_len:
            break
        best = (raw, noise, spans)
    if best is None:
        raise ConfigError(f"span: seq_len {seq_len} is too short for span corruption (need at least 6)")
    raw, noise, spans = best
    if raw - noise < spans:
        raise ConfigError(f"span: density {density} with mean_span {mean_span} leaves fewer non-noise tokens "
                          f"({raw - noise}) than spans ({spans}); lower the density or raise mean_span")
    inputs, targets = raw - noise + spans + 1, noise + spans + 1
    return SpanLengths(raw, noise, spans, inputs, targets, seq_len - inputs - targets)


def random_segmentation(batch_size: int, items: int, segments: int, generator: Randomness) -> Tensor:
    """(batch, segments) positive lengths summing to `items`, uniform over all such compositions (T5's
    `_random_segmentation`): segments − 1 distinct cut points among the items − 1 gaps."""
    cuts = uniform(generator, (batch_size, items - 1)).topk(segments - 1, dim=1).indices + 1
    bounds = torch.cat([torch.zeros(batch_size, 1, dtype=torch.long), cuts.sort(dim=1).values,
                        torch.full((batch_size, 1), items)], dim=1)
    return bounds.diff(dim=1)


def noise_mask(batch_size: int, lengths: SpanLengths, generator: Randomness) -> Tensor:
    """(batch, raw) bool, True on noise; segments alternate non-noise, noise, ... starting with non-noise."""
    noise = random_segmentation(batch_size, lengths.noise, lengths.spans, generator)
    non_noise = random_segmentation(batch_size, lengths.raw - lengths.noise, lengths.spans, generator)
    segment_ends = torch.stack([non_noise, noise], dim=2).reshape(batch_size, -1).cumsum(dim=1)
    positions = torch.arange(lengths.raw).expand(batch_size, -1).contiguous()
    return torch.searchsorted(segment_ends, positions, right=True) % 2 == 1


class SpanCorruption(Objective):
    name = "span"
    options_class = SpanOptions
    attention = "prefix"

    def lengths(self, seq_len: int) -> SpanLengths:
        lengths = packed_lengths(seq_len, self.options.density, self.options.mean_span)
        if lengths.spans > self.vocab.num_sentinels:
            raise ConfigError(f"span: {lengths.spans} spans at seq_len {seq_len} need as many sentinels; the "
                              f"vocabulary has {self.vocab.num_sentinels}")
        return lengths

    def check_seq_len(self, seq_len: int) -> None:
        super().check_seq_len(seq_len)
        self.lengths(seq_len)

    def corrupt(self, tokens: Tensor, generator: Randomness) -> Corrupted:
        batch_size, seq_len = tokens.shape
        lengths = self.lengths(seq_len)
        raw = tokens[:, :lengths.raw]
        noise = noise_mask(batch_size, lengths, generator)
        span_start = noise & ~torch.nn.functional.pad(noise[:, :-1], (1, 0))
        span_index = span_start.cumsum(dim=1) - 1
        sentinels = self.vocab.sentinel(span_index)

        # inputs: non-noise tokens, and one sentinel where each span starts
        kept = ~noise | span_start
        inputs = torch.where(span_start, sentinels, raw)[kept].view(batch_size, lengths.inputs - 1)

        # targets: sentinel_k, span k's tokens, ... ; a noise token's slot counts the noise and sentinels before it
        noise_before = noise.cumsum(dim=1) - 1
        targets = torch.empty(batch_size, lengths.targets - 1, dtype=tokens.dtype)
        targets.scatter_(1, (noise_before + span_index + 1)[noise].view(batch_size, -1), raw[noise].view(batch_size, -1))
        targets.scatter_(1, (noise_before + span_index)[span_start].view(batch_size, -1),
                         sentinels[span_start].view(batch_size, -1))

        eos = torch.full((batch_size, 1), self.vocab.EOS, dtype=tokens.dtype)
        pad = torch.full((batch_size, lengths.padding), self.vocab.PAD, dtype=tokens.dtype)
        packed = torch.cat([inputs, eos, targets, eos, pad], dim=1)
        # the output at position p predicts packed[p + 1] for every target token: from the inputs' EOS onwards
        aligned = torch.full_like(packed, IGNORE)
        first = lengths.inputs - 1
        aligned[:, first:first + lengths.targets] = packed[:, lengths.inputs:lengths.inputs + lengths.targets]
        return Corrupted(packed, aligned, "prefix", tokens, prefix_len=lengths.inputs, info={"noise": noise})

    def expected_supervised_positions(self, seq_len: int) -> float:
        return float(self.lengths(seq_len).targets)

    def describe(self, seq_len: int) -> dict:
        n = self.lengths(seq_len)
        return {"noise_tokens": n.noise, "spans": n.spans, "raw_tokens": n.raw, "input_positions": n.inputs,
                "padding": n.padding, "parts": f"{n.noise} noise tokens in {n.spans} spans of {n.raw} raw tokens"}

    def bayes_floors(self) -> list[FloorSpec]:
        return [FloorSpec("loss", "span_tokens")]

    @property
    def signals(self) -> frozenset[str]:
        return frozenset({"mask_token"})  # a sentinel hides each span, whose tokens it is asked for

    @property
    def perf_peer(self) -> str:
        return "ar"  # the same decoder-only model at the same packed length: what span corruption costs elsewhere

    def forward(self, batch: Corrupted) -> Output:
        return lm_forward(self.backbone, batch)

    def flops(self, batch: Corrupted) -> int:
        return lm_flops(self.backbone, batch)

    def expected_flops_per_sequence(self, seq_len: int) -> float:
        lengths = self.lengths(seq_len)
        return float(self.backbone.flops(1, seq_len, lengths.targets, "prefix").training_step)
