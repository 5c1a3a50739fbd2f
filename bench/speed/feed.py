"""Whether the host's one batch-building thread keeps a GPU fed, per objective, at the GPU experiment's shape: what it
builds, what an H200 consumes (bench.gpu_experiment --plan writes both into reports/gpu-experiment/plan.md;
docs/speed.md)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

PREDICTED_MFU = 0.20  # of the H200's dense bf16 peak: what this shape is predicted to reach before a lease measures it
# The one throughput a lease has measured on an H200 (torch 2.11): one run of the default comparison's shape (mini,
# T = 64, batch 32: 2,048 tokens a step) trained 276k tokens/s, a step every 7.4 ms, launch-bound; 8 such runs at
# once trained 1,534k together. Its per-step overhead is taken as it is (fixed) and scaled by depth (per layer), the
# two ends of the prediction.
MEASURED_TOKENS_PER_S, MEASURED_STEP_TOKENS, MEASURED_LAYERS = 276e3, 2048, 2


def host_feed(data: Path, shape: dict, objectives: tuple[str, ...]) -> dict[str, dict]:
    """Per objective at `shape`: the tokens/s the host builds batches at on one thread (the training loop's own
    builder: corruption of a step's rows and their counts, as its background thread does it), beside the tokens/s an
    H200 consumes at PREDICTED_MFU and the step time the launch-bound measurement predicts."""
    from bench.data.corpus import load_corpus
    from bench.data.text import TextOptions
    from bench.training.batches import build_run_objective, training_batch
    from bench.training.live_metrics import peak_flops
    from bench.training.recipe import RunConfig

    corpus = load_corpus(f"text:{data / 'corpus.jsonl'}", shape["seq_len"],
                         TextOptions(tokenizer=str(data / "tokenizer.json")))
    windows, batch, peak = corpus.windows("train"), shape["batch_size"], peak_flops("NVIDIA H200", "bf16-mixed")
    layers = int(shape["model"].rpartition("n_layer=")[2])
    overhead = MEASURED_STEP_TOKENS / MEASURED_TOKENS_PER_S
    found = {}
    with threads(1):
        for spec in objectives:
            objective = build_run_objective(spec, RunConfig(budget_flops=1.0, model=shape["model"],
                                                              batch_size=batch), corpus)
            seconds = batch * shape["seq_len"] / host_rate(objective, windows, batch, shape["seq_len"], repeats=7)
            flops = objective.flops(training_batch(objective, windows, 0, 0, batch))
            compute = flops / (peak * PREDICTED_MFU)
            found[spec] = {"host_tokens_per_s": batch * shape["seq_len"] / seconds, "flops_per_step": flops,
                           "device_tokens_per_s": batch * shape["seq_len"] / compute,
                           "step_seconds": (compute + overhead, compute + overhead * layers / MEASURED_LAYERS)}
    return found


def host_rate(objective, windows, batch: int, seq_len: int, repeats: int = 5) -> float:
    """Tokens/s of the training loop's batch builder (a step's rows corrupted, their counts) on this process's
    threads: what its one background thread feeds the device at. The fastest of `repeats` builds (after one to warm
    up): on a shared machine the others measure its neighbours too."""
    from bench.training.batches import local_counts, training_batch

    times = []
    for step in range(repeats + 1):
        tick = time.perf_counter()
        local_counts(objective, training_batch(objective, windows, 0, step, batch))
        times.append(time.perf_counter() - tick)
    return batch * seq_len / min(times[1:])


def threads(count: int):
    """torch's intra-op threads set to `count` for the block, as one training run's builder thread has."""
    import contextlib

    @contextlib.contextmanager
    def pinned():
        before = torch.get_num_threads()
        torch.set_num_threads(count)
        try:
            yield
        finally:
            torch.set_num_threads(before)
    return pinned()
