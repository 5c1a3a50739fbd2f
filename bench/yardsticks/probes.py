"""Probes of each objective's own homework: diagnostics, never the answer.

A backbone is frozen and its final-layer features are read on held-out windows of the embedded language, in the
objective's natural attention mode. Each question copies one objective's training input or task, so it shows how well
an objective did its own homework and cannot rank objectives (bench.analysis.measures marks it as mirroring them):
- hidden state: the state of a position whose word is hidden. A reader of the whole window sees [MASK] there (masked
  LM's input); a causal reader is read at the position before (next-state prediction, causal LM's task).
- replaced word: whether the word shown at a position is its own or a replacement drawn from the language's word
  frequencies (ELECTRA's task, and the input of masked LM's random replacements).
Linear probes (L-BFGS, standardised features) answer each; a short fine-tuning probe trains the backbone on the
replaced-word question: both through bench.yardsticks.readout, as the downstream tasks are. Every question has an exact
Bayes ceiling (bench.data.inference) and a control of what the input alone gives (`input_only_controls`). Probes read
the final backbones only; probe compute is reported, never charged to the budget.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from backbone import Backbone
from bench.common.files import pack_counts
from bench.data import inference
from bench.data.corpus import Corpus
from bench.yardsticks import readout
from bench.yardsticks.readout import StandardizedLinear, majority_accuracy
from objectives import Objective

QUESTIONS = ("hidden_state", "replaced_word")  # what each copies: bench.analysis.measures.PROBE_YARDSTICKS
SEES = ("smoothing", "filtering")  # Objective.tagging_ceiling: the whole window, or the left context only


@dataclass(frozen=True)
class ProbeConfig:
    train_windows: int = 256  # held-out windows the probes are fitted on
    test_windows: int = 128  # the following held-out windows they are scored on
    iterations: int = 40  # L-BFGS iterations of each linear probe
    l2: float = 1e-4  # ridge on the probe weights, so a separable task still has a unique answer
    chosen_rate: float = 0.15  # share of each window's positions the position probes ask about
    # 60 steps of 16 windows at 3e-4, the head starting from the frozen probe
    finetune_steps: int = 60
    finetune_batch: int = 16
    finetune_lr: float = 3e-4
    seed: int = 0


@dataclass(frozen=True)
class ProbeData:
    """The windows the probes read and what they ask of them: the same for every backbone of a comparison."""

    tokens: Tensor  # (N, T) model ids of the clean windows
    words: Tensor  # (N, T) the language's word ids
    states: Tensor  # (N, T) the hidden state alone (the component is summed out)
    chosen: Tensor  # (N, T) bool: the positions asked about
    shown: Tensor  # (N, T) model ids with the replaced words in
    replaced: Tensor  # (N, T) bool: chosen positions whose word was replaced
    replacement: Tensor  # (V,) float64: the distribution replacements are drawn from
    mask_id: int
    first: int  # the model id of word 0
    train: slice
    test: slice


def probe_data(corpus: Corpus, config: ProbeConfig) -> ProbeData:
    """The first train + test held-out windows; chosen positions and replacements drawn from `config.seed`."""
    heldout = corpus.heldout.with_format("torch")[:config.train_windows + config.test_windows]
    tokens, first = heldout["tokens"], corpus.vocab.first_ordinary
    language, generator = corpus.language, torch.Generator().manual_seed(config.seed)
    states = language.emission.shape[1]
    chosen = torch.rand(tokens.shape, generator=generator) < config.chosen_rate
    replaced = chosen & (torch.rand(tokens.shape, generator=generator) < 0.5)
    # the word frequencies over the window: a replaced word is as common as a kept one, so only context tells them
    replacement = inference.unigram(language, tokens.shape[1])
    drawn = torch.multinomial(replacement.float(), tokens.numel(), replacement=True, generator=generator)
    shown = torch.where(replaced, drawn.reshape(tokens.shape) + first, tokens)
    return ProbeData(tokens, tokens - first, heldout["states"] % states, chosen, shown,
                     replaced, replacement, corpus.vocab.MASK, first, slice(0, config.train_windows),
                     slice(config.train_windows, None))


def question(data: ProbeData, name: str, sees: str) -> tuple[Tensor, Tensor, Tensor]:
    """A position question as (inputs (N, T), read (N, T) bool, labels (N, T)): the features at the read positions
    answer the labels there. A causal reader ("filtering") is asked a hidden position's state at the position
    before it, on the clean window; a reader of the whole window at the position itself, where [MASK] is shown."""
    if name == "replaced_word":
        return data.shown, data.chosen, data.replaced.long()
    if sees == "filtering":
        read = torch.zeros_like(data.chosen)
        read[:, :-1] = data.chosen[:, 1:]
        labels = torch.zeros_like(data.states)
        labels[:, :-1] = data.states[:, 1:]
        return data.tokens, read, labels
    return torch.where(data.chosen, data.mask_id, data.tokens), data.chosen, data.states


def probe_ceilings(corpus: Corpus, config: ProbeConfig) -> dict[str, float]:
    """The Bayes accuracy of each question on the test windows, per kind of reader: the mean of the largest exact
    posterior (the expected accuracy of the Bayes answer, with less variance than counting its hits). The exact
    posterior also knows which other positions were asked (hidden, or perhaps replaced), which no reader is told: a
    valid upper bound, not always reachable."""
    data, language = probe_data(corpus, config), corpus.language
    words, chosen, test = data.words[data.test], data.chosen[data.test], data.test
    found = {}
    for sees in SEES:
        if sees == "filtering":
            posterior = inference.next_state_posterior(language, words)[:, 1:][chosen[:, 1:]]
        else:
            posterior = inference.hidden_state_posterior(language, words, chosen)[chosen]
        found[f"hidden_state_{sees}"] = posterior.amax(-1).mean().item()
        kept = inference.kept_word_posterior(language, data.shown[test] - data.first, chosen,
                                             data.replacement, sees == "filtering")
        found[f"replaced_word_{sees}"] = inference.binary_ceiling(kept[chosen])
    return found


def features(backbone: Backbone, tokens: Tensor, attention: dict, batch_size: int = 32) -> Tensor:
    """(N, T, d) final-layer features of the windows `tokens`, read in `attention`'s mode (bench.yardsticks.readout)."""
    device = backbone.token_embedding.weight.device
    return readout.features(backbone, len(tokens), lambda rows: backbone(tokens[rows].to(device), **attention),
                            batch_size)


