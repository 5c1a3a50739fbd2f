"""The yardsticks as the analysis reads them from run records: each a name, a label, its value at the budget and at
a curve point, its ceiling, its input-only control and its direction (the probes' questions, then every downstream
task frozen and fine-tuned, and their average)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

QUESTIONS = ("hidden_state", "replaced_word", "component")


def ceiling_key(question: str, sees: str) -> str:
    """The key of a probe question's Bayes ceiling (bench.yardsticks.probes.probe_ceilings) for a reader that sees
    `sees`."""
    return question if question == "component" else f"{question}_{sees}"


# The cross-objective yardsticks on the embedded language: (key in results.json, the probe result it reads, divided
# by the ceiling that applies to the reader?, its label in sentences), the main one first: the replaced word is what
# every objective's features are pushed towards (which word fits here?). Raw losses of different objectives are
# never one.
PROBE_YARDSTICKS = (("replaced_word_share", "replaced_word", True, "replaced-word detection (share of its ceiling)"),
                    ("hidden_state_share", "hidden_state", True, "hidden state from context (share of its ceiling)"),
                    ("replaced_word_finetuned_share", "replaced_word_finetuned", True,
                     "fine-tuned replaced-word detection (share of its ceiling)"),
                    ("component", "component", False, "component classification (frozen)"))


@dataclass(frozen=True)
class Yardstick:
    """A cross-objective measure: its value at the budget for a run (or an untrained control), and at a curve point
    (the FLOP checkpoints the compute multipliers are read from) when it has a curve; its best possible value where
    one is known (1 for a share of the Bayes ceiling); and its direction (a task's, from its metrics)."""

    name: str
    label: str
    final: Callable[[dict], float | None]  # run -> value
    point: Callable[[dict], float | None] | None = None  # curve row -> value
    ceiling: Callable[[str], float | None] = lambda sees: None  # what the reader sees -> the best value
    input_only: Callable[[str], float | None] = lambda sees: None  # what the reader sees -> the input-only control
    higher_is_better: bool = True


def yardstick_value(probes: dict, key: str, share: bool, ceilings: dict) -> float | None:
    value = probes.get(key)
    if value is None or not share:
        return value
    ceiling = ceilings.get(ceiling_key(key.removesuffix("_finetuned"), probes.get("sees", "smoothing")))
    return None if not ceiling else value / ceiling


def task_names(runs: list[dict]) -> list[str]:
    return list(dict.fromkeys(name for run in runs for name in (run.get("downstream") or {})))


def downstream_value(run: dict, task: str, mode: str) -> float | None:
    return ((run.get("downstream") or {}).get(task) or {}).get(mode, {}).get("score")


def frozen_point(row: dict, task: str) -> float | None:
    """A task's frozen-probe score in a curve row (written at every FLOP checkpoint)."""
    return (row.get("downstream") or {}).get(task)


def average(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else sum(values) / len(values)


def yardsticks(runs: list[dict], ceilings: dict, input_only: dict | None = None,
               tasks_described: list[dict] | None = None) -> list[Yardstick]:
    """The probes' yardsticks, then per downstream task its frozen and fine-tuned score, and their GLUE-style average
    over tasks when several ran."""
    def probe_ceiling(key: str, share: bool) -> Callable[[str], float | None]:
        return lambda sees: 1.0 if share else ceilings.get(ceiling_key(key, sees))

    def probe_input_only(key: str, share: bool) -> Callable[[str], float | None]:
        def value(sees: str) -> float | None:
            found = ((input_only or {}).get(sees) or {}).get(key)
            if found is None or not share:
                return found
            ceiling = ceilings.get(ceiling_key(key, sees))
            return found / ceiling if ceiling else None
        return value

    found = [Yardstick(name, label, lambda run, k=key, s=share: yardstick_value(run.get("probes") or {}, k, s, ceilings),
                       lambda point, k=key, s=share: yardstick_value(point.get("probes") or {}, k, s, ceilings),
                       probe_ceiling(key, share), probe_input_only(key.removesuffix("_finetuned"), share))
             for name, key, share, label in PROBE_YARDSTICKS]
    bayes = {t["task"]: t.get("bayes_ceiling") for t in tasks_described or []}
    higher = {t["task"]: t.get("higher_is_better", True) for t in tasks_described or []}
    tasks = task_names(runs)
    for mode, reading in (("finetuned", "fine-tuned"), ("frozen", "frozen probe")):
        point = (lambda row, t=tasks: average([frozen_point(row, task) for task in t])) if mode == "frozen" else None
        if len(tasks) > 1:
            found.append(Yardstick(f"downstream_average_{mode}", f"downstream average over {len(tasks)} tasks "
                                   f"({reading})", lambda run, m=mode: average([downstream_value(run, task, m)
                                                                              for task in tasks]), point,
                                   higher_is_better=all(higher.get(task, True) for task in tasks)))
        for task in tasks:
            found.append(Yardstick(f"{task} ({mode})", f"task {task} ({reading})",
                                   lambda run, t=task, m=mode: downstream_value(run, t, m),
                                   (lambda row, t=task: frozen_point(row, t)) if mode == "frozen" else None,
                                   lambda sees, t=task: bayes.get(t), higher_is_better=higher.get(task, True)))
    return found


def mean_curve(runs: list[dict], point: Callable[[dict], float | None]) -> list[tuple[float, float]]:
    """(checkpoint, mean over seeds) at the checkpoints every seed reached with a value."""
    by_checkpoint: dict[float, list[float]] = defaultdict(list)
    for run in runs:
        for row in run["curve"]:
            value = point(row)
            if value is not None:
                by_checkpoint[row["checkpoint"]].append(value)
    return [(flops, sum(v) / len(v)) for flops, v in sorted(by_checkpoint.items()) if len(v) == len(runs)]


def final_values(runs: list[dict], yardstick: Yardstick) -> list[float]:
    return [value for run in runs for value in [yardstick.final(run)] if value is not None]
