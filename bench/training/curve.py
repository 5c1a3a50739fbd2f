"""A run's curve: one row per FLOP checkpoint in curve.jsonl (and in results.json), in three parts that never mix:
the counters at the top level, the objective's own held-out metrics under "metrics", and each yardstick's frozen
scores under its result key ("probes", "downstream"), as in result.json.

    {"checkpoint": 1e9, "step": 8, "flops": ..., "tokens": ..., "supervised_positions": ...,
     "metrics": {"loss": 4.47, "accuracy": 0.12}, "probes": {"hidden_state": 0.17, ...},
     "downstream": {"synthetic:tagging": 0.30}}

Folders written before the rows had parts hold flat rows; `upgrade` reads them, in this one place.
"""

from __future__ import annotations

from pathlib import Path

from bench.files import read_jsonl

COUNTERS = ("checkpoint", "step", "flops", "tokens", "supervised_positions")
# what a flat row's probes wrote beside the metrics, and the prefix of its downstream scores
FLAT_PROBE_KEYS = ("hidden_state", "replaced_word", "replaced_word_finetuned", "component", "sees", "probe_flops")
FLAT_DOWNSTREAM_PREFIX = "downstream:"


def curve_row(counters: dict, metrics: dict[str, float]) -> dict:
    """A checkpoint's row before the yardsticks add their parts."""
    return {**{key: counters[key] for key in COUNTERS}, "metrics": metrics}


def upgrade(row: dict) -> dict:
    """A row as this version writes it, from either format."""
    if "metrics" in row:
        return row
    probes = {k: v for k, v in row.items() if k in FLAT_PROBE_KEYS}
    downstream = {k.removeprefix(FLAT_DOWNSTREAM_PREFIX): v for k, v in row.items()
                  if k.startswith(FLAT_DOWNSTREAM_PREFIX)}
    metrics = {k: v for k, v in row.items()
               if k not in COUNTERS and k not in probes and not k.startswith(FLAT_DOWNSTREAM_PREFIX)}
    return {**{k: row[k] for k in COUNTERS if k in row}, "metrics": metrics,
            **({"probes": probes} if probes else {}), **({"downstream": downstream} if downstream else {})}


def read_curve(path: Path) -> list[dict]:
    return [upgrade(row) for row in read_jsonl(path)]


def upgrade_result(result: dict | None) -> dict | None:
    """A run's record (result.json, or a run of results.json) with its curve in this version's rows."""
    if result is None or "curve" not in result:
        return result
    return {**result, "curve": [upgrade(row) for row in result["curve"]]}
