import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from ddp_job import acting_forward
from torch.utils._python_dispatch import TorchDispatchMode

import backbone.flops
import bench.orchestration.memory
import bench.training.distributed
import bench.training.loop
import bench.training.runs
import bench.training.state
import bench.yardsticks.probes
from backbone import ConfigError, Transformer, preset
from bench.analysis.density import build_on_meta
from bench.common.files import read_jsonl
from bench.common.seeds import derive_seed
from bench.common.stopping import EXIT_STOPPED, RunStopped
from bench.orchestration.memory import check_memory
from bench.orchestration.works import threads
from bench.training.batches import (ROW_STREAM, Prefetcher, build_run_objective, eval_batches, local_counts,
                                    training_batch)
from bench.training.distributed import agree, make_fabric, step_counts
from bench.training.loop import TrainingDiverged, train_step
from bench.training.records import COUNTERS_SCHEMA, RunRecord, from_json
from bench.training.recipe import (RunConfig, check_batch_split, check_config, configure_matmuls, cooldown_start,
                                   eval_grid, learning_rate, make_optimizer, parse_seq_len, predict_phases,
                                   tf32_matmuls)
from bench.training.runs import train_run
from bench.training.state import Context, Work, setup_run
from bench.yardsticks.downstream import Downstream, FinetuneConfig
from bench.yardsticks.examples import TaskContext
from bench.yardsticks.probes import ProbeConfig, Probes
from bench.yardsticks.tasks import load_task
from objectives import IGNORE, Vocab
from tests.helpers import signalling, written_record

SEQ_LEN, BATCH = 32, 4
TIMINGS = ("wall_seconds", "train_seconds", "tokens_per_second", "probe_seconds", "downstream_seconds")


def checkpoint_task(corpus) -> Downstream:
    """A yardstick with a curve: the embedded states task, read frozen at every checkpoint."""
    context = TaskContext(corpus.seq_len, corpus.vocab, language=corpus.language)
    return Downstream([load_task("synthetic:states,size=64", context)],
                      FinetuneConfig(steps=2, batch=2, lrs=(1e-3,), probe=ProbeConfig(iterations=3)))


def config(budget: float = 4e8, **overrides) -> RunConfig:
    return RunConfig(budget_flops=budget, model="tiny", batch_size=BATCH, eval_windows=8, eval_points=3,
                       lr=3e-3, **overrides)


def without_timings(result: RunRecord) -> dict:
    return {k: v for k, v in result.to_json().items() if k not in TIMINGS}


def test_eval_grid_is_log_spaced_and_ends_at_the_budget():
    grid = eval_grid(RunConfig(budget_flops=1e12, model="tiny", eval_points=5, first_eval=0.01))
    assert grid[0] == pytest.approx(1e10) and grid[-1] == 1e12
    ratios = [b / a for a, b in zip(grid, grid[1:])]
    assert ratios == pytest.approx([10 ** 0.5] * 4, rel=1e-5)
    assert eval_grid(RunConfig(budget_flops=3e9, model="tiny", eval_points=1)) == [3e9]


def test_schedule_warms_up_holds_and_cools_down_to_zero_at_the_budget_it_ends_at():
    c = RunConfig(budget_flops=100.0, model="tiny", lr=1e-3, warmup=0.1, cooldown=0.2)
    assert learning_rate(5, 100, c) == pytest.approx(0.5e-3)  # half-way up the warm-up (10 FLOPs)
    assert learning_rate(10, 100, c) == learning_rate(80, 100, c) == pytest.approx(1e-3)  # stable
    assert learning_rate(90, 100, c) == pytest.approx(0.5e-3)  # half-way down the cool-down
    assert learning_rate(100, 100, c) == 0.0
    # a checkpoint's branch: the same warm-up in FLOPs, the same rate until its own cool-down starts
    assert learning_rate(5, 50, c) == learning_rate(5, 100, c)
    assert cooldown_start(50, c) == 40 and learning_rate(40, 50, c) == learning_rate(40, 100, c) == 1e-3
    assert learning_rate(45, 50, c) == pytest.approx(0.5e-3) and learning_rate(45, 100, c) == 1e-3
    values = [learning_rate(f, 100, c) for f in range(10, 101)]
    assert all(a >= b for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("spec, per_sequence", [("ar", SEQ_LEN - 1), ("mlm", round(0.15 * SEQ_LEN)),
                                                ("mlm:rate=0.4", round(0.4 * SEQ_LEN)),
                                                ("electra", SEQ_LEN + round(0.15 * SEQ_LEN)), ("span", None)])
@pytest.mark.slow
def test_runs_stop_within_one_step_of_the_budget(spec, per_sequence, corpus, fabric, tmp_path):
    c = config()
    result = train_run(fabric, Work(spec, 0, c, tmp_path), Context(corpus))
    objective = build_run_objective(spec, c, corpus)
    step_flops = objective.expected_flops_per_sequence(SEQ_LEN) * BATCH  # exact-rule objectives: fixed per step
    assert c.budget_flops <= result.flops < c.budget_flops + step_flops
    assert result.flops == result.steps * step_flops
    if per_sequence is None:
        per_sequence = objective.lengths(SEQ_LEN).targets
    assert result.supervised_positions == result.steps * BATCH * per_sequence
    assert result.tokens == result.steps * BATCH * SEQ_LEN
    curve = result.curve
    assert [row.checkpoint for row in curve] == eval_grid(c)
    assert all(row.flops >= row.checkpoint for row in curve) and curve[-1].step == result.steps
    assert all(math.isfinite(row.metrics["loss"]) for row in curve)
    assert read_jsonl(tmp_path / "curve.jsonl") == [row.to_json() for row in curve] and (tmp_path / "result.json").exists()


def test_bernoulli_runs_count_what_they_executed(corpus, fabric, tmp_path):
    c = config()
    result = train_run(fabric, Work("mlm:rule=bernoulli", 0, c, tmp_path), Context(corpus))
    assert c.budget_flops <= result.flops
    # recount: corrupt each row of each step's windows afresh, alone, from (seed, step, row), and count the chosen
    objective, windows = build_run_objective("mlm:rule=bernoulli", c, corpus), corpus.windows("train")
    chosen = [sum(int((objective.corrupt(windows[(step * BATCH + row) % len(windows)][None], torch.Generator().manual_seed(
                  derive_seed(0, step, row, ROW_STREAM))).targets != IGNORE).sum()) for row in range(BATCH))
              for step in range(result.steps)]
    assert result.supervised_positions == sum(chosen)
    assert len(set(chosen)) > 1  # Bernoulli: the count varies from step to step


@pytest.mark.slow
def test_same_seed_same_numbers_and_seeds_differ(corpus, fabric, tmp_path):
    a = train_run(fabric, Work("electra", 3, config(), tmp_path / "a"), Context(corpus))
    b = train_run(fabric, Work("electra", 3, config(), tmp_path / "b"), Context(corpus))
    assert without_timings(a) == without_timings(b)
    c = train_run(fabric, Work("electra", 4, config(), tmp_path / "c"), Context(corpus))
    assert a.curve[-1].metrics["loss"] != c.curve[-1].metrics["loss"]


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["mlm", "electra"])
def test_an_interrupted_run_resumes_exactly(spec, corpus, fabric, tmp_path):
    # a task read at every checkpoint must not disturb training either
    c, probe = config(probe_every_eval=True), [checkpoint_task(corpus)]
    straight = train_run(fabric, Work(spec, 1, c, tmp_path / "straight"), Context(corpus, probe))
    assert all("synthetic:states,size=64" in row.downstream for row in straight.curve)
    stopped_at = straight.steps // 2 + 1  # after the first checkpoint, between two others
    assert train_run(fabric, Work(spec, 1, c, tmp_path / "resumed"), Context(corpus, probe),
                     stop_after_steps=stopped_at) is None
    assert not (tmp_path / "resumed" / "result.json").exists()
    resumed = train_run(fabric, Work(spec, 1, c, tmp_path / "resumed"), Context(corpus, probe))
    assert without_timings(resumed) == without_timings(straight)
    unprobed = train_run(fabric, Work(spec, 1, config(), tmp_path / "unprobed"), Context(corpus))
    assert [row.metrics for row in unprobed.curve] == [row.metrics for row in straight.curve]


