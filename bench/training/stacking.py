"""Several seeds of one objective as one stacked model: every parameter and AdamW moment a tensor whose first
dimension is the seed, one forward and backward for all of them (the objective's own forward, called through
torch.func.functional_call on one copy of the module, under torch.func.vmap over the seeds, with
bench.training.seed_ops's rules), then each seed's gradient clipping and AdamW step on the stacked tensors.
bench.training.stacked drives it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor
from torch.func import functional_call, vmap

from bench.training.seed_ops import SeedOps
from objectives import IGNORE, Corrupted, Objective


@dataclass
class StackedBatch:
    """One step's batches of a group of seeds in one phase, stacked: each tensor (seeds, ...), the supervised rows
    padded to the longest seed's (padded_rows)."""

    tensors: dict[str, Tensor]
    attention: str
    prefix_len: int | None
    piece: int
    padded: bool  # some seed has fewer supervised positions than another


def stack_batches(batches: list[Corrupted], device: torch.device) -> StackedBatch:
    first = batches[0]
    for batch in batches[1:]:
        if (batch.attention, batch.prefix_len, batch.piece, batch.info.keys(), batch.inputs.shape) != \
                (first.attention, first.prefix_len, first.piece, first.info.keys(), first.inputs.shape):
            raise ValueError("seeds stacked in one step must have batches of one shape, attention and piece")
    width = max(len(batch.supervised) for batch in batches)
    tensors = {name: torch.stack([getattr(batch, name) for batch in batches]) for name in ("inputs", "targets",
                                                                                           "original")}
    tensors["supervised"] = torch.stack([padded_rows(batch, width) for batch in batches])
    tensors.update({f"info.{key}": torch.stack([batch.info[key] for batch in batches]) for key in first.info})
    if device.type == "cuda":
        tensors = {name: tensor.pin_memory() for name, tensor in tensors.items()}
    return StackedBatch({name: tensor.to(device, non_blocking=True) for name, tensor in tensors.items()},
                        first.attention, first.prefix_len, first.piece,
                        any(len(batch.supervised) < width for batch in batches))


def padded_rows(batch: Corrupted, width: int) -> Tensor:
    """The batch's supervised positions, then copies of a position that carries no loss up to `width` rows: its
    target is IGNORE, so the vmapped losses leave it out (backbone.fused_loss's rule, cross_entropy's ignore_index)."""
    missing = width - len(batch.supervised)
    if missing == 0:
        return batch.supervised
    free = (batch.targets.reshape(-1) == IGNORE).nonzero()[0]
    return torch.cat([batch.supervised, free.expand(missing)])


