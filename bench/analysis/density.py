"""Signal density: how many positions per sequence carry a loss, analytically and measured, and the training FLOPs
behind them. The library half of `bench.positions`; `bench.compare` puts the same rows in its report.

Every objective describes its own parts (MLM's [MASK] / random / kept split, ELECTRA's discriminator + generator,
span corruption's noise and spans): nothing here knows one objective from another.
"""

from __future__ import annotations

import torch

from backbone import Backbone, BackboneConfig
from objectives import Objective, Vocab, build_objective


def build_on_meta(spec: str, config: BackboneConfig, vocab: Vocab, flops: str = "dense") -> Objective:
    """The objective on the meta device: FLOPs and counts need the shapes, not the weights, so even `base` is free.
    `flops`: the convention its FLOPs are counted in (backbone.flops)."""
    with torch.device("meta"):
        backbone = Backbone(config)
        backbone.flops_convention = flops
        return build_objective(spec, backbone, vocab)


def flops_under(objective: Objective, seq_len: int, convention: str) -> float:
    """The objective's training FLOPs per sequence under another FLOP convention than its own."""
    backbone = objective.backbone
    own, backbone.flops_convention = backbone.flops_convention, convention
    try:
        return objective.expected_flops_per_sequence(seq_len)
    finally:
        backbone.flops_convention = own


def position_row(objective: Objective, seq_len: int, samples: int = 256, seed: int = 0) -> dict:
    """One row of the signal-density table: the analytic supervised positions per sequence, the count measured by
    running corrupt() on `samples` random windows, the objective's own parts, and the training FLOPs."""
    objective.check_seq_len(seq_len)
    generator = torch.Generator().manual_seed(seed)
    vocab = objective.vocab
    tokens = torch.randint(vocab.first_ordinary, vocab.end_ordinary, (samples, seq_len), generator=generator)
    corrupted = objective.corrupt(tokens, generator)
    supervised = objective.expected_supervised_positions(seq_len)
    flops = objective.expected_flops_per_sequence(seq_len)
    return {
        "objective": objective.spec(),
        "attention": objective.attention,
        "supervised_positions": supervised,
        "measured_positions": objective.counted_positions(corrupted) / samples,
        "ratio_to_ar": supervised / (seq_len - 1),
        "incremental_generation": objective.can_generate,
        "flops_per_sequence": flops,
        "flops_per_supervised_position": flops / supervised,
        # what a budget buys under each convention: executed attention is cheaper for causal masks only
        "dense_flops_per_sequence": flops_under(objective, seq_len, "dense"),
        "executed_flops_per_sequence": flops_under(objective, seq_len, "executed"),
        **objective.describe(seq_len),
        **objective.measure_parts(corrupted),
    }
