"""Training throughput at one shape, measured on the training code itself: a run of a few steps alone (train_run),
several runs at once in processes of their own (the spawn context, one thread each: what running one job per core
does). Each is timed as its results time it: train_seconds, the training steps with their batches built, evaluation
left out. bench.perf's --comparison-steps rows.
"""

from __future__ import annotations

import multiprocessing
import tempfile
from pathlib import Path

import torch

from bench.data.corpus import Corpus, load_corpus
from bench.orchestration.config import TrainingConfig
from bench.orchestration.planning import learning_rates
from bench.orchestration.works import threads
from bench.training.batches import build_run_objective, training_batch
from bench.training.distributed import make_fabric
from bench.training.recipe import RunConfig
from bench.training.records import RunRecord
from bench.training.runs import train_run
from bench.training.state import Context, Work


def steps_config(spec: str, corpus: Corpus, steps: int, model: str, batch_size: int) -> RunConfig:
    """A run of `spec` at the default's rate for it that stops after `steps` steps (exactly, for objectives whose
    steps all cost the same), with one evaluation (at the end, outside the timed steps) and no live metrics."""
    objective = build_run_objective(spec, RunConfig(budget_flops=1.0, model=model, batch_size=batch_size), corpus)
    per_step = objective.flops(training_batch(objective, corpus.windows("train"), 0, 0, batch_size))
    return RunConfig(budget_flops=steps * per_step, model=model, batch_size=batch_size, eval_points=1,
                       eval_windows=batch_size, log_every=0,
                       lr=learning_rates(TrainingConfig.lr, [spec], strict=False)[spec])


def totals(results: list[RunRecord], seconds: float) -> dict:
    """What the runs trained together: tokens, FLOPs, and the seconds they took (runs at once: the longest)."""
    return {"runs": len(results), "tokens": sum(r.tokens for r in results),
            "flops": sum(r.flops for r in results), "seconds": seconds}


def alone(spec: str, corpus: Corpus, config: RunConfig, thread_count: int, seed: int = 0) -> dict:
    """One run on `thread_count` threads."""
    with threads(thread_count), tempfile.TemporaryDirectory() as folder:
        result = train_run(make_fabric(), Work(spec, seed, config, Path(folder)), Context(corpus))
    return totals([result], result.train_seconds)


def at_once(spec: str, corpus: Corpus, config: RunConfig, processes: int) -> dict:
    """`processes` runs (seeds 0, 1, ...) at the same time, each in a process of its own on one thread, started
    together once every process is ready: the aggregate over the longest run's seconds."""
    context = multiprocessing.get_context("spawn")
    ready, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=_worker, args=(spec, corpus, config, seed, ready, results))
               for seed in range(processes)]
    for worker in workers:
        worker.start()
    try:
        done = [results.get(timeout=3600) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=60)
    failed = [message for message in done if isinstance(message, str)]
    if failed:
        raise RuntimeError(f"a run of the throughput measurement failed: {failed[0]}")
    return totals(done, max(r.train_seconds for r in done))


def _worker(spec: str, corpus: Corpus, config: RunConfig, seed: int, ready, results) -> None:
    torch.set_num_threads(1)
    try:
        with tempfile.TemporaryDirectory() as folder:
            fabric = make_fabric()
            ready.wait(timeout=600)
            result = train_run(fabric, Work(spec, seed, config, Path(folder)), Context(corpus))
        results.put(result)
    except Exception as error:  # noqa: BLE001 - reported by the parent, which would otherwise wait for nothing
        results.put(f"{type(error).__name__}: {error}")


def comparison_rows(steps: int, spec: str = "mlm", model: str = "mini", seq_len: int = 64,
                    batch_size: int = 32, data: str = "synthetic", rounds: int = 3) -> list[dict]:
    """The default comparison's training (bench.compare's model, length, batch and data, fp32, on the CPU), `steps`
    steps of `spec` through the training code (this module): one run on every thread, one run on one
    thread and two runs at once (two processes of one thread each, as one job per core runs them). Beside each, as
    its peer, the one run on every thread.

    Each is measured in `rounds` rounds that take the three in turn, and its median round is kept (its seconds in
    every round beside it): a shared machine's slower spells, which moved one setting by a tenth between two runs of
    bench.perf, fall on every setting alike and on one round, not on one setting's only measurement."""
    corpus = load_corpus(data, seq_len)
    config = steps_config(spec, corpus, steps, model, batch_size)
    every = torch.get_num_threads()
    shape = f"{spec} at the default comparison's shape ({model}, T = {seq_len}, batch {batch_size})"
    settings = {f"{shape}: one run, {every} threads": lambda: alone(spec, corpus, config, every),
                f"{shape}: one run, 1 thread": lambda: alone(spec, corpus, config, 1),
                f"{shape}: two runs at once, 2 processes of 1 thread": lambda: at_once(spec, corpus, config, 2)}
    taken: dict[str, list[dict]] = {name: [] for name in settings}
    for _ in range(rounds):
        for name, measured in settings.items():
            taken[name].append(measured())
    rows = []
    for name, each in taken.items():
        median = sorted(each, key=lambda one: one["seconds"])[len(each) // 2]
        rows.append({"name": name, "ours_tokens_per_s": median["tokens"] / median["seconds"],
                     "ours_flops_per_s": median["flops"] / median["seconds"],
                     "flops_per_step": median["flops"] / (median["runs"] * steps), **median,
                     "seconds_each_round": [one["seconds"] for one in each]})
    for row in rows[1:]:
        row.update(peer_tokens_per_s=rows[0]["ours_tokens_per_s"], peer_flops_per_s=rows[0]["ours_flops_per_s"])
    return rows

