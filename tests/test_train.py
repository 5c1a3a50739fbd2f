import math

import pytest
import torch

from bench.data import load_corpus
from bench.files import read_jsonl
from bench.probes import ProbeConfig
from bench.train import (TrainConfig, build_run_objective, corruption_generator, eval_grid, learning_rate,
                         make_fabric, train_run)
from objectives import IGNORE

SEQ_LEN, BATCH = 32, 4
TIMINGS = ("wall_seconds", "train_seconds", "tokens_per_second", "probe_seconds")


@pytest.fixture(scope="module")
def corpus():
    return load_corpus("synthetic:train=64,heldout=16,words=64,states=4", SEQ_LEN)


@pytest.fixture(scope="module")
def fabric():
    return make_fabric()


def config(budget: float = 4e8, **overrides) -> TrainConfig:
    return TrainConfig(budget_flops=budget, model="tiny", batch_size=BATCH, eval_windows=8, eval_points=3,
                       lr=3e-3, **overrides)


def without_timings(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in TIMINGS}


def test_eval_grid_is_log_spaced_and_ends_at_the_budget():
    grid = eval_grid(TrainConfig(budget_flops=1e12, eval_points=5, first_eval=0.01))
    assert grid[0] == pytest.approx(1e10) and grid[-1] == 1e12
    ratios = [b / a for a, b in zip(grid, grid[1:])]
    assert ratios == pytest.approx([10 ** 0.5] * 4, rel=1e-5)
    assert eval_grid(TrainConfig(budget_flops=3e9, eval_points=1)) == [3e9]


def test_schedule_warms_up_and_decays_over_the_budget_fraction():
    c = TrainConfig(budget_flops=1.0, lr=1e-3, warmup=0.1, min_lr_ratio=0.1)
    assert learning_rate(0.05, c) == pytest.approx(0.5e-3)
    assert learning_rate(0.1, c) == pytest.approx(1e-3)
    assert learning_rate(0.55, c) == pytest.approx(0.55e-3)  # half-way down the cosine: (1 + 0.1) / 2
    assert learning_rate(1.0, c) == pytest.approx(1e-4)
    values = [learning_rate(f / 100, c) for f in range(10, 101)]
    assert all(a >= b for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("spec, per_sequence", [("ar", SEQ_LEN - 1), ("mlm", round(0.15 * SEQ_LEN)),
                                                ("mlm:rate=0.4", round(0.4 * SEQ_LEN)),
                                                ("electra", SEQ_LEN + round(0.15 * SEQ_LEN)), ("span", None)])
def test_runs_stop_within_one_step_of_the_budget(spec, per_sequence, corpus, fabric, tmp_path):
    c = config()
    result = train_run(fabric, spec, 0, corpus, c, tmp_path, progress=False)
    objective = build_run_objective(spec, c, corpus)
    step_flops = objective.expected_flops_per_sequence(SEQ_LEN) * BATCH  # exact-rule objectives: fixed per step
    assert c.budget_flops <= result["flops"] < c.budget_flops + step_flops
    assert result["flops"] == result["steps"] * step_flops
    if per_sequence is None:
        per_sequence = objective.lengths(SEQ_LEN).targets
    assert result["supervised_positions"] == result["steps"] * BATCH * per_sequence
    assert result["tokens"] == result["steps"] * BATCH * SEQ_LEN
    curve = result["curve"]
    assert [row["checkpoint"] for row in curve] == eval_grid(c)
    assert all(row["flops"] >= row["checkpoint"] for row in curve) and curve[-1]["step"] == result["steps"]
    assert all(math.isfinite(row["loss"]) for row in curve)
    assert read_jsonl(tmp_path / "curve.jsonl") == curve and (tmp_path / "result.json").exists()


def test_bernoulli_runs_count_what_they_executed(corpus, fabric, tmp_path):
    c = config()
    result = train_run(fabric, "mlm:rule=bernoulli", 0, corpus, c, tmp_path, progress=False)
    assert c.budget_flops <= result["flops"]
    # recount: corrupt each step's windows afresh from (seed, step) and count the chosen positions
    objective, windows = build_run_objective("mlm:rule=bernoulli", c, corpus), corpus.windows("train")
    chosen = [int((objective.corrupt(windows[(torch.arange(BATCH) + step * BATCH) % len(windows)],
                                     corruption_generator(0, step)).targets != IGNORE).sum())
              for step in range(result["steps"])]
    assert result["supervised_positions"] == sum(chosen)
    assert len(set(chosen)) > 1  # Bernoulli: the count varies from step to step


def test_same_seed_same_numbers_and_seeds_differ(corpus, fabric, tmp_path):
    a = train_run(fabric, "electra", 3, corpus, config(), tmp_path / "a", progress=False)
    b = train_run(fabric, "electra", 3, corpus, config(), tmp_path / "b", progress=False)
    assert without_timings(a) == without_timings(b)
    c = train_run(fabric, "electra", 4, corpus, config(), tmp_path / "c", progress=False)
    assert a["curve"][-1]["loss"] != c["curve"][-1]["loss"]


@pytest.mark.parametrize("spec", ["mlm", "electra"])
def test_an_interrupted_run_resumes_exactly(spec, corpus, fabric, tmp_path):
    # probes at every checkpoint must not disturb training either
    c, probe = config(probe_every_eval=True), ProbeConfig(train_windows=12, test_windows=4, iterations=5,
                                                          finetune_steps=2, finetune_batch=2)
    straight = train_run(fabric, spec, 1, corpus, c, tmp_path / "straight", probe, progress=False)
    assert all("tagging_frozen" in row for row in straight["curve"])
    stopped_at = straight["steps"] // 2 + 1  # after the first checkpoint, between two others
    assert train_run(fabric, spec, 1, corpus, c, tmp_path / "resumed", probe, progress=False,
                     stop_after_steps=stopped_at) is None
    assert not (tmp_path / "resumed" / "result.json").exists()
    resumed = train_run(fabric, spec, 1, corpus, c, tmp_path / "resumed", probe, progress=False)
    assert without_timings(resumed) == without_timings(straight)
    unprobed = train_run(fabric, spec, 1, corpus, config(), tmp_path / "unprobed", progress=False)
    assert [row["loss"] for row in unprobed["curve"]] == [row["loss"] for row in straight["curve"]]


def test_checkpoints_hold_only_plain_data(corpus, fabric, tmp_path):
    train_run(fabric, "ar", 0, corpus, config(), tmp_path, progress=False)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert set(state) == {"model", "optimizer", "counters", "precision"}
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


def test_a_compiled_run_counts_and_learns_like_an_eager_one(corpus, fabric, tmp_path):
    eager = train_run(fabric, "electra", 2, corpus, config(budget=1e8), tmp_path / "eager", progress=False)
    compiled = train_run(fabric, "electra", 2, corpus, config(budget=1e8, compile=True), tmp_path / "compiled",
                         progress=False)
    assert (compiled["steps"], compiled["flops"], compiled["supervised_positions"]) == \
        (eager["steps"], eager["flops"], eager["supervised_positions"])
    assert compiled["curve"][-1]["loss"] == pytest.approx(eager["curve"][-1]["loss"], rel=1e-3)
