"""Run records as a comparison writes them, made by hand with known hits on known test examples: the analysis tests'
input, so every number they check is arithmetic done here."""

from __future__ import annotations

import numpy as np

from bench.files import pack_counts

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
        flops: float = BUDGET, supervised: float = 1e5) -> dict:
    """A run whose frozen and fine-tuned score on each task is drawn around `finals` (per task), with a frozen curve
    through `curve`'s values at CHECKPOINTS (default: rising to the final value)."""
    downstream, rows = {}, [{"checkpoint": c, "step": i, "flops": c, "tokens": 1, "supervised_positions": 1,
                             "metrics": {"loss": 1.0}, "downstream": {}} for i, c in enumerate(CHECKPOINTS)]
    for task, accuracy in finals.items():
        points = (curve or {}).get(task) or list(np.linspace(0.3, accuracy, len(CHECKPOINTS)))
        for row, value in zip(rows, points):
            row["downstream"][task] = score(examples(value, count, rng))
        downstream[task] = {"frozen": rows[-1]["downstream"][task], "finetuned": score(examples(accuracy, count, rng))}
    return {"objective": spec, "seed": seed, "control": control, "signals": list(signals), "sees": "smoothing",
            "tokens": 1000.0, "backbone_parameters": 100, "flops": flops, "supervised_positions": supervised,
            "downstream": downstream, "curve": rows}


def control(name: str, read_as: str, seed: int, finals: dict[str, float], rng: np.random.Generator,
            count: int = 400) -> dict:
    return {"control": name, "read_as": read_as, "seed": seed, "sees": "smoothing", "flops": 0,
            "downstream": {task: {"frozen": score(examples(a, count, rng)), "finetuned": score(examples(a, count, rng))}
                           for task, a in finals.items()}}


def task(name: str, copies: tuple[str, ...] = ()) -> dict:
    return {"task": name, "level": "sequence", "higher_is_better": True, "copies": list(copies), "ceilings": {},
            "input_only": None}


def results(finals: dict[str, dict[str, float]], control_finals: dict[str, float], seeds: int = 5,
            tasks: list[dict] | None = None, seed: int = 0) -> dict:
    """A comparison's results.json dict (runs, controls, tasks and its verdict) from hand-made records."""
    from bench.analysis.results import by_control, by_objective
    from bench.analysis.verdict import verdict

    rng = np.random.default_rng(seed)
    tasks = tasks or [task(name) for name in next(iter(finals.values()))]
    runs = [run(spec, s, scores, rng) for spec, scores in finals.items() for s in range(seeds)]
    controls = [control("untrained, x", "mlm", s, control_finals, rng) for s in range(seeds)]
    objectives = [{"objective": spec, "compute": {"supervised_positions": 1e5, "flops": BUDGET}} for spec in finals]
    positions = [{"objective": spec, "supervised_positions": 10.0} for spec in finals]
    found = verdict(by_objective(runs), next(iter(finals)), {}, positions, objectives, BUDGET, by_control(controls),
                    None, tasks)
    return {"runs": runs, "controls": controls, "tasks": tasks, "bayes": None, "setup": {}, "budget_flops": BUDGET,
            "objectives": [], "answer": found.pop("answer"), "verdict": found}
