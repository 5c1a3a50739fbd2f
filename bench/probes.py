"""Probes: a yardstick that compares objectives whose losses cannot be compared.

A trained backbone is frozen and its final-layer features are read on held-out windows of the embedded language, in
the objective's natural attention mode over the *uncorrupted* sequence (ar: causal; mlm and electra: bidirectional;
span: its bidirectional prefix stretched over the whole window). Linear probes then tag every position's hidden state
(BERT Table 8's "feature-based" column) and classify each sequence's mixture component from mean-pooled features.
A short fine-tuning probe trains the backbone itself with a linear tagging head for a fixed number of steps.
Both tasks have a known Bayes ceiling (bench.bayes), so every accuracy has a floor (chance) and a roof.
Probe compute is counted and reported, but not charged to the pretraining budget.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from backbone import Backbone
from bench.data import Corpus
from objectives import Objective


@dataclass(frozen=True)
class ProbeConfig:
    train_windows: int = 256  # held-out windows the probes are fitted on
    test_windows: int = 128  # the following held-out windows they are scored on
    iterations: int = 40  # L-BFGS iterations of each linear probe
    l2: float = 1e-4  # ridge on the probe weights, so a separable task still has a unique answer
    # 60 steps of 16 windows at 3e-4: on the default setup its seed-to-seed spread stayed within 1.1x the frozen
    # probe's (30 steps of 8 at 1e-4 or 3e-4 gave up to 1.75x, 60 of 16 at 1e-3 up to 1.6x)
    finetune_steps: int = 60
    finetune_batch: int = 16
    finetune_lr: float = 3e-4
    seed: int = 0


@torch.no_grad()
def features(backbone: Backbone, tokens: Tensor, attention: dict, batch_size: int = 32) -> Tensor:
    """(N, T, d) final-layer features, in eval mode, float32."""
    was_training = backbone.training
    backbone.eval()
    device = backbone.token_embedding.weight.device
    out = torch.cat([backbone(tokens[i:i + batch_size].to(device), **attention).float().cpu()
                     for i in range(0, len(tokens), batch_size)])
    backbone.train(was_training)
    return out


class StandardizedLinear(nn.Module):
    """A linear probe on standardised features; the statistics are fixed, the layer trainable."""

    def __init__(self, mean: Tensor, std: Tensor, classes: int) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.linear = nn.Linear(mean.numel(), classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear((x - self.mean) / self.std)


def fit_linear_probe(train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor, classes: int,
                     config: ProbeConfig) -> tuple[float, int, StandardizedLinear]:
    """Multinomial logistic regression by L-BFGS on standardised features. Returns (test accuracy, FLOPs, probe)."""
    model = StandardizedLinear(train_x.mean(0), train_x.std(0).clamp_min(1e-6), classes)
    train_x, test_x = (train_x - model.mean) / model.std, (test_x - model.mean) / model.std
    generator = torch.Generator().manual_seed(config.seed)
    probe = model.linear
    with torch.no_grad():
        probe.weight.copy_(torch.randn(probe.weight.shape, generator=generator) * 0.01)
        probe.bias.zero_()
    optimizer = torch.optim.LBFGS(probe.parameters(), max_iter=config.iterations, history_size=20,
                                  line_search_fn="strong_wolfe")
    evaluations = 0

    def closure() -> Tensor:
        nonlocal evaluations
        evaluations += 1
        optimizer.zero_grad()
        loss = F.cross_entropy(probe(train_x), train_y) + config.l2 * probe.weight.square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    with torch.no_grad():
        accuracy = (probe(test_x).argmax(-1) == test_y).float().mean().item()
    # each evaluation: forward x·Wᵀ, backward the weight gradient only (features are constants)
    flops = evaluations * 2 * 2 * train_x.shape[0] * train_x.shape[1] * classes + 2 * test_x.numel() * classes
    return accuracy, flops, model


def majority_accuracy(train_y: Tensor, test_y: Tensor) -> float:
    """Chance: always answer the most frequent training label."""
    return (test_y == train_y.bincount().argmax()).float().mean().item()


def finetune_tagging(backbone: Backbone, head: StandardizedLinear, attention: dict, tokens: Tensor, states: Tensor,
                     test_tokens: Tensor, test_states: Tensor, config: ProbeConfig) -> tuple[float, int]:
    """Fine-tune a copy of the backbone with a copy of the fitted linear tagging probe as its head, for a fixed number
    of steps (linear probe, then fine-tune: the head starts where the frozen probe ended, so a few steps refine
    features instead of undoing them to fit a random head). Returns (accuracy, FLOPs)."""
    generator = torch.Generator().manual_seed(config.seed)
    model = copy.deepcopy(backbone).train()
    head = copy.deepcopy(head).to(backbone.token_embedding.weight.device)
    classes = head.linear.out_features
    optimizer = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=config.finetune_lr)
    device = head.mean.device
    for step in range(config.finetune_steps):
        for group in optimizer.param_groups:  # warm up: Adam's first steps move every weight by ~lr, signal or not
            group["lr"] = config.finetune_lr * min(1.0, (step + 1) / (config.finetune_steps / 2))
        rows = torch.randint(len(tokens), (config.finetune_batch,), generator=generator)
        logits = head(model(tokens[rows].to(device), **attention))
        loss = F.cross_entropy(logits.flatten(0, 1).float(), states[rows].flatten().to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    hidden = features(model, test_tokens, attention)
    with torch.no_grad():
        accuracy = (head(hidden.to(device)).argmax(-1).cpu() == test_states).float().mean().item()
    seq_len, d = tokens.shape[1], backbone.config.d_model
    head_flops = lambda n: 2 * n * seq_len * d * classes  # noqa: E731
    flops = (config.finetune_steps * (model.flops(config.finetune_batch, seq_len, 0).training_step
                                      + 3 * head_flops(config.finetune_batch))
             + model.flops(len(test_tokens), seq_len, 0).forward + head_flops(len(test_tokens)))
    return accuracy, flops


def run_probes(objective: Objective, corpus: Corpus, config: ProbeConfig, finetune: bool = True) -> dict:
    """Tagging (frozen, and fine-tuned when `finetune`) and component classification accuracies, their chance
    levels, and the FLOPs the probes spent. The global RNG is left untouched, so probing a run mid-way does not
    change its training."""
    with torch.random.fork_rng(devices=[]):
        return _run_probes(objective, corpus, config, finetune)


def _run_probes(objective: Objective, corpus: Corpus, config: ProbeConfig, finetune: bool) -> dict:
    heldout = corpus.heldout.with_format("torch")[:config.train_windows + config.test_windows]
    tokens, states, components = heldout["tokens"], heldout["states"], heldout["component"]
    train, test = slice(0, config.train_windows), slice(config.train_windows, None)
    classes, groups = corpus.language.emission.shape[0] * corpus.language.emission.shape[1], \
        corpus.language.emission.shape[0]
    backbone, attention = objective.backbone, objective.probe_attention(corpus.seq_len)
    hidden = features(backbone, tokens, attention)
    flops = backbone.flops(len(tokens), corpus.seq_len, 0).forward
    d = hidden.shape[-1]

    tagging, tagging_flops, tagger = fit_linear_probe(hidden[train].reshape(-1, d), states[train].flatten(),
                                                      hidden[test].reshape(-1, d), states[test].flatten(), classes,
                                                      config)
    pooled = hidden.mean(1)
    component, component_flops, _ = fit_linear_probe(pooled[train], components[train], pooled[test], components[test],
                                                  groups, config)
    result = {
        "tagging_frozen": tagging,
        "component": component,
        "tagging_chance": majority_accuracy(states[train].flatten(), states[test].flatten()),
        "component_chance": majority_accuracy(components[train], components[test]),
        "tagging_ceiling": objective.tagging_ceiling,  # which Bayes ceiling this backbone's features can reach
    }
    flops += tagging_flops + component_flops
    if finetune:
        result["tagging_finetuned"], finetune_flops = finetune_tagging(
            backbone, tagger, attention, tokens[train], states[train], tokens[test], states[test], config)
        flops += finetune_flops
    result["probe_flops"] = flops
    return result
