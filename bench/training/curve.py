"""A run's curve: one row per FLOP checkpoint in curve.jsonl (and in results.json), in three parts that never mix:
the counters at the top level, the objective's own held-out metrics under "metrics", and each yardstick's frozen
scores under its result key ("probes", "downstream"), as in result.json.

    {"checkpoint": 1e9, "step": 8, "flops": ..., "tokens": ..., "supervised_positions": ...,
     "metrics": {"loss": 4.47, "accuracy": 0.12}, "probes": {"hidden_state": 0.17, ...},
     "downstream": {"synthetic:tagging": 0.30}}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.files import read_jsonl
from bench.training.counters import Counters

COUNTERS = ("checkpoint", "step", "flops", "tokens", "supervised_positions")


@dataclass(frozen=True)
class CurvePoint:
    """One row of the curve, typed: where it was read (the counters), the objective's held-out metrics, and the
    yardsticks' frozen scores (None where a yardstick has no curve)."""

    checkpoint: float  # the FLOP checkpoint this row stands for
    step: int
    flops: int
    tokens: int
    supervised_positions: int
    metrics: dict[str, float | None]
    probes: dict | None = None
    downstream: dict | None = None

    def to_json(self) -> dict:
        row = {key: getattr(self, key) for key in (*COUNTERS, "metrics")}
        return {**row, **{key: value for key in ("probes", "downstream")
                          if (value := getattr(self, key)) is not None}}

    @classmethod
    def from_json(cls, row: dict) -> CurvePoint:
        return cls(**row)


def curve_row(counters: Counters, checkpoint: float, metrics: dict[str, float]) -> dict:
    """A checkpoint's row before the yardsticks add their parts."""
    return {"checkpoint": checkpoint, **{key: getattr(counters, key) for key in COUNTERS[1:]}, "metrics": metrics}


def read_curve(path: Path) -> tuple[CurvePoint, ...]:
    return tuple(CurvePoint.from_json(row) for row in read_jsonl(path))
