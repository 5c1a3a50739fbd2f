"""What a tuning's picks depend on, and the fine-tuning rates bench/common/tuned.json holds for a comparison of that
setting (bench.common.tuned keeps the picks themselves and imports nothing; the setting of a comparison on the embedded
language includes the language, which only the data stage can draw)."""

from __future__ import annotations

import functools

from bench.common.tuned import TUNED
from bench.data import synthetic
from bench.data.corpus import data_source, synthetic_language
from bench.yardsticks.embedded_tasks import SETTLED
from bench.yardsticks.examples import TaskOptions


def setting_of(config) -> dict:
    """What a tuning's picks depend on (a bench.orchestration.config.Config's fields): the data, the model, the lengths,
    the batch, the budget, the tasks and their fine-tuning steps, the precision; on the embedded language, the language
    itself (synthetic.digest) and how its tasks are drawn (their default size, which positions they ask): the spec
    "synthetic" names whatever language and tasks this code draws, and rates tuned on others are not these ones'."""
    found = {"data": config.data.data, "model": config.model.model, "seq_len": config.model.seq_len,
             "flops": config.model.flops, "batch_size": config.training.batch_size, "budget": config.training.budget,
             "downstream": config.yardsticks.downstream, "finetune_steps": config.yardsticks.finetune_steps,
             "precision": config.hardware.precision}
    language = language_digest(config.data.data)
    if language is None:
        return found
    return {**found, "language": language, "task_size": TaskOptions.size, "asked_below": SETTLED}


@functools.lru_cache(maxsize=8)
def language_digest(data: str) -> str | None:
    """The embedded language a --data spec draws, as synthetic.digest fingerprints it; None for text."""
    source, options = data_source(data)
    return synthetic.digest(synthetic_language(options)[2]) if source in ("synthetic", "synthetic:text") else None


def finetune_rates(config) -> tuple[tuple[str, str, float], ...]:
    """(reader, task, rate) tuned for this comparison's setting; none where the setting is not the one tuned."""
    if setting_of(config) != TUNED["setting"]:
        return ()
    return tuple((reader, task, float(rate)) for reader, rates in TUNED["finetune"].items()
                 for task, rate in rates.items())