@pytest.mark.slow  # three trainings per objective, 20-35 s each on 2 cores
@pytest.mark.parametrize("spec", ["mlm", "electra"])
def test_each_curve_point_is_the_run_trained_to_its_budget_to_the_last_bit(spec, corpus, fabric, tmp_path):
    """A checkpoint's cool-down branch takes the steps of a separate run whose budget is the checkpoint (the same
    warm-up in FLOPs): its evaluation and its frozen read are that run's, exactly; its FLOPs are counted apart, and
    the run it branched from goes on as if it never had."""
    c, probe = config(4e9, probe_every_eval=True), [checkpoint_task(corpus)]
    run = train_run(fabric, Work(spec, 2, c, tmp_path / "run"), Context(corpus, probe))
    grid = eval_grid(c)
    assert [row.checkpoint for row in run.curve] == grid
    for point, checkpoint in zip(run.curve[:-1], grid):
        alone = replace(c, budget_flops=checkpoint, eval_points=1, warmup=c.warmup * c.budget_flops / checkpoint)
        separate = train_run(fabric, Work(spec, 2, alone, tmp_path / f"{checkpoint:g}"), Context(corpus, probe))
        (row,) = separate.curve
        assert (point.step, point.flops, point.metrics, point.downstream) == \
            (row.step, row.flops, row.metrics, row.downstream)
    # what the branches spent: each from the last step before its cool-down to its checkpoint
    step_flops = int(run.flops_per_step)  # the same every step for these objectives
    forks = [(int(cooldown_start(point.checkpoint, c)) // step_flops + 1) * step_flops for point in run.curve[:-1]]
    assert run.cooldown_flops == sum(point.flops - fork for point, fork in zip(run.curve, forks))
    assert run.cooldown_steps == run.cooldown_flops // step_flops > 0
    # and the run itself is the one that never branched: the same as a run with one evaluation, at its end
    once = train_run(fabric, Work(spec, 2, replace(c, eval_points=1), tmp_path / "once"), Context(corpus))
    assert (once.steps, once.flops, once.curve[-1].metrics) == (run.steps, run.flops, run.curve[-1].metrics)
    assert once.cooldown_steps == once.cooldown_flops == 0


def test_a_kill_while_resume_rewrites_the_curve_leaves_its_evaluations(corpus, fabric, tmp_path, monkeypatch):
    """Resuming drops the curve rows after the checkpoint. The checkpoint's counters are past the rows it keeps, so
    they are never evaluated again: a kill mid-rewrite (here, as the curve is written) must leave them on disk."""
    assert train_run(fabric, Work("ar", 0, config(), tmp_path), Context(corpus),
                     stop_after_steps=12) is None
    kept = read_jsonl(tmp_path / "curve.jsonl")
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["counters"]
    assert kept and len(kept) == saved["next_eval"] and saved["step"] <= 12
    with open(tmp_path / "curve.jsonl", "a") as curve:  # an evaluation made after the checkpoint, to be redone
        curve.write(json.dumps({**kept[-1], "step": 13}) + "\n")

    class Killed(Exception):
        pass

    def killed(*args):
        raise Killed

    def killed_replacing_the_curve(source, target):
        if Path(target).name == "curve.jsonl":
            raise Killed
        replace(source, target)

    # whichever way the curve is rewritten: row by row (killed at its first row) or in one replace (killed there)
    replace = os.replace
    monkeypatch.setattr(bench.training.state, "append_jsonl", killed, raising=False)
    monkeypatch.setattr(os, "replace", killed_replacing_the_curve)
    with pytest.raises(Killed):
        train_run(fabric, Work("ar", 0, config(), tmp_path), Context(corpus))
    assert read_jsonl(tmp_path / "curve.jsonl")[:len(kept)] == kept


def test_a_run_resumed_on_other_threads_says_its_last_digits_will_differ(corpus, fabric, tmp_path, capsys):
    """A CPU's sums split by thread round in another order: a run that continues on another thread count than it
    trained on cannot equal an uninterrupted one, and says so (more --seeds can change the count without --jobs)."""
    with threads(1):
        assert train_run(fabric, Work("ar", 0, config(), tmp_path), Context(corpus),
                         stop_after_steps=5) is None
    with threads(2):
        train_run(fabric, Work("ar", 0, config(), tmp_path), Context(corpus), stop_after_steps=8)
    assert "trained on 1 thread until now and continues on 2" in capsys.readouterr().err
    with threads(1):  # the checkpoint is still the first session's (an interruption saves nothing new)
        train_run(fabric, Work("ar", 0, config(), tmp_path), Context(corpus), stop_after_steps=8)
    assert "continues on" not in capsys.readouterr().err  # the count it trained on: nothing to say


def test_checkpoints_hold_only_plain_data(corpus, fabric, tmp_path):
    train_run(fabric, Work("ar", 0, config(), tmp_path), Context(corpus))
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert set(state) == {"model", "optimizer", "counters", "precision"}
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


@pytest.mark.slow
def test_a_compiled_run_counts_and_learns_like_an_eager_one(corpus, fabric, tmp_path):
    eager = train_run(fabric, Work("electra", 2, config(budget=1e8), tmp_path / "eager"), Context(corpus))
    compiled = train_run(fabric, Work("electra", 2, config(budget=1e8, compile=True), tmp_path / "compiled"),
                         Context(corpus))
    assert (compiled.steps, compiled.flops, compiled.supervised_positions) == \
        (eager.steps, eager.flops, eager.supervised_positions)
    last = [run.curve[-1].metrics["loss"] for run in (compiled, eager)]
    assert last[0] == pytest.approx(last[1], rel=1e-3)


def poison_training_forward(monkeypatch, spec_class, call: int, action) -> None:
    """Run `action(output)` on the output of the `call`-th training forward (1-based) of objectives of spec_class."""
    monkeypatch.setattr(spec_class, "forward", acting_forward(spec_class, call, action))


def test_the_prefetcher_hands_over_only_the_batch_asked_for():
    built = []

    def build(step, phase):
        built.append((step, phase))
        return step, phase

    prefetch = Prefetcher(build)
    prefetch.start(1, 0)
    assert prefetch.take(1, 0) == (1, 0) and built == [(1, 0)]  # built in the background, handed over
    prefetch.start(2, 0)
    assert prefetch.take(2, 1) == (2, 1)  # not what was prefetched: built in place
    assert prefetch.take(3, 1) == (3, 1)  # nothing prefetched
    prefetch.close()
    assert built.count((2, 1)) == 1 and built.count((3, 1)) == 1  # (2, 0) may or may not have run before the close


ROW_SPECS = ["mlm", "mlm:rule=bernoulli", "ar", "electra", "span", "mlm:whole_word=true", "mlm:span=geometric",
             "mlm:static=2", "mlm:pair=nsp", "mlm:pair=sop"]


def worded_objective(spec: str):
    """`spec` on a vocabulary where a third of the ids continue a word, so whole words and spans have words."""
    vocab = Vocab.for_tokenizer(60, continuation=torch.arange(160) % 3 == 0)
    return build_run_objective(spec, RunConfig(budget_flops=1, model="tiny"),
                               type("C", (), {"vocab": vocab, "seq_len": 48})())


def same_batch(a, b) -> bool:
    return (a.attention == b.attention and a.prefix_len == b.prefix_len and a.row_offsets == b.row_offsets
            and all(torch.equal(x, y) for x, y in zip((a.inputs, a.targets, a.original, a.supervised),
                                                      (b.inputs, b.targets, b.original, b.supervised)))
            and a.info.keys() == b.info.keys() and all(torch.equal(a.info[k], b.info[k]) for k in a.info))


@pytest.mark.parametrize("spec", ROW_SPECS)
def test_each_process_corrupts_its_rows_as_the_global_batch_has_them(spec):
    objective = worded_objective(spec)
    windows = torch.randint(5, 60, (20, 48), generator=torch.Generator().manual_seed(3))
    for step in (0, 7):  # step 7 wraps around the 20 windows (and, statically masked, uses the second copies)
        whole = training_batch(objective, windows, 0, step, 8)
        for share in (slice(0, 4), slice(4, 8), slice(0, 1), slice(3, 6)):  # 2 processes, 8, and any run of rows
            assert same_batch(training_batch(objective, windows, 0, step, 8, share), whole.rows(share))
        if spec != "ar":  # the causal LM draws nothing; every other objective's masks change with the seed
            assert not same_batch(whole, training_batch(objective, windows, 1, step, 8))


@pytest.mark.parametrize("spec", [spec for spec in ROW_SPECS if ":pair" not in spec and ":static" not in spec])
def test_a_rows_corruption_is_its_own_generators_on_that_row_alone(spec):
    # the independent check on drawing row by row: row r of a batch is what a plain generator seeded (seed, step,
    # r) makes of window r alone, so no row's draws depend on the others (spans draw only while a row is short)
    objective = worded_objective(spec)
    windows = torch.randint(5, 60, (8, 48), generator=torch.Generator().manual_seed(4))
    whole = training_batch(objective, windows, 2, 5, 8)
    for row in range(8):
        alone = objective.corrupt(windows[row][None], torch.Generator().manual_seed(derive_seed(2, 5, row, ROW_STREAM)))
        assert same_batch(alone, whole.rows(slice(row, row + 1)))


@pytest.mark.parametrize("spec", ROW_SPECS)
def test_the_processes_counts_add_up_to_the_global_batchs(spec):
    # step_counts sums each process's FLOPs and counts: exact only if every count is a sum over rows
    objective = worded_objective(spec)
    windows = torch.randint(5, 60, (8, 48), generator=torch.Generator().manual_seed(6))
    whole = training_batch(objective, windows, 0, 1, 8)
    shares = [whole.rows(slice(start, start + 2)) for start in range(0, 8, 2)]
    assert sum(objective.flops(share) for share in shares) == objective.flops(whole)
    assert sum(objective.counted_positions(share) for share in shares) == objective.counted_positions(whole)
    for name, count in objective.loss_counts(whole).items():
        assert sum(objective.loss_counts(share)[name] for share in shares) == count


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["mlm", "ar", "electra", "span", "mlm:rule=bernoulli", "mlm:pair=nsp"])
def test_micro_batches_train_like_the_whole_batch(spec, corpus, fabric, tmp_path):
    whole = train_run(fabric, Work(spec, 0, config(budget=2e8), tmp_path / "whole"), Context(corpus))
    for size in (1, 2):
        micro = train_run(fabric, Work(spec, 0, config(budget=2e8, micro_batch=size), tmp_path / f"micro{size}"),
                          Context(corpus))
        counts = ("steps", "flops", "tokens", "supervised_positions", "flops_per_step")
        assert {k: getattr(micro, k) for k in counts} == {k: getattr(whole, k) for k in counts}
        assert [row.step for row in micro.curve] == [row.step for row in whole.curve]
        for a, b in zip(micro.curve, whole.curve):
            assert a.metrics["loss"] == pytest.approx(b.metrics["loss"], rel=1e-5)


def test_a_micro_batch_must_divide_each_process_share():
    check_batch_split(8, 2, 2)
    for micro in (3, 0, 8):
        with pytest.raises(ConfigError, match=f"--micro-batch {micro} does not divide the 4 windows each process"):
            check_batch_split(8, 2, micro)
    with pytest.raises(ConfigError, match="--checkpoint-every must be a positive"):
        check_config(RunConfig(budget_flops=1.0, model="tiny", checkpoint_every=0.0), 1)


def test_the_memory_check_counts_one_micro_batch_and_checkpointing(monkeypatch):
    from bench.orchestration.memory import step_memory
    vocab = Vocab.for_words(64)
    objective = build_on_meta("mlm", preset("tiny", vocab.size, max_seq_len=512, n_layer=8), vocab)
    cpu = torch.device("cpu")
    # room for a step of 8 windows, but not of 32
    monkeypatch.setattr(bench.orchestration.memory, "device_memory_bytes",
                        lambda device: step_memory(objective, 8, 512, "32-true", cpu).total)
    with pytest.raises(ConfigError, match="at 32 windows per forward"):
        check_memory(objective, 32, 512, "32-true", cpu)
    check_memory(objective, 8, 512, "32-true", cpu)
    checkpointed = step_memory(objective, 32, 512, "32-true", cpu, checkpointing=True)
    assert checkpointed.activations < step_memory(objective, 8, 512, "32-true", cpu).activations
    check_memory(objective, 32, 512, "32-true", cpu, checkpointing=True)
    # bf16 autocast halves most activations, not the fp32 weights, gradients and moments (plus the half copies)
    mixed, full = (step_memory(objective, 8, 512, precision, cpu) for precision in ("bf16-mixed", "32-true"))
    assert 0.5 < mixed.activations / full.activations < 0.7 and mixed.state == full.state * 18 // 16


def saved_bytes(objective, batch, precision: str) -> int:
    """The bytes autograd keeps for the backward pass of a training forward, each storage once, parameters aside
    (saved_tensors_hooks see every tensor as it is saved)."""
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    parameters = {p.untyped_storage().data_ptr() for p in objective.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed"):
            objective(batch)
    return sum(size for pointer, size in storages.items() if pointer not in parameters)


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
@pytest.mark.parametrize("spec", ["mlm", "ar", "electra", "span", "mlm:pair=nsp"])
def test_the_memory_estimate_bounds_what_a_step_saves(spec, precision):
    # under bf16 autocast the residual stream stays fp32: 2 bytes per value alone fell 20-30 % short of this
    from bench.orchestration.memory import ALLOCATOR_SLACK, step_memory
    vocab = Vocab.for_words(512)
    corpus = type("C", (), {"vocab": vocab, "seq_len": 128})()
    objective = build_run_objective(spec, RunConfig(budget_flops=1, model="mini"), corpus).train()
    windows = torch.randint(5, vocab.size, (8, 128), generator=torch.Generator().manual_seed(0))
    measured = saved_bytes(objective, training_batch(objective, windows, 0, 0, 8), precision)
    estimate = step_memory(objective, 8, 128, precision, torch.device("cpu")).saved
    # held from both sides: at most the allocator slack check_memory adds below (ELECTRA's small generator keeps
    # 4 % more per value than the formula), at most 30 % above (the heads are bounded as if every position counted)
    assert measured <= estimate * ALLOCATOR_SLACK and estimate <= 1.3 * measured, (measured, estimate)


@pytest.mark.parametrize("device, windows", [("cuda", 8), ("cpu", 4)])
def test_the_memory_estimate_counts_a_chunk_of_logits_no_longer_than_the_step(device, windows):
    # a GPU's chunk may hold 2^28 bytes of logits and a CPU's 1,024 rows; a step of fewer positions projects fewer.
    # Counted whole (384 MiB at vocabulary 8,192), it put an H200 step that peaked at 275-323 MiB (small, T = 128,
    # batch 32, bf16) at 685-742 MiB
    from backbone.fused_loss import chunk_rows
    from bench.orchestration.memory import step_memory
    vocab = Vocab.for_words(512)
    objective = build_run_objective("ar", RunConfig(budget_flops=1, model="mini"),
                                    type("C", (), {"vocab": vocab, "seq_len": 128})())
    assert chunk_rows(torch.device(device), vocab.size) > windows * 128  # the chunk the device allows is longer
    for precision, value_bytes in (("32-true", 4), ("bf16-mixed", 2)):
        estimate = step_memory(objective, windows, 128, precision, torch.device(device))
        assert estimate.chunk == windows * 128 * vocab.size * (4 + value_bytes)


class DeviceReads(TorchDispatchMode):
    """Records the ops that make the host wait for the device: reading a value (`item`, `_local_scalar_dense`) and
    `nonzero`, whose output size only the device knows."""

    WATCHED = ("_local_scalar_dense", "nonzero", "item")

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, torch.Tensor]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name in self.WATCHED:
            self.calls.append((name, args[0]))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("micro_batch", [None, 2])
@pytest.mark.parametrize("spec", ["mlm", "ar", "electra", "span", "mlm:rule=bernoulli"])
def test_a_training_step_reads_one_number_from_the_device(spec, micro_batch, corpus, fabric, tmp_path):
    run = setup_run(fabric, Work(spec, 0, config(micro_batch=micro_batch), tmp_path), Context(corpus))
    windows = corpus.windows("train")
    for step in range(2):  # the first step creates the optimizer state, the second runs with it
        run.counters.step = step
        batch = training_batch(run.objective, windows, 0, step, BATCH)  # corruption is host-side, before the step
        with DeviceReads() as reads:
            spent = step_counts(fabric, local_counts(run.objective, batch))
            loss = agree(fabric, train_step(fabric, run, batch, spent.loss_counts), False, False).loss
        # PyTorch's AdamW keeps its step counts on the host (unless fused, as on CUDA): reading them waits for nothing
        counts = [state["step"] for state in run.optimizer.state.values()]
        device_reads = [name for name, tensor in reads.calls if not any(tensor is count for count in counts)]
        assert device_reads == ["_local_scalar_dense"], f"step {step}: {device_reads}"  # the loss, read once
        assert math.isfinite(loss)


def test_a_nan_loss_stops_the_run_with_one_line(corpus, fabric, tmp_path, monkeypatch):
    # a real NaN: its gradients are NaN too, which gradient clipping must not turn into a traceback
    from objectives import MaskedLM
    poison_training_forward(monkeypatch, MaskedLM, 3, lambda output: setattr(output, "loss", output.loss * math.nan))
    with pytest.raises(TrainingDiverged, match=r"^mlm seed 0 diverged: the loss became nan at step 2 \(last finite "
                                               r"loss \d") as error:
        train_run(fabric, Work("mlm", 0, config(), tmp_path), Context(corpus))
    assert error.value.record["step"] == 2 and len(str(error.value).splitlines()) == 1


@pytest.mark.slow
def test_the_clock_saves_between_evaluations_and_the_run_resumes_exactly(corpus, fabric, tmp_path):
    straight = train_run(fabric, Work("electra", 0, config(), tmp_path / "straight"), Context(corpus))
    evaluated = [row.step for row in straight.curve]
    stop = evaluated[1] + 2  # between the second and the third evaluation
    c = config(checkpoint_every=1e-9)  # minutes: due after every step
    assert train_run(fabric, Work("electra", 0, c, tmp_path / "resumed"), Context(corpus),
                     stop_after_steps=stop) is None
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["counters"]["step"] == stop
    resumed = train_run(fabric, Work("electra", 0, c, tmp_path / "resumed"), Context(corpus))
    assert without_timings(resumed) == without_timings(straight)


@pytest.mark.slow
def test_a_stop_signal_saves_at_the_end_of_the_step_and_the_rerun_is_exact(corpus, fabric, tmp_path, monkeypatch,
                                                                           capsys):
    from objectives import Electra
    straight = train_run(fabric, Work("electra", 0, config(), tmp_path / "straight"), Context(corpus))
    before = signal.getsignal(signal.SIGUSR1)
    with monkeypatch.context() as patch:
        poison_training_forward(patch, Electra, 6, lambda output: os.kill(os.getpid(), signal.SIGUSR1))
        with pytest.raises(RunStopped) as stopped:
            train_run(fabric, Work("electra", 0, config(), tmp_path / "stopped"), Context(corpus))
    assert stopped.value.code == EXIT_STOPPED and signal.getsignal(signal.SIGUSR1) is before
    assert capsys.readouterr().err.strip().splitlines() == [stopped.value.message]
    # the 6th training forward is the run's 5th step: the second checkpoint's cool-down branch took one before it
    assert straight.cooldown_steps == 1
    assert stopped.value.message.startswith("stopped by SIGUSR1 after step 5 of electra seed 0: the state is saved")
    assert torch.load(tmp_path / "stopped" / "checkpoint.pt", weights_only=True)["counters"]["step"] == 5
    resumed = train_run(fabric, Work("electra", 0, config(), tmp_path / "stopped"), Context(corpus))
    assert without_timings(resumed) == without_timings(straight)


def compare_command(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "bench.compare", "--model", "tiny", "--seq-len", "32", "--batch-size", "4",
            "--budget", "2e9", "--eval-points", "3", "--data", "synthetic:train=64,heldout=16,words=64,lexicon=8",
            "--objectives", "mlm,electra", "--seeds", "1", "--no-probes", "--downstream", "none", "--quiet", "--out",
            str(out), *extra]


@pytest.mark.slow
def test_sigterm_to_the_command_then_resume_gives_the_uninterrupted_result(tmp_path):
    # one thread each: on a busy machine two processes' thread pools would stall each other for seconds per step
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    straight = subprocess.Popen(compare_command(tmp_path / "straight"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=environment)
    stopped = subprocess.Popen(compare_command(tmp_path / "stopped"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=environment)
    try:
        curve = tmp_path / "stopped" / "runs" / "mlm-seed0" / "curve.jsonl"
        deadline = time.monotonic() + 240
        while not (curve.exists() and curve.read_text().strip()) and stopped.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        stopped.send_signal(signal.SIGTERM)  # after the first evaluation, long before the end of the first run
        _, stderr = stopped.communicate(timeout=240)
        assert stopped.returncode == EXIT_STOPPED, stderr
        assert stderr.strip().splitlines()[-1].startswith("stopped by SIGTERM after step ")
        assert "--resume" in stderr and not (tmp_path / "stopped" / "report.md").exists()
        # saved at the end of the step the signal arrived in, not at the last evaluation
        step = int(stderr.strip().splitlines()[-1].split("after step ")[1].split()[0])
        counters = torch.load(curve.parent / "checkpoint.pt", weights_only=True)["counters"]
        rows = read_jsonl(curve)  # the first checkpoint's, made by a branch that ended past the step it forked at
        assert len(rows) == counters["next_eval"] == 1
        assert counters["step"] == step > rows[0]["step"] - counters["cooldown_steps"]
        assert straight.wait(timeout=240) == 0, straight.stderr.read()
    finally:
        for process in (straight, stopped):
            process.kill()
    resumed = subprocess.run(compare_command(tmp_path / "stopped", "--resume"), capture_output=True, text=True,
                             timeout=240, env=environment)
    assert resumed.returncode == 0, resumed.stderr
    runs = [[from_json(run, name) for run in json.loads((tmp_path / name / "results.json").read_text())["runs"]]
            for name in ("straight", "stopped")]
    assert [without_timings(run) for run in runs[1]] == [without_timings(run) for run in runs[0]]
    settings = json.loads((tmp_path / "stopped" / "config.json").read_text())
    assert settings["derived"]["tf32"] is False  # on only on CUDA under 32-true
    assert settings["execution"]["hardware"] == {"micro_batch": None, "activation_checkpointing": False,
                                                 "log_every": 10, "checkpoint_every": None}


def test_on_cuda_adamw_is_fused_and_fp32_matmuls_run_in_tf32(monkeypatch):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert tf32_matmuls(cuda, "32-true")
    assert not any([tf32_matmuls(cpu, "32-true"), tf32_matmuls(cuda, "bf16-mixed"), tf32_matmuls(cuda, "64-true")])
    precisions = []
    monkeypatch.setattr(torch, "set_float32_matmul_precision", precisions.append)
    configure_matmuls(cpu, True)
    configure_matmuls(cuda, True)
    configure_matmuls(cuda, False)
    assert precisions == ["high", "highest"]
    options = []
    monkeypatch.setattr(torch.optim, "AdamW", lambda groups, **kwargs: options.append(kwargs))
    module = torch.nn.Linear(2, 2)
    make_optimizer(module, RunConfig(budget_flops=1.0, model="tiny", lr=1e-3), cuda)
    make_optimizer(module, RunConfig(budget_flops=1.0, model="tiny", lr=1e-3), cpu)
    assert [o["fused"] for o in options] == [True, None]
    with pytest.raises(ValueError, match="learning rate"):  # a rate nobody chose is refused, never defaulted
        make_optimizer(module, RunConfig(budget_flops=1.0, model="tiny"), cpu)


@pytest.mark.slow
def test_live_metrics_are_logged_per_session_and_resume_in_a_new_file(corpus, fabric, tmp_path):
    import csv

    c = config(log_every=2)
    train_run(fabric, Work("mlm", 0, c, tmp_path), Context(corpus), stop_after_steps=5)
    first = list(csv.DictReader(open(tmp_path / "logs" / "from-step-0" / "metrics.csv")))
    assert [int(row["step"]) for row in first] == [2, 4]
    for row in first:
        assert 0 < float(row["lr"]) <= c.lr and float(row["grad_norm"]) > 0 and float(row["loss"]) > 0
        assert float(row["tokens_per_second_per_device"]) > 0 and float(row["peak_memory_gib"]) > 0
        assert "mfu" not in row  # no peak for a CPU in Lightning's table: not guessed
    saved = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["counters"]["step"]  # the last evaluation
    result = train_run(fabric, Work("mlm", 0, c, tmp_path), Context(corpus))
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["from-step-0", f"from-step-{saved}"]
    resumed = list(csv.DictReader(open(tmp_path / "logs" / f"from-step-{saved}" / "metrics.csv")))
    assert [int(row["step"]) for row in resumed] == list(range(saved + 2 - saved % 2, result.steps + 1, 2))
    assert len(list(csv.DictReader(open(tmp_path / "logs" / "from-step-0" / "metrics.csv")))) == 2


@pytest.mark.parametrize("name, precision, expected", [
    ("NVIDIA H200", "bf16-mixed", 989.4e12),  # Lightning's table has no entry for the name H200 reports
    ("NVIDIA H200 NVL", "bf16-mixed", 835e12),
    ("NVIDIA H100 80GB HBM3", "bf16-mixed", 989.4e12),  # SXM
    ("NVIDIA H100 80GB HBM3", "32-true", 494.7e12),  # TF32
    ("NVIDIA H100 PCIe", "16-mixed", 756e12),
    ("NVIDIA H100 NVL", "bf16-mixed", 835e12),  # dense, where Lightning's table lists the sparse 1978.8e12
    ("NVIDIA A100-SXM4-80GB", "32-true", 156e12),
    ("NVIDIA A100 80GB PCIe", "64-true", 19.5e12),
    ("NVIDIA A10G", "bf16-mixed", 125e12),  # not taken for an A100
    ("NVIDIA L40S", "bf16-mixed", 362.05e12),
    ("NVIDIA L4", "bf16-mixed", 121e12),
    ("Tesla V100-SXM2-16GB", "bf16-mixed", None),  # no bf16 units
    ("NVIDIA GeForce GTX 1080", "bf16-mixed", None),  # not listed
])
def test_peak_flops_are_the_datasheets_dense_figures(name, precision, expected):
    from bench.training import live_metrics

    assert live_metrics.peak_flops(name, precision) == expected


def test_mfu_uses_the_suites_peak_then_lightnings(monkeypatch):
    from bench.training import live_metrics

    asked, cuda = [], torch.device("cuda", 0)
    monkeypatch.setattr(live_metrics, "get_available_flops", lambda device, dtype: asked.append(dtype) or 1e15)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    assert live_metrics.device_peak(cuda, "bf16-mixed") == (989.4e12, "the suite's table") and asked == []
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Some Future GPU")
    assert live_metrics.device_peak(cuda, "bf16-mixed") == (1e15, "Lightning's table")
    assert live_metrics.device_peak(cuda, "32-true") == (1e15, "Lightning's table")
    assert asked == [torch.bfloat16, "tfloat32"]
    assert live_metrics.device_peak(torch.device("cpu"), "32-true") is None


SCHEDULE = "16:0.6,32:0.4"  # the switch comes after about 23 steps of the tiny model, before the last evaluation


def schedule_config(text: str = SCHEDULE, **overrides) -> RunConfig:
    return config(seq_len_schedule=parse_seq_len(text), **overrides)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["mlm", "electra", "mlm:rule=bernoulli"])
def test_a_schedule_run_counts_each_phase_as_the_accounting_predicts(spec, corpus, fabric, tmp_path):
    c = schedule_config()
    result = train_run(fabric, Work(spec, 0, c, tmp_path), Context(corpus))
    phases = result.phases
    assert [(p["seq_len"], p["share"]) for p in phases] == [(16, 0.6), (32, 0.4)]
    for key in ("flops", "tokens", "supervised_positions"):  # the phases add up to the run, exactly
        assert sum(p[key] for p in phases) == getattr(result, key)
    assert sum(p["steps"] for p in phases) == result.steps
    assert all(p["tokens"] == p["steps"] * BATCH * p["seq_len"] for p in phases)
    objective = build_run_objective(spec, c, corpus)
    predicted = predict_phases(c.seq_len_schedule, c.budget_flops, BATCH, objective.expected_flops_per_sequence,
                               objective.expected_supervised_positions)
    ends = c.seq_len_schedule.ends(c.budget_flops)
    spent = 0
    for phase, prediction, end in zip(phases, predicted, ends):
        step_flops = BATCH * objective.expected_flops_per_sequence(phase["seq_len"])
        if spec.endswith("bernoulli"):  # the cost of a step varies with its draw: the switch may move by a step
            assert abs(phase["steps"] - prediction.steps) <= 1
            assert abs(phase["flops"] - prediction.flops) < 1.1 * step_flops
        else:
            assert (phase["steps"], phase["tokens"], phase["flops"]) == \
                (prediction.steps, prediction.tokens, prediction.flops)
            assert phase["supervised_positions"] == prediction.supervised_positions
        spent += phase["flops"]
        assert end <= spent < end + 1.1 * step_flops  # each phase stops within one of its steps past its end
    assert result.supervised_per_sequence == phases[-1]["supervised_positions"] / (phases[-1]["steps"] * BATCH)


def checkpointed(path):
    return torch.load(path / "checkpoint.pt", weights_only=True)


@pytest.mark.slow
def test_a_schedule_run_resumes_exactly_right_before_and_after_the_switch(corpus, fabric, tmp_path):
    straight = train_run(fabric, Work("electra", 0, schedule_config(), tmp_path / "straight"), Context(corpus))
    switch = straight.phases[0]["steps"]  # the first step at T = 32
    assert 0 < switch < straight.steps and switch not in [row.step for row in straight.curve]
    weights = checkpointed(tmp_path / "straight")["model"]
    c = schedule_config(checkpoint_every=1e-9)  # minutes: the state is saved after every step
    for stop in (switch, switch + 1):  # the last step at T = 16 has run; the first at T = 32 has run
        folder = tmp_path / f"stopped{stop}"
        assert train_run(fabric, Work("electra", 0, c, folder), Context(corpus),
                         stop_after_steps=stop) is None
        counters = checkpointed(folder)["counters"]
        assert counters["step"] == stop and [p["steps"] for p in counters["phases"]] == [switch, stop - switch]
        with pytest.raises(ConfigError, match="another --seq-len than 16:0.5,32:0.5"):
            train_run(fabric, Work("electra", 0, schedule_config("16:0.5,32:0.5"), folder), Context(corpus))
        resumed = train_run(fabric, Work("electra", 0, c, folder), Context(corpus))
        assert without_timings(resumed) == without_timings(straight)
        final = checkpointed(folder)["model"]
        assert final.keys() == weights.keys() and all(torch.equal(final[k], weights[k]) for k in weights)


def test_a_checkpoint_of_another_counters_layout_is_refused_with_one_line(corpus, fabric, tmp_path):
    straight = train_run(fabric, Work("mlm", 0, config(), tmp_path / "straight"), Context(corpus))
    assert straight.phases == [{"seq_len": SEQ_LEN, "share": 1.0, "steps": straight.steps,
                                   "tokens": straight.tokens, "supervised_positions": straight.supervised_positions,
                                   "flops": straight.flops}]
    c = config(checkpoint_every=1e-9)
    train_run(fabric, Work("mlm", 0, c, tmp_path / "old"), Context(corpus), stop_after_steps=5)
    state = checkpointed(tmp_path / "old")
    assert state["counters"]["schema"] == COUNTERS_SCHEMA and state["counters"]["step"] == 5
    del state["counters"]["schema"], state["counters"]["phases"]  # as saved before schedules existed
    torch.save(state, tmp_path / "old" / "checkpoint.pt")
    with pytest.raises(ConfigError, match="training counters of another layout .schema 1"):
        train_run(fabric, Work("mlm", 0, c, tmp_path / "old"), Context(corpus))


def test_a_schedule_is_evaluated_on_the_batches_of_its_final_length(corpus):
    objective = build_run_objective("mlm", config(), corpus)
    fixed = eval_batches(objective, corpus, config())
    for scheduled, expected in ((eval_batches(objective, corpus, schedule_config()), fixed),
                                (eval_batches(objective, corpus, schedule_config("32:0.5,16:0.5")), None)):
        if expected is None:  # ends at 16: windows of 16 cut from the held-out windows of 32
            assert [b.original.shape for b in scheduled] == [(BATCH, 16), (BATCH, 16)]
            assert torch.equal(torch.cat([b.original for b in scheduled]),
                               corpus.windows("heldout")[:4][:, :32].reshape(8, 16))
            continue
        assert len(scheduled) == len(expected)
        for a, b in zip(scheduled, expected):
            assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)


@pytest.mark.parametrize("spec, text, message", [
    ("mlm", "16:0.5,64:0.5", "length 64 exceeds the model's max_seq_len 32"),
    ("mlm", "8:0.5,16:0.5", "the corpus's windows hold 32 tokens but the schedule's longest length is 16"),
    ("span", "4:0.5,32:0.5", "seq_len 4 is too short for span corruption"),
])
def test_a_schedule_that_does_not_fit_the_corpus_or_objective_is_one_line(spec, text, message, corpus):
    with pytest.raises(ConfigError, match=message):
        build_run_objective(spec, schedule_config(text), corpus)


def test_a_resumed_optimizer_runs_the_implementation_of_its_device_not_of_the_checkpoints():
    import copy

    from bench.training.recipe import match_optimizer_to_device

    def optimizer(fused):
        torch.manual_seed(0)
        module = torch.nn.Linear(4, 3)
        return module, torch.optim.AdamW(module.parameters(), lr=1e-2, fused=fused)

    def step(module, optimizer):
        module(torch.ones(2, 4)).square().sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    on_gpu = optimizer(True)  # fused, as a CUDA run saves it (CPU has a fused AdamW too since 2.4)
    step(*on_gpu)
    saved = copy.deepcopy(on_gpu[1].state_dict())  # a copy: loading aliases the tensors, and a step updates them
    plain = optimizer(None)
    plain[0].load_state_dict(on_gpu[0].state_dict())
    plain[1].load_state_dict(copy.deepcopy(saved))
    assert plain[1].param_groups[0]["fused"] is True  # what load_state_dict restores: the saving machine's choice
    match_optimizer_to_device(plain[1], torch.device("cpu"))
    assert plain[1].param_groups[0]["fused"] is None
    assert all(state["step"].device.type == "cpu" for state in plain[1].state.values())
    reference = optimizer(None)  # never fused: what a CPU run that was never interrupted computes
    reference[0].load_state_dict(on_gpu[0].state_dict())
    reference[1].load_state_dict({**saved, "param_groups": [{**g, "fused": None} for g in saved["param_groups"]]})
    step(*plain)
    step(*reference)
    assert all(torch.equal(a, b) for a, b in zip(plain[0].parameters(), reference[0].parameters()))


def test_a_folder_seen_late_is_waited_for_and_one_never_seen_is_refused_after_the_wait(tmp_path, monkeypatch):
    import bench.training.loop

    marker, listed = tmp_path / ".shared-x", []
    marker.touch()
    real_exists, real_listdir = Path.exists, os.listdir
    answers = iter([False, False, True])  # an NFS client's cached "not there", twice, then the truth
    monkeypatch.setattr(Path, "exists", lambda path: next(answers) if path == marker else real_exists(path))
    monkeypatch.setattr(os, "listdir", lambda path: listed.append(path) or real_listdir(path))
    monkeypatch.setattr(bench.training.distributed, "FOLDER_WAIT_SECONDS", 30.0)
    # the folder re-read each time
    assert bench.training.distributed.sees(marker, poll_seconds=0.01) and listed == [tmp_path] * 3
    monkeypatch.setattr(Path, "exists", lambda path: False if path == marker else real_exists(path))
    monkeypatch.setattr(bench.training.distributed, "FOLDER_WAIT_SECONDS", 0.05)
    started = time.monotonic()
    assert not bench.training.distributed.sees(marker, poll_seconds=0.01) and time.monotonic() - started >= 0.05


def test_each_compiled_run_starts_from_empty_compile_caches_with_room_for_its_blocks(corpus, fabric, tmp_path,
                                                                                     monkeypatch):
    # four objectives with probes compile the same block code many times over: past dynamo's limit of 8 entries,
    # later runs went on uncompiled, silently
    import torch._dynamo

    resets = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    monkeypatch.setattr(torch._dynamo.config, name, 8)
    for spec in ("mlm", "electra"):  # electra: the generator's blocks too
        run = setup_run(fabric, Work(spec, 0, config(compile=True), tmp_path / spec), Context(corpus))
        blocks = sum(len(m.blocks) for m in run.objective.modules() if isinstance(m, Transformer))
        assert getattr(torch._dynamo.config, name) >= 4 * blocks
    assert len(resets) == 2
    setup_run(fabric, Work("mlm", 0, config(), tmp_path / "eager"), Context(corpus))
    assert len(resets) == 2  # an eager run leaves the caches alone


@pytest.mark.slow
def test_a_signal_in_the_last_evaluation_or_the_final_probes_stops_the_run_and_nothing_is_lost(corpus, fabric,
                                                                                                tmp_path, monkeypatch,
                                                                                                capsys):
    import bench.training.loop

    probe = [Probes(corpus, ProbeConfig(train_windows=8, test_windows=8, iterations=5, finetune_steps=2,
                                        finetune_batch=4))]
    straight = train_run(fabric, Work("mlm", 0, config(), tmp_path / "straight"), Context(corpus, probe))
    # the evaluation at the budget, after the last step
    at_budget = signalling(bench.training.loop.checkpoint_evaluation,
                           lambda fabric, run, *args, **kwargs: run.counters.flops >= run.config.budget_flops)
    with monkeypatch.context() as patch:
        patch.setattr(bench.training.loop, "checkpoint_evaluation", at_budget)
        with pytest.raises(RunStopped) as stopped:
            train_run(fabric, Work("mlm", 0, config(), tmp_path / "evaluation"), Context(corpus, probe))
    assert stopped.value.code == EXIT_STOPPED and "stopped by SIGTERM after step" in stopped.value.message
    assert not (tmp_path / "evaluation" / "result.json").exists()  # the final probes were not run ...
    saved = torch.load(tmp_path / "evaluation" / "checkpoint.pt", weights_only=True)["counters"]
    # ... but every step is saved, without the evaluation the signal cut short: the resumed run, at its budget, does it
    assert saved["step"] == straight.steps and saved["next_eval"] == len(straight.curve) - 1
    assert len((tmp_path / "evaluation" / "curve.jsonl").read_text().splitlines()) == len(straight.curve) - 1
    resumed = train_run(fabric, Work("mlm", 0, config(), tmp_path / "evaluation"), Context(corpus, probe))
    assert without_timings(resumed) == without_timings(straight)

    with monkeypatch.context() as patch:
        patch.setattr(bench.yardsticks.probes, "run_probes", signalling(bench.yardsticks.probes.run_probes))
        with pytest.raises(RunStopped) as stopped:
            train_run(fabric, Work("mlm", 0, config(), tmp_path / "probes"), Context(corpus, probe))
    # the probes stop at their first fit: nothing of them is written, the trained state is
    assert "during the final probes and tasks of mlm-seed0" in stopped.value.message
    assert not (tmp_path / "probes" / "result.json").exists()
    resumed = train_run(fabric, Work("mlm", 0, config(), tmp_path / "probes"), Context(corpus, probe))
    assert without_timings(resumed) == without_timings(straight)
    capsys.readouterr()


def test_the_next_steps_counts_ride_in_the_steps_all_reduce_exactly(monkeypatch):
    # two processes holding the same values stand in for NCCL: their sum is each value doubled. No process group is
    # made (an in-process gloo group hung in CI's sandbox), so what is checked is the carrying: counts past
    # float64's 2**53, sent as halves, come back exact beside the loss and the flags
    from bench.training.batches import StepCounts
    reduced = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, op=None: reduced.append(tensor.dtype) or
                        tensor.mul_(2))
    fabric = type("TwoProcesses", (), {"world_size": 2, "device": torch.device("cpu")})()
    ahead = StepCounts(2 ** 60 + 12345, 2 ** 53 + 1, {"masked": 3, "replaced": 2 ** 40 - 1})
    twice = StepCounts(2 ** 61 + 24690, 2 ** 54 + 2, {"masked": 6, "replaced": 2 ** 41 - 2})
    agreed = agree(fabric, torch.tensor(1.25), True, False, ahead)
    assert (agreed.loss, agreed.stop, agreed.save, agreed.ahead) == (2.5, True, False, twice)
    assert step_counts(fabric, ahead) == twice  # the first step's: int64 all the way
    assert agree(fabric, torch.tensor(2.0), False, True).ahead is None
    assert reduced == [torch.float64, torch.int64, torch.float64]  # one all-reduce each


