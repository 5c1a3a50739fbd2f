"""Objective schedules: `ar>mlm@0.25` trains one backbone with AR for the first 25 % of the FLOP budget, then with
MLM on the same weights for the rest (Gisserot-Boukhlef et al. 2025's CLM → MLM, continued pretraining).

A schedule is PIECE>PIECE@START[>PIECE@START ...]: each PIECE an objective spec of the registry, options included
(`ar>mlm:rate=0.4@0.5`), each START the fraction of the budget at which its piece takes over, increasing. The pieces
are the registry's objectives, unchanged, on one shared backbone; none of them knows it is in a schedule. The
schedule only says which piece made a batch (Corrupted.piece) and hands the batch to that piece.

Which piece trains a step is decided where the sequence-length schedule decides its length: the training loop's
phases are cut at the switches (bench.training.recipe), so a step starts in the piece whose share of the budget is
still ahead of the FLOPs counted before it: the switch is exact in FLOPs and a resumed run switches at the same step.

What carries over at a switch: the weights, the optimizer (AdamW's moments and step count) and the learning-rate
schedule, which runs over the whole budget (warm-up at the start, decay to the end) as one run's does. A piece's own
parameters (ELECTRA's generator and heads) are trained only in its share. The schedule is judged as its last piece:
held-out evaluation, Bayes floors and probe attention are the last piece's, as is the signal density per sequence
(the one the final phase measures).
"""

from __future__ import annotations

import re
from typing import Callable

from torch import Tensor, nn

from backbone import Backbone, ConfigError
from objectives.base import Corrupted, FloorSpec, Objective, Output, Vocab
from objectives.draws import Randomness, RowGenerators

START = re.compile(r"^(?P<spec>.*)@(?P<start>[^@]+)$")


def split_schedule(spec: str) -> tuple[list[str], list[float]]:
    """"ar>mlm@0.25" -> (["ar", "mlm"], [0.0, 0.25]): the pieces' specs and the fractions of the budget at which
    each starts. A spec without ">" is one piece from 0. Every mistake is one ConfigError line that names it."""
    parts = [part.strip() for part in spec.split(">")]
    specs, starts = [parts[0]], [0.0]
    if "@" in parts[0]:
        raise ConfigError(f"objective schedule {spec!r}: the first piece starts at 0 and takes no @START "
                          "(write e.g. ar>mlm@0.25)")
    for part in parts[1:]:
        match = START.match(part)
        if match is None:
            raise ConfigError(f"objective schedule {spec!r}: piece {part!r} needs the share of the budget at which "
                              "it starts, as in ar>mlm@0.25")
        try:
            start = float(match["start"])
        except ValueError:
            raise ConfigError(f"objective schedule {spec!r}: start {match['start']!r} is not a number") from None
        if not starts[-1] < start < 1:
            raise ConfigError(f"objective schedule {spec!r}: piece {match['spec'].strip()!r} starts at {start:g}; "
                              f"starts must increase from 0 and stay below 1 (the budget's end)")
        specs.append(match["spec"].strip())
        starts.append(start)
    if any(not piece for piece in specs):
        raise ConfigError(f"objective schedule {spec!r} has an empty piece")
    return specs, starts


