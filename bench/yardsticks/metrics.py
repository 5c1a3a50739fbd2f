"""The downstream tasks' metrics, each registered with its direction, as lm-evaluation-harness registers its own
(scikit-learn, and seqeval for entity spans, as the CoNLL and GLUE papers score them). A task's score is the mean of
its metrics (GLUE averages F1 and accuracy for MRPC/QQP), so a task's metrics must share one direction; the verdict
ranks, tests gains over the untrained control and reads compute multipliers in that direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from seqeval.metrics import f1_score as span_f1_score
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

import torch

from bench.common.files import pack_counts
from bench.yardsticks.examples import Split, Task
from objectives import IGNORE


@dataclass(frozen=True)
class Metric:
    name: str
    compute: Callable[[np.ndarray, np.ndarray, Task, Split], float]  # (truth, predicted, task, split) -> value
    higher_is_better: bool = True
    tagging_only: bool = False  # scores token tagging (conll:PATH), not classification


METRICS: dict[str, Metric] = {}


def register(name: str, higher_is_better: bool = True, tagging_only: bool = False):
    def add(compute: Callable[[np.ndarray, np.ndarray, Task, Split], float]):
        METRICS[name] = Metric(name, compute, higher_is_better, tagging_only)
        return compute
    return add


@register("accuracy")
def accuracy(truth: np.ndarray, predicted: np.ndarray, task: Task, split: Split) -> float:
    return float(accuracy_score(truth, predicted))


@register("f1")
def binary_f1(truth: np.ndarray, predicted: np.ndarray, task: Task, split: Split) -> float:
    """Class id 1 is the positive class."""
    return float(f1_score(truth, predicted, pos_label=1, average="binary", zero_division=0))


@register("macro_f1")
def macro_f1(truth: np.ndarray, predicted: np.ndarray, task: Task, split: Split) -> float:
    return float(f1_score(truth, predicted, labels=list(range(task.classes)), average="macro", zero_division=0))


@register("mcc")
def mcc(truth: np.ndarray, predicted: np.ndarray, task: Task, split: Split) -> float:
    return float(matthews_corrcoef(truth, predicted))


@register("span_f1", tagging_only=True)
def span_f1(truth: np.ndarray, predicted: np.ndarray, task: Task, split: Split) -> float:
    """Entity-level F1 of BIO tags, each sentence's scored positions in order."""
    names, true_tags, predicted_tags, start = task.label_names, [], [], 0
    for count in (split.labels != IGNORE).sum(1).tolist():
        true_tags.append([names[i] for i in truth[start:start + count]])
        predicted_tags.append([names[i] for i in predicted[start:start + count]])
        start += count
    return float(span_f1_score(true_tags, predicted_tags, zero_division=0))


def direction(metric_names: tuple[str, ...]) -> bool:
    """Whether higher is better for a task scored by the mean of these metrics; mixed directions are refused."""
    found = {METRICS[name].higher_is_better for name in metric_names}
    if len(found) != 1:
        raise ValueError(f"the metrics {', '.join(metric_names)} point in different directions; a mean of them is "
                         "no score")
    return found.pop()


def scores(task: Task, predicted, split: Split) -> dict[str, float]:
    """Each of the task's metrics on `split`, and "score": their mean."""
    truth = split.labels[split.labels != IGNORE] if task.level == "token" else split.labels
    truth, predicted = truth.cpu().numpy(), predicted.cpu().numpy()
    values = {name: METRICS[name].compute(truth, predicted, task, split) for name in task.metrics}
    values["score"] = sum(values.values()) / len(values)
    return values


def item_counts(task: Task, predicted, split: Split) -> dict[str, str]:
    """Per example of `split`, how many of its scored units the prediction got right ("hits") and how many it has
    ("units"), packed (bench.common.files.pack_counts): what the analysis resamples so that a CI includes the test set's
    own sampling. Only where the score is a mean over units (accuracy); {} elsewhere."""
    if tuple(task.metrics) != ("accuracy",):
        return {}
    if task.level == "token":
        scored = split.labels != IGNORE
        correct = (predicted.cpu() == split.labels[scored]).long()
        hits = torch.zeros(len(split), dtype=torch.long).index_add_(0, scored.nonzero()[:, 0], correct)
        return {"hits": pack_counts(hits), "units": pack_counts(scored.sum(1))}
    return {"hits": pack_counts((predicted.cpu() == split.labels).long()),
            "units": pack_counts(torch.ones(len(split), dtype=torch.long))}