def test_a_slurm_job_started_without_srun_is_refused_with_the_srun_form(monkeypatch):
    from bench.training.distributed import slurm_without_srun
    batch_shell = {"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "4", "SLURM_JOB_NAME": "pretrain"}
    for name, value in batch_shell.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=r"^inside a Slurm job \(SLURM_NTASKS=4\) .* srun --ntasks-per-node 4 python"):
        make_fabric("cpu", devices=4, strategy="ddp", launch=False)
    assert "srun --ntasks-per-node DEVICES_PER_NODE" in slurm_without_srun(batch_shell, "auto", 1)
    assert slurm_without_srun({**batch_shell, "SLURM_NTASKS": "1"}, 2, 1)  # Slurm's world of one, two devices
    # started by srun, by torchrun, in salloc's shell, one task for one device, or outside Slurm: nothing to refuse
    assert slurm_without_srun({**batch_shell, "SLURM_STEP_NUM_TASKS": "4"}, 4, 1) is None
    assert slurm_without_srun({**batch_shell, "TORCHELASTIC_RUN_ID": "7"}, 4, 1) is None
    assert slurm_without_srun({**batch_shell, "SLURM_JOB_NAME": "interactive"}, 4, 1) is None
    assert slurm_without_srun({**batch_shell, "SLURM_NTASKS": "1"}, 1, 1) is None
    assert slurm_without_srun({}, 4, 2) is None