def input_only_controls(corpus: Corpus, config: ProbeConfig) -> dict[str, dict[str, float]]:
    """What the input alone gives each question, per kind of reader (Hewitt & Liang's control): for the hidden state,
    the prior (the most frequent state); for the replaced word, a linear probe on the shown word (one-hot). The same
    recipe and windows as the backbones'."""
    data = probe_data(corpus, config)
    V, train, test = corpus.language.emission.shape[-1], data.train, data.test
    # the shown word is the same input whatever the reader: one probe
    shown = F.one_hot(data.shown - data.first, V).float()
    _, read, labels = question(data, "replaced_word", "smoothing")
    replaced, _, _ = readout.fit_linear_probe(shown[train][read[train]], labels[train][read[train]],
                                              shown[test][read[test]], labels[test][read[test]], 2, config)
    found = {}
    for sees in SEES:  # the hidden-state question differs: a causal reader is asked at the position before
        _, read, labels = question(data, "hidden_state", sees)
        found[sees] = {"hidden_state": majority_accuracy(labels[train][read[train]], labels[test][read[test]]),
                       "replaced_word": replaced}
    return found


def finetune_positions(backbone: Backbone, head: StandardizedLinear, attention: dict, inputs: Tensor, read: Tensor,
                       labels: Tensor, data: ProbeData, config: ProbeConfig) -> tuple[float, int]:
    """Fine-tune a copy of the backbone with a copy of the fitted linear probe as its head, for a fixed number of steps,
    on the read positions of the training windows (linear probe, then fine-tune: the head starts where the frozen
    probe ended, so a few steps refine features instead of undoing them to fit a random head). Returns (test
    accuracy, FLOPs)."""
    model = copy.deepcopy(backbone).train()
    head = copy.deepcopy(head).to(backbone.token_embedding.weight.device)
    # dropout, where the backbone has any, draws from the global generator: from the probe's seed, not from
    # whatever the run or the process did before (the downstream fine-tuning seeds it so too)
    torch.manual_seed(config.seed)
    device = head.mean.device
    train_inputs, train_read, train_labels = inputs[data.train], read[data.train], labels[data.train]

    def loss_of(rows: Tensor) -> Tensor:
        logits = head(model(train_inputs[rows].to(device), **attention))
        picked = train_read[rows].to(device)
        return F.cross_entropy(logits[picked].float(), train_labels[rows].to(device)[picked])

    # warm up over the first half: Adam's first steps move every weight by ~lr, signal or not
    warmup = lambda step: min(1.0, (step + 1) / (config.finetune_steps / 2))  # noqa: E731
    readout.finetune([*model.parameters(), *head.parameters()], loss_of, len(train_inputs), config.finetune_steps,
                     config.finetune_batch, config.finetune_lr, warmup, config.seed)
    hidden = features(model, inputs[data.test], attention)
    test_read = read[data.test]
    with torch.no_grad():
        predicted = head(hidden[test_read.to(hidden.device)]).argmax(-1).cpu()
    correct = predicted == labels[data.test][test_read]
    seq_len, classes = inputs.shape[1], head.linear.out_features
    flops = (readout.finetune_flops(model, config.finetune_steps, config.finetune_batch, seq_len,
                                    config.finetune_batch * seq_len, classes)
             + model.flops(len(hidden), seq_len, 0).forward
             + readout.head_flops(int(test_read.sum()), backbone.config.d_model, classes))
    return window_counts(correct, test_read), flops


