"""A run's held-out evaluation: the objective's own loss and metrics on the held-out batches, and on the embedded
language the Bayes reference of ELECTRA's discriminator for the very generator being evaluated. The loop
(bench.training.loop) calls `evaluate` at every FLOP checkpoint and at the budget.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from lightning_fabric import Fabric
from torch import Tensor

from bench.common.stopping import check_stop
from bench.data import inference
from bench.data.synthetic import Language
from bench.training.recipe import EVAL_SEED
from objectives import Corrupted, Objective, Output


@torch.no_grad()
def evaluate(fabric: Fabric, module: torch.nn.Module, batches: list[Corrupted], objective: Objective,
             language: Language | None = None) -> dict[str, float]:
    """The objective's own loss and metrics, averaged over supervised positions, its pooled metrics, and, on the
    embedded language, the Bayes reference answer to its question where that depends on the model (ELECTRA's
    discriminator); every rank computes the same. Unlike a training step, this reads every batch's numbers from the
    device. A stop signal ends it between two batches (PhaseStopped)."""
    was_training = module.training
    module.eval()
    totals: dict[str, float] = {}
    outputs, stories = [], []
    weight = 0  # supervised positions; a batch without any carries no loss and is skipped
    devices = [fabric.device] if fabric.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # ELECTRA samples; leave the training RNG where it was
        torch.manual_seed(EVAL_SEED)
        try:
            for batch in batches:
                check_stop()
                batch = batch.to(fabric.device)
                with fabric.autocast():
                    output = module(batch)
                if output.supervised_positions == 0:
                    continue
                outputs.append(output)
                stories.append(objective.replacement_story(batch) if language is not None else None)
                for key, value in {"loss": output.loss, **output.metrics}.items():
                    totals[key] = totals.get(key, 0.0) + float(value) * output.supervised_positions
                weight += output.supervised_positions
        finally:
            module.train(was_training)
    if weight == 0:
        return {"loss": float("nan")}
    metrics = {**{key: value / weight for key, value in totals.items()}, **objective.pooled_metrics(outputs)}
    if any(story is not None for story in stories):
        metrics |= bayes_discriminator(language, objective.vocab.first_ordinary, outputs, stories, metrics)
    return metrics


def bayes_discriminator(language: Language, first_ordinary: int, outputs: list[Output],
                        stories: list[tuple[Tensor, float]], metrics: dict[str, float]) -> dict[str, float]:
    """The Bayes reference discriminator on exactly these held-out windows, given the generator's distributions
    (inference.replaced_token_posterior): its loss, and the share of the gap between "all original" (the labels'
    entropy) and it that the model's discriminator closed. It is exact for a story in which each position is drawn
    independently and a kept position shows its word; the real corruption draws exactly round(rate·T) positions and
    samples a kept one too, so once the generator is nearly the language's own (the gap a few thousandths of a nat)
    a discriminator can come slightly below it (measured: 0.190 against 0.195 at 1e13 FLOPs), and the share passes 1."""
    total, count = 0.0, 0
    V = language.emission.shape[-1]
    for output, (distributions, resample) in zip(outputs, stories):
        words = output.tensors["discriminator_inputs"].cpu() - first_ordinary
        words = torch.where((words >= 0) & (words < V), words, -1)  # a drawn special token is no word
        replaced = inference.replaced_token_posterior(
            language, words, distributions.cpu()[..., first_ordinary:first_ordinary + V], resample)
        labels = output.tensors["discriminator_labels"].cpu().double()
        total += F.binary_cross_entropy(replaced.clamp(1e-12, 1 - 1e-12), labels, reduction="sum").item()
        count += labels.numel()
    bayes = total / count
    gap = metrics["label_entropy"] - bayes
    return {"discriminator_bayes_loss": bayes,
            "discriminator_closed": (metrics["label_entropy"] - metrics["discriminator_loss"]) / gap if gap > 0
            else float("nan")}