class SeedStack:
    """The trainable state of several seeds of one objective, stacked: the parameters (leaves with a leading seed
    dimension, named as in the objective), AdamW's moments and step counts, per seed. Built from the seeds' own
    objectives and optimizers (as setup_run and restore made them) and written back into them (into_run) before
    anything reads them there: evaluation, checkpoints, results."""

    def __init__(self, objectives: list[Objective], optimizers: list[torch.optim.Optimizer]) -> None:
        self.template = copy.deepcopy(objectives[0])  # functional_call's module: its parameters are never used
        names = {id(p): name for name, p in objectives[0].named_parameters()}
        groups = optimizers[0].param_groups
        self.names = [names[id(p)] for group in groups for p in group["params"]]  # clip_grad_norm_'s order
        self.decay = {names[id(p)]: group["weight_decay"] for group in groups for p in group["params"]}
        self.betas, self.eps = groups[0]["betas"], groups[0]["eps"]
        self.params: dict[str, Tensor] = {}
        self.exp_avg: dict[str, Tensor] = {}
        self.exp_avg_sq: dict[str, Tensor] = {}
        self.steps: dict[str, list[float]] = {}
        self.has_grad: dict[str, list[bool]] = {}
        owned = [dict(objective.named_parameters()) for objective in objectives]
        for name in self.names:
            states = [optimizer.state.get(params[name], {}) for optimizer, params in zip(optimizers, owned)]
            weights = [params[name].detach() for params in owned]
            self.params[name] = torch.stack(weights).requires_grad_()
            self.exp_avg[name] = torch.stack([state.get("exp_avg", torch.zeros_like(w)) for state, w in
                                              zip(states, weights)])
            self.exp_avg_sq[name] = torch.stack([state.get("exp_avg_sq", torch.zeros_like(w)) for state, w in
                                                 zip(states, weights)])
            self.steps[name] = [float(state["step"]) if "step" in state else 0.0 for state in states]

    def __len__(self) -> int:
        return len(self.params[self.names[0]])

    def keep(self, seeds: list[int]) -> None:
        """Go on with these seeds only (indices into the stack, in order): a finished or diverged seed leaves."""
        with torch.no_grad():
            for name in self.names:
                self.params[name] = self.params[name][seeds].requires_grad_()
                self.exp_avg[name], self.exp_avg_sq[name] = self.exp_avg[name][seeds], self.exp_avg_sq[name][seeds]
                self.steps[name] = [self.steps[name][seed] for seed in seeds]

    @torch.no_grad()
    def into_run(self, seed: int, objective: Objective, optimizer: torch.optim.Optimizer, lr: float) -> None:
        """Seed `seed`'s weights into its own objective, and its moments and step counts into its own AdamW's state
        (as torch keeps them: a float32 step count on the host, or on the device when fused), with the last
        learning rate: what a separate run of that seed holds at this point."""
        params = dict(objective.named_parameters())
        for name in self.names:
            params[name].copy_(self.params[name][seed])
            if self.steps[name][seed]:
                fused = any(group.get("fused") for group in optimizer.param_groups)
                step = torch.tensor(self.steps[name][seed], dtype=torch.float32,
                                    device=params[name].device if fused else "cpu")
                optimizer.state[params[name]] = {"step": step, "exp_avg": self.exp_avg[name][seed].clone(),
                                                 "exp_avg_sq": self.exp_avg_sq[name][seed].clone()}
        for group in optimizer.param_groups:
            group["lr"] = lr

    def backward(self, groups: list[tuple[list[int], StackedBatch, Callable[[int], torch.Generator]]]) -> Tensor:
        """One forward and backward for all seeds: per group of seeds in one phase (indices, their stacked batch,
        each one's generator for draws by group index), the seeds' losses (seeds,), gradients into params' .grad
        (zero where a seed's group did not use a parameter; has_grad says which did)."""
        whole = len(groups) == 1
        parts, losses = [], torch.zeros(len(self), device=self.params[self.names[0]].device)
        for seeds, batch, generators in groups:
            params = self.params if whole else {name: self.params[name].detach()[seeds].requires_grad_()
                                                for name in self.names}
            loss = self.forward(params, batch, generators)
            losses[seeds] = loss.detach()
            parts.append((seeds, params, loss.sum()))
        for param in self.params.values():
            param.grad = None
        torch.stack([total for _, _, total in parts]).sum().backward()
        if whole:
            self.has_grad = {name: [param.grad is not None] * len(self) for name, param in self.params.items()}
        else:
            self.gather_grads(parts)
        return losses

    def gather_grads(self, parts: list[tuple[list[int], dict[str, Tensor], Tensor]]) -> None:
        """Each group's gradients into the stacked parameters' .grad, and which seeds got one."""
        for name in self.names:
            self.has_grad[name] = [False] * len(self)
            grads = [(seeds, params[name].grad) for seeds, params, _ in parts if params[name].grad is not None]
            if not grads:
                continue
            grad = torch.zeros_like(self.params[name])
            for seeds, part in grads:
                grad[seeds] = part
                for seed in seeds:
                    self.has_grad[name][seed] = True
            self.params[name].grad = grad

    def forward(self, params: dict[str, Tensor], batch: StackedBatch,
                generators: Callable[[int], torch.Generator]) -> Tensor:
        """The seeds' losses, each seed's objective forward under vmap (SeedOps active)."""
        names = list(batch.tensors)
        seeds = len(next(iter(batch.tensors.values())))

        def one_seed(params: dict[str, Tensor], *tensors: Tensor) -> Tensor:
            parts = dict(zip(names, tensors))
            info = {name.removeprefix("info."): t for name, t in parts.items() if name.startswith("info.")}
            rows = parts["supervised"]
            corrupted = Corrupted(parts["inputs"], parts["targets"], batch.attention, parts["original"],
                                  batch.prefix_len, info, rows, (0, rows.shape[0]), batch.piece)
            ops = SeedOps(generators, seeds, parts["inputs"])
            with ops:
                loss = functional_call(self.template, params, (corrupted,)).loss
            if ops.draws and batch.padded:
                raise RuntimeError("a forward that draws random numbers cannot run on padded rows: "
                                   "bench.training.stacked.can_batch_seeds should have refused it")
            return loss
        return vmap(one_seed, randomness="error")(params, *batch.tensors.values())

    @torch.no_grad()
    def clip(self, max_norm: float) -> Tensor:
        """Each seed's gradients scaled as clip_grad_norm_ scales a separate run's (its parameters' norms in the
        optimizer's order, their norm the total, then max_norm / (total + 1e-6) if below 1); returns the seeds'
        total norms (seeds,). A non-finite norm scales only its own seed's gradients."""
        grads = [(name, self.params[name].grad) for name in self.names if self.params[name].grad is not None]
        totals = []
        for seed in range(len(self)):
            norms = torch._foreach_norm([grad[seed] for name, grad in grads if self.has_grad[name][seed]])
            totals.append(torch.linalg.vector_norm(torch.stack(norms)) if norms else grads[0][1].new_zeros(()))
        totals = torch.stack(totals)
        scale = torch.clamp(max_norm / (totals + 1e-6), max=1.0)
        for _, grad in grads:
            grad.mul_(scale.view(-1, *[1] * (grad.dim() - 1)))
        return totals

    @torch.no_grad()
    def adamw(self, lrs: list[float]) -> None:
        """torch's AdamW step (decoupled weight decay, bias corrections from each parameter's own step count) for
        each seed at its own learning rate, on the stacked tensors: the per-seed factors are computed in Python as
        torch computes them and applied as float32 factors, so each seed's update is its separate run's."""
        beta1, beta2 = self.betas
        for name in self.names:
            param, grad = self.params[name], self.params[name].grad
            seeds = [seed for seed, has in enumerate(self.has_grad.get(name, ())) if has]
            if grad is None or not seeds:
                continue
            for seed in seeds:
                self.steps[name][seed] += 1
            steps, rates = [self.steps[name][seed] for seed in seeds], [lrs[seed] for seed in seeds]
            factors = [[1 - lr * self.decay[name] for lr in rates],
                       [-(lr / (1 - beta1 ** step)) for lr, step in zip(rates, steps)],
                       [(1 - beta2 ** step) ** 0.5 for step in steps]]
            shape = (len(seeds),) + (1,) * (param.dim() - 1)
            decay, step_size, correction = (torch.tensor(values, dtype=param.dtype, device=param.device).view(shape)
                                            for values in factors)
            whole = len(seeds) == len(self)
            index = None if whole else torch.tensor(seeds, device=param.device)
            tensors = [param, grad, self.exp_avg[name], self.exp_avg_sq[name]]
            p, g, m, v = tensors if whole else [tensor[index] for tensor in tensors]
            if self.decay[name]:
                p.mul_(decay)
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            p.add_(m.mul(step_size).div_((v.sqrt() / correction).add_(self.eps)))  # addcdiv_'s value·t1 / t2
            if not whole:
                for target, value in zip((param, self.exp_avg[name], self.exp_avg_sq[name]), (p, m, v)):
                    target.index_copy_(0, index, value)
