"""Bayes references for a comparison on the embedded language: the best loss any model could reach on exactly the
batches each objective is evaluated on, and the best accuracies the probes could reach.

- ar: the Bayes next-token loss on every scored position of the evaluation windows;
- mlm: the Bayes masked-token loss under exactly the corruption applied to the evaluation windows ([MASK] carries no
  emission; a visible selected token may be random or kept; the other masked positions are marginalised);
- electra: the same floor for its generator's masked-token loss (its total mixes in the discriminator, whose best
  value depends on the generator, so it has no fixed floor);
- span: the Bayes loss of its targets given its inputs (bench.data.span_inference: the spans' lengths, which the
  input hides, summed out exactly), per target token as its loss is taken;
- MLM with SpanBERT span masking: none (one corruption decision per span couples the positions, which the
  per-position evidence model here cannot express; not computed).
The probes' ceilings are bench.yardsticks.probes.probe_ceilings.
"""

from __future__ import annotations

import math

import torch

from bench.common.stopping import check_stop
from bench.data import inference, synthetic
from bench.data.corpus import Corpus
from bench.data.span_inference import span_nll
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


def _span_floor(language: synthetic.Language, batches: list[Corrupted], vocab: Vocab, floor: FloorSpec) -> float:
    total, count = 0.0, 0
    for batch in batches:
        check_stop()
        noise = batch.info["noise"]
        words = batch.original[:, :noise.shape[1]] - vocab.first_ordinary
        total += span_nll(language, words, noise).sum().item()
        count += int((batch.targets != IGNORE).sum())
    return total / count


FLOOR_TASKS = {"next_token": _next_token_floor, "masked_token": _masked_token_floor, "span_tokens": _span_floor}


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
    unigram_of = {"span_tokens": _span_unigram}
    return {floor.metric: unigram_of.get(floor.task, _word_unigram)(log_p, batches, corpus.vocab)
            for floor in objective.bayes_floors()}


def _word_unigram(log_p: torch.Tensor, batches: list[Corrupted], vocab: Vocab) -> float:
    targets = torch.cat([batch.targets[batch.targets != IGNORE] for batch in batches]) - vocab.first_ordinary
    return -log_p[targets].mean().item()


def _span_unigram(log_p: torch.Tensor, batches: list[Corrupted], vocab: Vocab) -> float:
    """Span corruption's targets hold its sentinels and EOS beside the hidden words: the context-free predictor
    gives each of those its share of a sequence's targets (each is one of them) and each word that of the noise times
    the language's unigram, which ignores where in the window the noise falls."""
    targets = torch.cat([batch.targets[batch.targets != IGNORE] for batch in batches])
    per_sequence = int((batches[0].targets[0] != IGNORE).sum())
    words = targets[(targets >= vocab.first_ordinary) & (targets < vocab.end_ordinary)] - vocab.first_ordinary
    markers = len(targets) - len(words)
    noise_share = len(words) / len(targets)
    total = markers * math.log(per_sequence) - (math.log(noise_share) + log_p[words]).sum().item()
    return total / len(targets)
