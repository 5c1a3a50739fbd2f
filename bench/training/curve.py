"""A run's curve: one row per FLOP checkpoint in curve.jsonl (and in results.json), in three parts that never mix:
the counters at the top level, the objective's own held-out metrics under "metrics", and each yardstick's frozen
scores under its result key ("probes", "downstream"), as in result.json.

    {"checkpoint": 1e9, "step": 8, "flops": ..., "tokens": ..., "supervised_positions": ...,
     "metrics": {"loss": 4.47, "accuracy": 0.12}, "probes": {"hidden_state": 0.17, ...},
     "downstream": {"synthetic:tagging": 0.30}}
"""

from __future__ import annotations

from pathlib import Path

from bench.files import read_jsonl

COUNTERS = ("checkpoint", "step", "flops", "tokens", "supervised_positions")


def curve_row(counters: dict, metrics: dict[str, float]) -> dict:
    """A checkpoint's row before the yardsticks add their parts."""
    return {**{key: counters[key] for key in COUNTERS}, "metrics": metrics}


def read_curve(path: Path) -> list[dict]:
    return read_jsonl(path)
