"""The yardsticks as the analysis reads them from run records: each a name, a label, its reading at the budget and at a
curve point (a value, and the hits per test example that let a CI include the test set's sampling), its ceiling, what
the input alone gives, its direction, and the training signals it copies.

A yardstick that copies an objective's training input or task (objectives.SIGNALS) mirrors that objective: it shows
how well the objective did its own homework, and no answer, win or multiplier is drawn from it. The neutral ones
decide; the main one is their average over tasks, read frozen at every FLOP checkpoint (the curves multipliers come
from).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from bench.analysis.uncertainty import Group, Part
from bench.common.files import unpack_counts
from bench.training.records import CurvePoint, Record, RunRecord

# the probes' questions (bench.yardsticks.probes): (key in results.json, the probe result it reads, label, copies)
PROBE_YARDSTICKS = (
    ("hidden_state_share", "hidden_state", "hidden state from context (share of its ceiling)",
     ("mask_token", "next_token")),
    ("replaced_word_share", "replaced_word", "replaced-word detection (share of its ceiling)", ("replaced_token",)),
    ("replaced_word_finetuned_share", "replaced_word_finetuned",
     "fine-tuned replaced-word detection (share of its ceiling)", ("replaced_token",)))
PROBE_CLUSTERS = "probe windows"  # every probe question asks about the same test windows
MAIN = "neutral_average_frozen"
# how each task is read (bench.yardsticks.downstream): each mode a yardstick of its own where the runs hold it
MODES = {"frozen": "frozen probe", "finetuned": "fine-tuned",
         "feature_based": "frozen, last four layers concatenated: BERT's feature-based read"}


@dataclass(frozen=True)
class Reading:
    """A backbone's score on a yardstick, and its parts: (test set, hits per example, units per example, weight),
    Σ weight · Σ hits / Σ units being the score; None where the score is not a mean over scored units."""

    value: float
    parts: tuple[tuple[str, np.ndarray, np.ndarray, float], ...] | None = None


@dataclass(frozen=True)
class Measure:
    """How the analysis reads one yardstick off a run or control record (bench.training.state.Yardstick is what
    measures it during training): its final reading, its curve point, its ceiling and input-only control, and the
    training signals its question copies."""

    name: str
    label: str
    final: Callable[[Record], Reading | None]  # run or control -> reading at the budget
    point: Callable[[CurvePoint], Reading | None] | None = None  # curve row -> reading at that checkpoint
    ceiling: Callable[[str], float | None] = lambda sees: None  # what the reader sees -> the best value
    input_only: Callable[[str], float | None] = lambda sees: None  # what the reader sees -> what the input gives
    higher_is_better: bool = True
    copies: tuple[str, ...] = ()  # training signals (objectives.SIGNALS) its question or inputs copy

    def mirrors(self, signals: dict[str, list[str]]) -> list[str]:
        """The objectives (spec -> its signals) whose training input or task this yardstick copies."""
        return [spec for spec, own in signals.items() if set(own) & set(self.copies)]


def reading(record: dict | None, clusters: str, weight: float = 1.0) -> Reading | None:
    """A stored score ({"score", "hits", "units"}, or a bare number) as a Reading scaled by `weight`."""
    if record is None:
        return None
    if not isinstance(record, dict):
        return Reading(weight * record)
    if record.get("score") is None:
        return None
    parts = None if "hits" not in record else (
        (clusters, unpack_counts(record["hits"]), unpack_counts(record["units"]), weight),)
    return Reading(weight * record["score"], parts)


def averaged(readings: list[Reading | None]) -> Reading | None:
    """The mean of several tasks' readings (a GLUE-style average), each part weighted by 1 / tasks."""
    if not readings or any(r is None for r in readings):
        return None
    share = 1 / len(readings)
    parts = None if any(r.parts is None for r in readings) else tuple(
        (clusters, hits, units, share * weight) for r in readings for clusters, hits, units, weight in r.parts)
    return Reading(sum(r.value for r in readings) * share, parts)


def probe_yardsticks(ceilings: dict, input_only: dict | None) -> list[Measure]:
    """The probes' questions as shares of the ceiling that applies to the reader: diagnostics (they mirror)."""
    def share(record: dict | None, key: str) -> Reading | None:
        sees = (record or {}).get("sees", "smoothing")
        ceiling = ceilings.get(f"{key.removesuffix('_finetuned')}_{sees}")
        return reading((record or {}).get(key), PROBE_CLUSTERS, 1 / ceiling) if ceiling else None

    def control(key: str) -> Callable[[str], float | None]:
        def value(sees: str) -> float | None:
            found, ceiling = ((input_only or {}).get(sees) or {}).get(key), ceilings.get(f"{key}_{sees}")
            return None if found is None or not ceiling else found / ceiling
        return value

    return [Measure(name, label, lambda run, k=key: share(run.probes, k), None, lambda sees: 1.0,
                      control(key.removesuffix("_finetuned")), copies=copies)
            for name, key, label, copies in PROBE_YARDSTICKS]