class ObjectiveSchedule(Objective):
    """The pieces of a schedule on one backbone; every batch-taking method hands the batch to the piece that made
    it, everything else is the last piece's."""

    name = "schedule"

    def __init__(self, text: str, pieces: list[Objective], starts: list[float]) -> None:
        nn.Module.__init__(self)  # the pieces hold the backbone: registering it here too would list it twice
        self.text, self.starts = text, tuple(starts)
        self.pieces = nn.ModuleList(pieces)
        self.vocab, self.options = pieces[0].vocab, self.options_class()

    @property
    def backbone(self) -> Backbone:
        return self.pieces[0].backbone

    @property
    def last(self) -> Objective:
        return self.pieces[-1]

    def piece(self, index: int) -> Objective:
        return self.pieces[index]

    @property
    def piece_specs(self) -> list[str]:
        return [piece.spec() for piece in self.pieces]

    def spec(self) -> str:
        return self.text

    def pieces_with_own_parameters(self) -> list[str]:
        """The pieces that hold parameters beside the shared backbone (ELECTRA's generator, MLM's transform, a pair
        head): outside their share no gradient reaches those, so DDP looks for unused parameters
        (bench.training.state.setup_run)."""
        shared = {id(p) for p in self.backbone.parameters()}
        return [piece.spec() for piece in self.pieces if any(id(p) not in shared for p in piece.parameters())]

    @property
    def signals(self) -> frozenset[str]:
        return frozenset().union(*(piece.signals for piece in self.pieces))  # the backbone trained on every piece's

    # --- what the schedule is judged as: its last piece
    @property
    def attention(self) -> str:
        return self.last.attention

    @property
    def tagging_ceiling(self) -> str:
        return self.last.tagging_ceiling

    @property
    def perf_peer(self) -> str | None:
        return None  # bench.perf times the pieces, each against its own peer

    def corrupt(self, tokens: Tensor, generator: Randomness) -> Corrupted:
        return self.tagged(self.last.corrupt(tokens, generator), len(self.pieces) - 1)

    def corrupt_rows(self, tokens: Tensor, rows: slice, generator: RowGenerators) -> Corrupted:
        return self.tagged(self.last.corrupt_rows(tokens, rows, generator), len(self.pieces) - 1)

    @staticmethod
    def tagged(batch: Corrupted, index: int) -> Corrupted:
        batch.piece = index
        return batch

    def check_seq_len(self, seq_len: int) -> None:
        for piece in self.pieces:
            piece.check_seq_len(seq_len)

    def expected_supervised_positions(self, seq_len: int) -> float:
        return self.last.expected_supervised_positions(seq_len)

    def expected_flops_per_sequence(self, seq_len: int) -> float:
        return self.last.expected_flops_per_sequence(seq_len)

    def describe(self, seq_len: int) -> dict:
        described = self.last.describe(seq_len)
        before = ", ".join(f"{spec} from {start:.0%}" for spec, start in zip(self.piece_specs, self.starts))
        return {**described, "parts": f"{described['parts']} (last piece; {before} of the FLOPs)"}

    def bayes_floors(self) -> list[FloorSpec]:
        return self.last.bayes_floors()

    def pooled_metrics(self, outputs: list[Output]) -> dict[str, float]:
        return self.last.pooled_metrics(outputs)

    def replacement_story(self, batch: Corrupted) -> tuple[Tensor, float] | None:
        return self.last.replacement_story(batch)  # held-out batches are the last piece's

    def probe_attention(self, seq_len: int) -> dict:
        return self.last.probe_attention(seq_len)

    # --- a batch goes to the piece that made it
    def forward(self, batch: Corrupted) -> Output:
        return self.pieces[batch.piece](batch)

    def flops(self, batch: Corrupted) -> int:
        return self.pieces[batch.piece].flops(batch)

    def counted_positions(self, batch: Corrupted) -> int:
        return self.pieces[batch.piece].counted_positions(batch)

    def loss_counts(self, batch: Corrupted) -> dict[str, int]:
        return self.pieces[batch.piece].loss_counts(batch)

    def measure_parts(self, batch: Corrupted) -> dict[str, float]:
        return self.pieces[batch.piece].measure_parts(batch)


def build_schedule(text: str, backbone: Backbone, vocab: Vocab,
                   build_piece: Callable[[str, Backbone, Vocab], Objective]) -> ObjectiveSchedule:
    """The schedule `text` on `backbone`, its pieces built by `build_piece(spec, backbone, vocab)` in order (so a
    schedule's backbone starts from the same initialisation as a run of its first piece)."""
    specs, starts = split_schedule(text)
    return ObjectiveSchedule(text, [build_piece(spec, backbone, vocab) for spec in specs], starts)
