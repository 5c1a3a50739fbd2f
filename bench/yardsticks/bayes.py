"""Bayes references for a comparison on the embedded language: the best loss any model could reach on exactly the
batches each objective is evaluated on, and the best accuracies the probes could reach.

- ar: the Bayes next-token loss on every scored position of the evaluation windows;
- mlm: the Bayes masked-token loss under exactly the corruption applied to the evaluation windows ([MASK] carries no
  emission; a visible selected token may be random or kept; the other masked positions are marginalised);
- electra: the same floor for its generator's masked-token loss (its total mixes in the discriminator, whose best
  value depends on the generator, so it has no fixed floor);
- span, and MLM with SpanBERT span masking: none (their corruption couples positions, which the per-position
  evidence model here cannot express; not computed).
The probes' ceilings are bench.yardsticks.probes.probe_ceilings.
"""

from __future__ import annotations

import torch

from bench.data import inference, synthetic
from bench.data.corpus import Corpus
from bench.stopping import check_stop
from objectives import IGNORE, Corrupted, FloorSpec, Objective, Vocab


def _masked_token_floor(language: synthetic.Language, batches: list[Corrupted], vocab: Vocab,
                        floor: FloorSpec) -> float:
    total, count = 0.0, 0
    for batch in batches:
        check_stop()  # between two batches of exact posteriors
        words = batch.original - vocab.first_ordinary
        observed = torch.where(batch.inputs == vocab.MASK, -1, batch.inputs - vocab.first_ordinary)
        selected = batch.targets != IGNORE
        nll = inference.masked_token_nll(language, words, observed, selected, floor.keep, floor.random, floor.mask)
        total += nll[selected].sum().item()
        count += int(selected.sum())
    return total / count


def _next_token_floor(language: synthetic.Language, batches: list[Corrupted], vocab: Vocab, floor: FloorSpec) -> float:
    words = torch.cat([batch.original for batch in batches]) - vocab.first_ordinary
    return inference.next_token_nll(language, words).mean().item()


FLOOR_TASKS = {"next_token": _next_token_floor, "masked_token": _masked_token_floor}


def loss_floors(objective: Objective, batches: list[Corrupted], corpus: Corpus) -> dict[str, float]:
    """{metric: Bayes floor} for the metrics of `objective` that have one, on these evaluation batches."""
    return {floor.metric: FLOOR_TASKS[floor.task](corpus.language, batches, corpus.vocab, floor)
            for floor in objective.bayes_floors()}


def unigram_losses(objective: Objective, batches: list[Corrupted], corpus: Corpus) -> dict[str, float]:
    """{metric: the loss of the best context-free predictor} on the same positions as each floor: the start of the
    learnable range that runs from it down to the floor."""
    if not objective.bayes_floors():
        return {}
    # over the windows' own length: a sequence-length schedule evaluates at its last phase's, not the corpus's
    log_p = inference.unigram(corpus.language, batches[0].original.shape[1]).log()
    targets = torch.cat([batch.targets[batch.targets != IGNORE] for batch in batches]) - corpus.vocab.first_ordinary
    loss = -log_p[targets].mean().item()
    return {floor.metric: loss for floor in objective.bayes_floors()}
