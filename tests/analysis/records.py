"""Run records as a comparison writes them, made by hand with known hits on known test examples: the analysis tests'
input, so every number they check is arithmetic done here."""

from __future__ import annotations

import numpy as np

from bench.analysis.summaries import Results
from bench.common.files import pack_counts
from bench.training.records import RUN_SCHEMA, ControlRecord, CurvePoint, RunRecord

BUDGET = 1e12
CHECKPOINTS = [float(f) for f in BUDGET * np.logspace(-2, 0, 5)]


def score(correct: np.ndarray) -> dict:
    """A sequence-level task's stored score: hits and units per test example (one unit each)."""
    correct = np.asarray(correct, dtype=int)
    return {"score": float(correct.mean()), "hits": pack_counts(correct), "units": pack_counts(np.ones_like(correct))}


def examples(accuracy: float, count: int, rng: np.random.Generator) -> np.ndarray:
    return (rng.random(count) < accuracy).astype(int)


def run(spec: str, seed: int, finals: dict[str, float], rng: np.random.Generator, control: str = "untrained, x",
        signals: tuple[str, ...] = (), curve: dict[str, list[float]] | None = None, count: int = 400,
        flops: float = BUDGET, supervised: float = 1e5) -> RunRecord:
    """A run whose frozen and fine-tuned score on each task is drawn around `finals` (per task), with a frozen curve
    through `curve`'s values at CHECKPOINTS (default: rising to the final value)."""
    downstream, rows = {}, [{"checkpoint": c, "step": i, "flops": c, "tokens": 1, "supervised_positions": 1,
                             "metrics": {"loss": 1.0}, "downstream": {}} for i, c in enumerate(CHECKPOINTS)]
    for task, accuracy in finals.items():
        points = (curve or {}).get(task) or list(np.linspace(0.3, accuracy, len(CHECKPOINTS)))
        for row, value in zip(rows, points):
            row["downstream"][task] = score(examples(value, count, rng))
        downstream[task] = evaluated(rows[-1]["downstream"][task], score(examples(accuracy, count, rng)))
    return RunRecord(
        schema=RUN_SCHEMA, objective=spec, seed=seed, attention="bidirectional", lr=1e-3, control=control,
        signals=list(signals), sees="smoothing", revision="test", threads=1, steps=10, flops=flops, tokens=1000,
        supervised_positions=supervised, phases=[], cooldown_steps=2, cooldown_flops=flops // 5,
        supervised_per_sequence=1.0, flops_per_step=flops / 10,
        wall_seconds=1.0, train_seconds=1.0, tokens_per_second=1000.0, parameters=100, backbone_parameters=100,
        expected_supervised_per_sequence=1.0, expected_flops_per_sequence=1.0,
        curve=tuple(CurvePoint.from_json(row) for row in rows), downstream=downstream)


def control(name: str, read_as: str, seed: int, finals: dict[str, float], rng: np.random.Generator,
            count: int = 400) -> ControlRecord:
    return ControlRecord(
        schema=RUN_SCHEMA, control=name, read_as=read_as, seed=seed, attention="bidirectional", flops=0,
        sees="smoothing", revision="test", threads=1,
        downstream={task: evaluated(score(examples(a, count, rng)), score(examples(a, count, rng)))
                    for task, a in finals.items()})


def evaluated(frozen: dict, finetuned: dict) -> dict:
    """A task's final scores as Downstream.at_end stores them: one rate of the grid, chosen on dev."""
    return {"frozen": frozen, "finetuned": {**finetuned, "lr": 1e-3, "dev": {"0.001": finetuned["score"]}},
            "pooling": "mean over tokens", "flops": {"frozen": 1.0, "finetune": 2.0}}


def task(name: str, copies: tuple[str, ...] = ()) -> dict:
    return {"task": name, "level": "sequence", "higher_is_better": True, "copies": list(copies), "ceilings": {},
            "input_only": None}


def results(finals: dict[str, dict[str, float]], control_finals: dict[str, float], seeds: int = 5,
            tasks: list[dict] | None = None, seed: int = 0) -> Results:
    """A comparison's Results (runs, controls, tasks, the summaries and the verdict) from hand-made records."""
    from bench.analysis.results import Measured, build_results

    rng = np.random.default_rng(seed)
    tasks = tasks or [task(name) for name in next(iter(finals.values()))]
    runs = [run(spec, s, scores, rng) for spec, scores in finals.items() for s in range(seeds)]
    controls = [control("untrained, x", "mlm", s, control_finals, rng) for s in range(seeds)]
    positions = [{"objective": spec, "supervised_positions": 10.0} for spec in finals]
    return build_results(Measured(setup={}, positions=positions, runs=runs, budget_flops=BUDGET, seq_len=64,
                                  tasks=tasks, controls=controls))
