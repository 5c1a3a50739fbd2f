"""The default comparison's tuned settings: what `python -m bench.tune --write-defaults` chose on validation data
(reports/tuning/report.md), read from bench/tuned.json. Its objectives and peak rates are the default's; its
fine-tuning rates, one per reader (an objective's spec, an untrained control's name) and task, apply where a
comparison's setting is the one tuned (else every backbone is fine-tuned at each rate of a grid, the dev split
choosing).
"""

from __future__ import annotations

import json
from pathlib import Path

DEFAULTS_FILE = Path(__file__).with_name("tuned.json")
TUNED = json.loads(DEFAULTS_FILE.read_text())


def setting_of(config) -> dict:
    """What a tuning's picks depend on (a bench.config.Config's fields): the data, the model, the lengths, the batch,
    the budget, the tasks and their fine-tuning steps, the precision."""
    return {"data": config.data.data, "model": config.model.model, "seq_len": config.model.seq_len,
            "flops": config.model.flops, "batch_size": config.training.batch_size, "budget": config.training.budget,
            "downstream": config.yardsticks.downstream, "finetune_steps": config.yardsticks.finetune_steps,
            "precision": config.hardware.precision}


def finetune_rates(config) -> tuple[tuple[str, str, float], ...]:
    """(reader, task, rate) tuned for this comparison's setting; none where the setting is not the one tuned."""
    if setting_of(config) != TUNED["setting"]:
        return ()
    return tuple((reader, task, float(rate)) for reader, rates in TUNED["finetune"].items()
                 for task, rate in rates.items())