def task_yardsticks(runs: list[Record], tasks: list[dict] | None) -> list[Measure]:
    """Per task its frozen and fine-tuned score, and the average of the neutral tasks (those that copy no training
    signal of these runs' objectives: a sentence-order task is neutral where no objective trains on sentence order,
    as the verdict reads each yardstick) in each mode: the main yardstick is the frozen one, read at every FLOP
    checkpoint."""
    described = {t["task"]: t for t in tasks or []}
    names = list(dict.fromkeys(name for run in runs for name in (run.downstream or {})))
    trained_on = {signal for run in runs for signal in getattr(run, "signals", None) or ()}
    neutral = [name for name in names if not set(described.get(name, {}).get("copies", ())) & trained_on]
    found = []
    for mode, reads in MODES.items():
        if len(neutral) > 1:
            found.append(Measure(f"neutral_average_{mode}", f"neutral tasks' average over {len(neutral)} "
                                   f"({reads})", lambda run, m=mode: averaged([task_reading(run, t, m) for t in neutral]),
                                   (lambda row: averaged([point_reading(row, t) for t in neutral])) if mode == "frozen"
                                   else None, higher_is_better=all(described.get(t, {}).get("higher_is_better", True)
                                                                   for t in neutral)))
        for name in names:
            about = described.get(name, {})
            found.append(Measure(
                f"{name} ({mode})", f"task {name} ({reads})", lambda run, t=name, m=mode: task_reading(run, t, m),
                (lambda row, t=name: point_reading(row, t)) if mode == "frozen" else None,
                lambda sees, c=about.get("ceilings") or {}: c.get(sees),
                lambda sees, v=about.get("input_only"): v, about.get("higher_is_better", True),
                tuple(about.get("copies", ()))))
    return found


def main_yardstick(found: list[Measure], mirrors: dict[str, list[str]]) -> str | None:
    """The yardstick the answer comes from: the neutral tasks' frozen average, or the one neutral task read frozen;
    None where no neutral yardstick with a curve ran."""
    neutral = [y.name for y in found if y.point is not None and not mirrors.get(y.name)]
    return MAIN if MAIN in neutral else next(iter(neutral), None)


def task_reading(run: Record, task: str, mode: str) -> Reading | None:
    return reading(((run.downstream or {}).get(task) or {}).get(mode), task)


def point_reading(row: CurvePoint, task: str) -> Reading | None:
    """A task's frozen-probe reading in a curve row (written at every FLOP checkpoint)."""
    return reading((row.downstream or {}).get(task), task)


def yardsticks(runs: list[Record], ceilings: dict, input_only: dict | None = None,
               tasks: list[dict] | None = None) -> list[Measure]:
    """The tasks' yardsticks (the neutral average first), then the probes' questions."""
    return [*task_yardsticks(runs, tasks), *(probe_yardsticks(ceilings, input_only)
                                            if any(run.probes for run in runs) else [])]


def group(runs: list, read: Callable[[Any], Reading | None]) -> Group | None:
    """The seeds' readings as one Group (None unless every seed has one): the hits per example stacked over seeds,
    or no parts where any seed has none or their test sets differ."""
    readings = [read(run) for run in runs]
    if not readings or any(r is None for r in readings):
        return None
    values = np.array([r.value for r in readings], dtype=float)
    if any(r.parts is None for r in readings) or len({len(r.parts) for r in readings}) != 1:
        return Group(values)
    parts = []
    for index, (clusters, _, units, weight) in enumerate(readings[0].parts):
        if any(not np.array_equal(r.parts[index][2], units) for r in readings):
            return Group(values)
        parts.append(Part(clusters, np.stack([r.parts[index][1] for r in readings]), units, weight))
    return Group(values, tuple(parts))


def curve_groups(runs: list[RunRecord], yardstick: Measure) -> tuple[list[float], list[Group]] | None:
    """(checkpoints, a Group per checkpoint) over the checkpoints every seed reached with a reading."""
    if yardstick.point is None:
        return None
    by_checkpoint: dict[float, dict[int, CurvePoint]] = defaultdict(dict)
    for index, run in enumerate(runs):
        for row in run.curve:
            by_checkpoint[row.checkpoint][index] = row
    checkpoints, groups = [], []
    for flops, rows in sorted(by_checkpoint.items()):
        found = group([rows[i] for i in range(len(runs))], yardstick.point) if len(rows) == len(runs) else None
        if found is not None:
            checkpoints.append(flops)
            groups.append(found)
    return (checkpoints, groups) if groups else None
