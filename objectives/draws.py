"""Where corruption's random numbers come from: one generator for a whole batch, or one generator per row.

Evaluation batches, tasks and tests corrupt a batch from one `torch.Generator`. Training seeds every row of a global
batch from (seed, step, row) instead (`RowGenerators`): row r of every draw comes from row r's own generator, so a
process of a multi-device run corrupts only its own rows and gets exactly the rows the whole batch would have, on
any number of devices. The corruption code draws through the three functions below and never asks which kind it got;
what it must keep is that a row's draws never depend on the other rows (a loop that draws until every row is done
draws only for the rows not yet done: `active`).
"""

from __future__ import annotations

import torch
from torch import Tensor


class RowGenerators:
    """One generator per row of the batch being corrupted, in order, each made from its seed when it first draws (an
    objective that draws nothing, the causal LM, makes none)."""

    def __init__(self, seeds: list[int]) -> None:
        self.seeds = seeds
        self.generators: list[torch.Generator | None] = [None] * len(seeds)

    def __len__(self) -> int:
        return len(self.seeds)

    def fill(self, values: Tensor, fill_row, active: Tensor | None = None) -> Tensor:
        """`values` (first dimension: the rows) filled in place row by row, `fill_row(row, its generator)`; rows that
        are not `active` are left as they are."""
        if len(values) != len(self.seeds):
            raise ValueError(f"a draw of {len(values)} rows from {len(self.seeds)} row generators")
        drawing = [True] * len(self.seeds) if active is None else active.tolist()
        for index, (row, draws) in enumerate(zip(values.unbind(0), drawing)):
            if draws:
                if self.generators[index] is None:
                    self.generators[index] = torch.Generator().manual_seed(self.seeds[index])
                fill_row(row, self.generators[index])
        return values


Randomness = torch.Generator | RowGenerators


def uniform(generator: Randomness, shape: tuple[int, ...], active: Tensor | None = None) -> Tensor:
    """U[0, 1) draws of `shape`, the first dimension being the batch. With row generators and `active` (batch,)
    bool, only active rows draw (the others hold zeros); one generator draws for every row."""
    if isinstance(generator, torch.Generator):
        return torch.rand(shape, generator=generator)
    return generator.fill(torch.zeros(shape), lambda row, g: row.uniform_(generator=g), active)


def integers(generator: Randomness, low: int, high: int, shape: tuple[int, ...]) -> Tensor:
    """Integers uniform in [low, high), of `shape`, the first dimension being the batch."""
    if isinstance(generator, torch.Generator):
        return torch.randint(low, high, shape, generator=generator)
    return generator.fill(torch.empty(shape, dtype=torch.long), lambda row, g: row.random_(low, high, generator=g))


def categorical(generator: Randomness, probabilities: Tensor, batch: int, active: Tensor | None = None) -> Tensor:
    """(batch,) indices drawn from `probabilities`, one per row (by inverting the cumulative distribution at a
    uniform draw); `active` as for `uniform`."""
    cumulative = probabilities.cumsum(0).to(torch.get_default_dtype())
    index = torch.searchsorted(cumulative, uniform(generator, (batch,), active), right=True)
    return index.clamp_(max=len(probabilities) - 1)  # a draw above the rounded total
