"""The GPU experiment's plan before any lease (`python -m bench.gpu_experiment --plan PAGE`): what a first lease is
predicted to take on an H200, and whether the host's one batch-building thread keeps the device fed, per objective
(reports/gpu-experiment/plan.md; docs/speed.md)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch

from bench.gpu_experiment import (MARGIN_SECONDS, OBJECTIVES, OVERHEAD, SEEDS_FIRST, SHAPE, STARTUP_SECONDS,
                                  TARGET_SEEDS, choose, device_name)

PREDICTED_MFU = 0.20  # of the H200's dense bf16 peak: what this shape is predicted to reach before a lease measures it
# The one throughput a lease has measured on an H200 (torch 2.11): one run of the default comparison's shape (mini,
# T = 64, batch 32: 2,048 tokens a step) trained 276k tokens/s, a step every 7.4 ms, launch-bound; 8 such runs at
# once trained 1,534k together. Its per-step overhead is taken as it is (fixed) and scaled by depth (per layer), the
# two ends of the prediction.
MEASURED_TOKENS_PER_S, MEASURED_STEP_TOKENS, MEASURED_LAYERS = 276e3, 2048, 2


def host_feed(data: Path) -> dict[str, dict]:
    """Per objective at SHAPE: the tokens/s the host builds batches at on one thread (the training loop's own
    builder: corruption of a step's rows and their counts, as its background thread does it), beside the tokens/s an
    H200 consumes at PREDICTED_MFU and the step time the launch-bound measurement predicts."""
    from bench.data.corpus import load_corpus
    from bench.data.text import TextOptions
    from bench.training.batches import build_run_objective, training_batch
    from bench.training.config import RunConfig
    from bench.training.live_metrics import peak_flops

    corpus = load_corpus(f"text:{data / 'corpus.jsonl'}", SHAPE["seq_len"],
                         TextOptions(tokenizer=str(data / "tokenizer.json")))
    windows, batch, peak = corpus.windows("train"), SHAPE["batch_size"], peak_flops("NVIDIA H200", "bf16-mixed")
    layers = int(SHAPE["model"].rpartition("n_layer=")[2])
    overhead = MEASURED_STEP_TOKENS / MEASURED_TOKENS_PER_S
    found = {}
    with threads(1):
        for spec in OBJECTIVES:
            objective = build_run_objective(spec, RunConfig(budget_flops=1.0, model=SHAPE["model"],
                                                              batch_size=batch), corpus)
            seconds = batch * SHAPE["seq_len"] / host_rate(objective, windows, batch, SHAPE["seq_len"], repeats=7)
            flops = objective.flops(training_batch(objective, windows, 0, 0, batch))
            compute = flops / (peak * PREDICTED_MFU)
            found[spec] = {"host_tokens_per_s": batch * SHAPE["seq_len"] / seconds, "flops_per_step": flops,
                           "device_tokens_per_s": batch * SHAPE["seq_len"] / compute,
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


def write_plan(path: Path, data: Path, limit: float) -> None:
    """The predicted phases of a first lease of `limit` seconds on an H200 and the host's feed, as a page."""
    feed = host_feed(data)
    lines = ["# The GPU experiment, predicted", "",
             f"Written by `python -m bench.gpu_experiment --plan` on {device_name()} ({torch.__version__}), at the "
             f"experiment's shape ({SHAPE['model']}, T = {SHAPE['seq_len']}, batch {SHAPE['batch_size']}, "
             f"{SHAPE['precision']}) on the bundle's corpus. Nothing here ran on a GPU: the device's side is predicted "
             f"from each objective's FLOPs per step at {PREDICTED_MFU:.0%} of the H200's dense bf16 peak, plus the "
             "per-step overhead of the one H200 measurement (the default shape, launch-bound), taken as it is or "
             "scaled by depth: the two ends of each range.", "",
             "## Does the host keep the device fed?", "",
             "Tokens/s the host builds training batches at (the loop's own builder, on one thread, as its background "
             f"thread runs it; the fastest of 7 builds, with a load average of {os.getloadavg()[0]:.1f} on "
             f"{os.cpu_count()} cores) against the tokens/s the device consumes:", "",
             "| objective | host, one thread | device at the predicted MFU | device, launch-bound range | margin |",
             "|---|---|---|---|---|"]
    for spec, f in feed.items():
        fast = f["device_tokens_per_s"]  # the most the device asks for: compute alone, no overhead
        slow = SHAPE["batch_size"] * SHAPE["seq_len"] / f["step_seconds"][1]
        lines.append(f"| {spec} | {f['host_tokens_per_s']:,.0f} | {f['device_tokens_per_s']:,.0f} | "
                     f"{slow:,.0f} to {SHAPE['batch_size'] * SHAPE['seq_len'] / f['step_seconds'][0]:,.0f} | "
                     f"{f['host_tokens_per_s'] / fast:.1f}x |")
    rates = {spec: {"flops_per_s": f["flops_per_step"] / f["step_seconds"][1]} for spec, f in feed.items()}
    fast_rates = {spec: {"flops_per_s": f["flops_per_step"] / f["step_seconds"][0]} for spec, f in feed.items()}
    training = limit - 60 - STARTUP_SECONDS - MARGIN_SECONDS
    budgets = [choose({}, training / OVERHEAD, r, TARGET_SEEDS, None)[0] for r in (rates, fast_rates)]
    lines += ["", "Where the margin is under 2x, the device may wait for the host: build batches on the device or in "
              "loader workers.", "", f"## A first lease of {limit:.0f} s", "",
              "| phase | predicted seconds |", "|---|---|",
              "| unpack the bundle, install the missing wheels, import | 30 to 60 |",
              "| throughput measurement (each objective, two short runs) | 60 |",
              f"| bench.compare's start (imports, tokenizing the corpus on {SHAPE['num_proc']} processes, tasks) | "
              f"{STARTUP_SECONDS} |",
              f"| training: mlm, ar, electra x {SEEDS_FIRST} seeds | {training / OVERHEAD:.0f} |",
              f"| evaluations, controls, fine-tuning, report (taken as {OVERHEAD - 1:g}x training until measured) | "
              f"{training - training / OVERHEAD:.0f} |", f"| left for the stop's save and the copy back | "
              f"{MARGIN_SECONDS} |", "",
              f"The budget point it would choose: {budgets[0]:.2g} to {budgets[1]:.2g} FLOPs per run "
              f"(launch-bound per layer, and fixed), {SEEDS_FIRST} seeds of each objective."]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    print(f"plan: {path}")