def test_the_memory_check_compares_with_free_memory(monkeypatch):
    from bench.orchestration.memory import device_memory_bytes
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (30 * 2 ** 30, 80 * 2 ** 30))
    assert device_memory_bytes(torch.device("cuda", 0)) == 30 * 2 ** 30  # another process holds the other 50 GiB
    with open("/proc/meminfo") as meminfo:
        available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    assert abs(device_memory_bytes(torch.device("cpu")) - available) < 2 ** 28  # what the kernel can give now


@pytest.mark.slow
def test_the_readouts_run_under_the_runs_autocast(corpus, tmp_path, monkeypatch):
    import bench.yardsticks.probes
    seen, real = [], bench.yardsticks.probes.run_probes

    def recording(*args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu"))
        return real(*args, **kwargs)

    monkeypatch.setattr(bench.yardsticks.probes, "run_probes", recording)
    probe = [Probes(corpus, ProbeConfig(train_windows=8, test_windows=8, iterations=5, finetune_steps=2,
                                        finetune_batch=4))]
    for precision in ("bf16-mixed", "32-true"):
        train_run(make_fabric(precision=precision), Work("mlm", 0, config(probe_every_eval=True), tmp_path / precision),
                  Context(corpus, probe))
    assert len(seen) % 2 == 0 and seen == [True] * (len(seen) // 2) + [False] * (len(seen) // 2)


def test_a_finished_or_diverged_run_is_reused_and_never_trained_again(tmp_path, monkeypatch, capsys):
    trained = []

    def diverging(fabric, run, stop_after_steps):
        trained.append(run)
        raise TrainingDiverged("mlm", 0, 3, float("nan"), 2.5, 7)

    for name in ("setup_run", "restore", "mark_session"):  # no model: the loop alone is replaced
        monkeypatch.setattr(bench.training.runs, name, lambda *args: "run")
    monkeypatch.setattr(bench.training.runs, "fit", diverging)
    one = type("OneProcess", (), {"is_global_zero": True, "broadcast": lambda self, value, src=0: value})()
    config = RunConfig(budget_flops=1.0, model="tiny")
    with pytest.raises(TrainingDiverged) as diverged:
        train_run(one, Work("mlm", 0, config, tmp_path, reuse=True), Context(None))
    record = diverged.value.record
    assert record["flops"] == 7 and "mlm seed 0 diverged" in capsys.readouterr().err
    assert json.loads((tmp_path / "diverged.json").read_text()) == record
    with pytest.raises(TrainingDiverged) as again:  # read back, not trained again
        train_run(one, Work("mlm", 0, config, tmp_path, reuse=True), Context(None))
    assert again.value.record == record and trained == ["run"]
    (tmp_path / "diverged.json").unlink()
    (tmp_path / "result.json").write_text(written_record(objective="mlm", flops=9))
    assert train_run(one, Work("mlm", 0, config, tmp_path, reuse=True), Context(None)) == \
        from_json(json.loads(written_record(objective="mlm", flops=9)), "")
    with pytest.raises(TrainingDiverged):
        train_run(one, Work("mlm", 0, config, tmp_path), Context(None))  # a fresh comparison trains
    assert trained == ["run", "run"]


@pytest.mark.slow
def test_executed_flops_buy_causal_attention_more_steps_and_are_counted_as_charged(corpus, fabric, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.setattr(backbone.flops, "TILE", 8)  # T = 32 is then 4 tiles a side, 10 of 16 blocks computed
    runs = {(spec, convention): train_run(fabric, Work(spec, 0, config(flops=convention),
                                                       tmp_path / f"{spec}-{convention}"), Context(corpus))
            for spec in ("ar", "mlm") for convention in ("dense", "executed")}
    for spec in ("ar", "mlm"):
        objective = build_run_objective(spec, config(flops="executed"), corpus)
        assert objective.backbone.flops_convention == "executed"
        executed = runs[spec, "executed"]
        assert executed.flops_per_step == BATCH * objective.expected_flops_per_sequence(SEQ_LEN)
        assert executed.flops >= 4e8 > executed.flops - executed.flops_per_step
    assert runs["mlm", "executed"].steps == runs["mlm", "dense"].steps  # bidirectional: nothing skipped
    backbone_flops = build_run_objective("ar", config(), corpus).backbone.flops(BATCH, SEQ_LEN, 0, "causal")
    saved = backbone_flops.attention * 6 // 16 * 7 // 2  # 6 of 16 blocks, forward and backward (3.5 ×)
    assert runs["ar", "dense"].flops_per_step - runs["ar", "executed"].flops_per_step == saved
    assert saved > 0 and all(run.steps == math.ceil(4e8 / run.flops_per_step) for run in runs.values())
    with pytest.raises(ConfigError, match="--flops must be one of dense, executed"):
        check_config(config(flops="sparse"), 1)


def test_electra_checkpoints_carry_the_bayes_discriminator(corpus, fabric, tmp_path):
    """On the embedded language every checkpoint holds the Bayes-optimal discriminator's loss on the same held-out
    windows and the share of the gap from the labels' entropy to it that the model closed."""
    result = train_run(fabric, Work("electra", 0, config(budget=1e8), tmp_path), Context(corpus))
    for point in result.curve:
        m = point.metrics
        assert 0 < m["discriminator_bayes_loss"] < m["label_entropy"]
        assert m["discriminator_closed"] == pytest.approx(
            (m["label_entropy"] - m["discriminator_loss"]) / (m["label_entropy"] - m["discriminator_bayes_loss"]))
        assert 0 <= m["discriminator_precision"] <= 1 and 0 <= m["discriminator_recall"] <= 1
