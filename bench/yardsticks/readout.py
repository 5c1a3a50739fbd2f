"""Reading a backbone: the one code path every yardstick (the embedded probes, the downstream tasks) and every
control (the untrained backbone) goes through, so a difference in scores is a difference in the backbones.

- `features`: a backbone's features in eval mode, batch by batch, float32, on the backbone's device;
- `fit_linear_probe`: multinomial logistic regression by L-BFGS on standardised features (the frozen readout), on
  one layer or on a learned scalar mix of every layer (`StandardizedLinear`);
- `finetune`: AdamW steps on the backbone and a head that starts from the fitted probe (linear probe, then
  fine-tune), on batches drawn from a fixed generator, under a learning-rate schedule the yardstick names;
- `head_flops` / `finetune_flops`: what those cost, reported by the yardsticks and never charged to the budget.
Each checks for a stop signal between its batches, L-BFGS evaluations and steps (bench.common.stopping.check_stop), so
that every yardstick stops within one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from backbone import Backbone
from bench.common.stopping import check_stop


@torch.no_grad()
def features(backbone: Backbone, count: int, read: Callable[[slice], Tensor], batch_size: int) -> Tensor:
    """(count, ...) features, `read(rows)` giving those of a slice of the rows, in eval mode, float32, on the
    backbone's device (the probes are fitted there: on a GPU a probe fitted on the host's one thread would hold every
    other rank at the barrier). The backbone's training mode is restored."""
    was_training = backbone.training
    backbone.eval()
    parts = []
    try:
        for start in range(0, count, batch_size):
            check_stop()
            parts.append(read(slice(start, start + batch_size)).float())
    finally:
        backbone.train(was_training)
    return torch.cat(parts)


class StandardizedLinear(nn.Module):
    """A linear probe on standardised features; the statistics are fixed, the layer trainable. Given `layers` > 1, the
    features are that many layers' side by side (Backbone.forward(every_layer=True)) and the probe reads their
    learned scalar mix, Σ softmax(mix)_l · layer_l, each layer standardised on its own (ELMo's scalar mix; Tenney et
    al. 2019), so that no objective is favoured for keeping its answer in its last layer."""

    def __init__(self, mean: Tensor, std: Tensor, classes: int, layers: int = 1) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.layers = layers
        self.mix = nn.Parameter(torch.zeros(layers, device=mean.device))  # equal weights to start
        self.linear = nn.Linear(mean.numel() // layers, classes)

    def mixed(self, standardized: Tensor) -> Tensor:
        if self.layers == 1:
            return standardized
        layers = standardized.unflatten(-1, (self.layers, -1))
        return (layers * self.mix.softmax(0)[:, None]).sum(-2)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(self.mixed((x - self.mean) / self.std))


class Fit(Protocol):
    """The L-BFGS settings of a linear probe (bench.yardsticks.probes.ProbeConfig has them)."""

    iterations: int  # L-BFGS iterations
    l2: float  # ridge on the weights, so that a separable task still has a unique answer
    seed: int  # the start's generator


@dataclass(frozen=True)
class FitSettings:
    iterations: int = 40
    l2: float = 1e-4
    seed: int = 0


DEFAULT_FIT = FitSettings()  # the probes' own (bench.yardsticks.probes.ProbeConfig has the same defaults)


def fit_linear_probe(train_x: Tensor, train_y: Tensor, test_x: Tensor, test_y: Tensor, classes: int,
                     fit: Fit, layers: int = 1) -> tuple[float, int, StandardizedLinear]:
    """Multinomial logistic regression by L-BFGS on standardised features, on the learned scalar mix of `layers`
    layers side by side (fitted with the weights). Returns (test accuracy, FLOPs, probe)."""
    device = train_x.device
    # A feature constant over the training rows says nothing the probe can learn; scaled by 1 / 1e-6 it would turn
    # its untrained weight into a large logit wherever a test row differs (a word the training rows never hold)
    std = train_x.std(0)
    model = StandardizedLinear(train_x.mean(0), torch.where(std > 1e-6, std, torch.inf), classes, layers).to(device)
    train_x, test_x = (train_x - model.mean) / model.std, (test_x - model.mean) / model.std
    train_y, test_y = train_y.to(device), test_y.to(device)
    generator = torch.Generator().manual_seed(fit.seed)  # on the host: the same start on every device
    linear = model.linear
    with torch.no_grad():
        linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * 0.01)
        linear.bias.zero_()

    def probe(x: Tensor) -> Tensor:
        return linear(model.mixed(x))

    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=fit.iterations, history_size=20,
                                  line_search_fn="strong_wolfe")
    evaluations = 0

    def closure() -> Tensor:
        nonlocal evaluations
        check_stop()  # a fit takes up to `fit.iterations` evaluations, each over the whole training split
        evaluations += 1
        optimizer.zero_grad()
        loss = F.cross_entropy(probe(train_x), train_y) + fit.l2 * linear.weight.square().sum()
        loss.backward()
        return loss

    # in fp32 whatever the run's autocast: L-BFGS's line search compares losses a half-precision product would blur
    with torch.enable_grad(), torch.autocast(device.type, enabled=False):
        optimizer.step(closure)
    with torch.no_grad():
        accuracy = (probe(test_x).argmax(-1) == test_y).float().mean().item()
    # each evaluation: forward x·Wᵀ, backward the weight gradient and, under a mix, the mixed features' gradient
    # (features are constants; the mix itself is elementwise)
    width = linear.in_features
    per_evaluation = (3 if layers > 1 else 2) * 2 * train_x.shape[0] * width * classes
    flops = evaluations * per_evaluation + 2 * test_x.shape[0] * width * classes
    return accuracy, flops, model


def majority_accuracy(train_y: Tensor, test_y: Tensor) -> float:
    """Chance: always answer the most frequent training label."""
    return (test_y == train_y.bincount().argmax()).float().mean().item()


def finetune(parameters: Iterable[Tensor], loss_of: Callable[[Tensor], Tensor], train_rows: int, steps: int,
             batch: int, lr: float, scale: Callable[[int], float], seed: int) -> None:
    """`steps` AdamW steps (weight decay 0.01) at `lr × scale(step)`, each on `batch` rows of the training set drawn
    from `seed` (`loss_of(rows)` is their loss): the same batches for every backbone and rate, so the backbone and
    the rate are the only differences."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.01)
    for step in range(steps):
        check_stop()
        for group in optimizer.param_groups:
            group["lr"] = lr * scale(step)
        rows = torch.randint(train_rows, (batch,), generator=generator)
        loss = loss_of(rows)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def head_flops(rows: int, width: int, classes: int) -> int:
    """A linear head's forward over `rows` feature vectors (its backward is twice this)."""
    return 2 * rows * width * classes


def finetune_flops(backbone: Backbone, steps: int, batch: int, seq_len: int, head_rows: int, classes: int) -> int:
    """`steps` training steps of the backbone on `batch` sequences with a head over `head_rows` rows per step."""
    return steps * (backbone.flops(batch, seq_len, 0).training_step
                    + 3 * head_flops(head_rows, backbone.config.d_model, classes))