def window_counts(correct: Tensor, read: Tensor) -> dict:
    """A question's test accuracy, with its hits and asked positions per test window (packed, as the downstream
    tasks store theirs): the analysis resamples windows so that a CI includes the test set's sampling."""
    hits = torch.zeros(len(read), dtype=torch.long).index_add_(0, read.nonzero()[:, 0], correct.long().cpu())
    return {"score": correct.float().mean().item(), "hits": pack_counts(hits), "units": pack_counts(read.sum(1))}


@dataclass(frozen=True)
class Probes:
    """The embedded probes as a yardstick of bench.training: on the final backbone and on the untrained controls."""

    corpus: Corpus
    config: ProbeConfig
    result_key = "probes"
    seconds_key = "probe_seconds"

    def at_checkpoint(self, objective: Objective) -> None:
        return None  # diagnostics: nothing is read off their curves, so they are not drawn

    def at_end(self, objective: Objective, progress: bool = False, desc: str = "", reader: str | None = None) -> dict:
        return run_probes(objective, self.corpus, self.config)


def run_probes(objective: Objective, corpus: Corpus, config: ProbeConfig, finetune: bool = True) -> dict:
    """Each question's test accuracy with its hits per test window (and, when `finetune`, the fine-tuned
    replaced-word probe's), what the backbone sees ("sees": the ceiling that applies), and the FLOPs the probes spent.
    The CPU's global RNG is left as it was (a GPU's is reseeded, as every training step reseeds it anyway)."""
    with torch.random.fork_rng(devices=[]):
        return _run_probes(objective, corpus, config, finetune)


def _run_probes(objective: Objective, corpus: Corpus, config: ProbeConfig, finetune: bool) -> dict:
    data = probe_data(corpus, config)
    train, test = data.train, data.test
    backbone, attention, sees = objective.backbone, objective.probe_attention(corpus.seq_len), objective.tagging_ceiling
    result, flops, heads = {"sees": sees}, 0, {}
    classes = {"hidden_state": corpus.language.emission.shape[1], "replaced_word": 2}
    for name in QUESTIONS:
        inputs, where, labels = question(data, name, sees)
        hidden = features(backbone, inputs, attention)
        read = where.to(hidden.device)
        _, probe_flops, heads[name] = readout.fit_linear_probe(
            hidden[train][read[train]], labels[train][where[train]], hidden[test][read[test]],
            labels[test][where[test]], classes[name], config)
        with torch.no_grad():
            asked = hidden[test][read[test]]
            predicted = heads[name](asked).argmax(-1).cpu()
        result[name] = window_counts(predicted == labels[test][where[test]], where[test])
        flops += (probe_flops + backbone.flops(len(data.tokens), corpus.seq_len, 0).forward
                  + readout.head_flops(len(asked), asked.shape[1], classes[name]))
    if finetune:
        inputs, where, labels = question(data, "replaced_word", sees)
        result["replaced_word_finetuned"], finetune_flops = finetune_positions(
            backbone, heads["replaced_word"], attention, inputs, where, labels, data, config)
        flops += finetune_flops
    result["probe_flops"] = flops
    return result
