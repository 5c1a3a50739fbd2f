"""bench.training.stacked: the seeds of one objective trained as one stacked model write what their separate runs
write (curves, results, checkpoints), a seed that diverges stops alone, and an interrupted group resumes exactly."""

import csv
import json
import math
import os
import shutil
import signal

import pytest
import torch

import bench.training.stacked
from bench.training.config import TrainConfig
from bench.training.records import RunRecord, from_json
from bench.training.runs import train_run
from bench.training.stacked import can_batch_seeds, train_seeds, trained_or_reused_seeds
from bench.training.stacking import SeedStack
from bench.training.stopping import RunStopped
from conftest import written_record

SEQ_LEN, BATCH = 32, 4
TIMINGS = ("wall_seconds", "train_seconds", "tokens_per_second", "probe_seconds")
COUNTS = ("steps", "flops", "tokens", "supervised_positions", "phases", "flops_per_step", "supervised_per_sequence")


class Weights:
    """A yardstick that reads the objective it is handed (its token embeddings, in float64): at every checkpoint and
    at the end, each seed's must be its own."""

    result_key, seconds_key = "probes", "probe_seconds"  # a record's yardstick fields

    def at_checkpoint(self, objective) -> dict:
        return {"embedding_sum": objective.backbone.token_embedding.weight.double().sum().item()}

    def at_end(self, objective, progress: bool, desc: str, reader: str | None = None) -> dict:
        return {**self.at_checkpoint(objective), "desc": desc}


def config(budget: float = 2e8, **overrides) -> TrainConfig:
    settings = dict(model="tiny", batch_size=BATCH, eval_windows=8, eval_points=3, lr=3e-3)
    return TrainConfig(budget_flops=budget, **{**settings, **overrides})


def without_timings(result: RunRecord) -> dict:
    return {key: value for key, value in result.to_json().items() if key not in TIMINGS}


def checkpoint(run_dir) -> dict:
    return torch.load(run_dir / "checkpoint.pt", weights_only=True)


def assert_close_runs(stacked: RunRecord, separate: RunRecord, stacked_dir, separate_dir) -> None:
    """Counts exactly; held-out metrics to 1e-5 relative, final weights and AdamW moments to 1e-5 relative (1e-7
    absolute). On the 2-core CPU with torch 2.13 they were equal to the last bit: every kernel a seed runs in the
    stack is its separate run's, on the same shapes (bench.training.seed_ops). The tolerance is for builds where
    a batched rule (functorch's, for the element-wise ops and the embedding; a GPU's reductions) sums in another
    order, which moves the last bits and, over the steps, a little more."""
    assert {key: getattr(stacked, key) for key in COUNTS} == {key: getattr(separate, key) for key in COUNTS}
    assert [row.step for row in stacked.curve] == [row.step for row in separate.curve]
    for ours, theirs in zip(stacked.curve, separate.curve):
        assert ours.metrics.keys() == theirs.metrics.keys()
        for key, value in theirs.metrics.items():
            assert ours.metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    ours, theirs = checkpoint(stacked_dir), checkpoint(separate_dir)
    assert ours["model"].keys() == theirs["model"].keys() and ours["counters"]["step"] == theirs["counters"]["step"]
    for name, weight in theirs["model"].items():
        torch.testing.assert_close(ours["model"][name], weight, rtol=1e-5, atol=1e-7)
    assert ours["optimizer"]["state"].keys() == theirs["optimizer"]["state"].keys()
    for index, state in theirs["optimizer"]["state"].items():
        for key, value in state.items():
            torch.testing.assert_close(ours["optimizer"]["state"][index][key], value, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["mlm", "ar", "electra", "ar>mlm@0.5", "mlm:rule=bernoulli"])
def test_stacked_seeds_write_what_their_separate_runs_write(spec, corpus, fabric, tmp_path):
    seeds = [0, 1] if spec != "mlm" else [0, 1, 2]
    c = config(log_every=2, probe_every_eval=True)
    stacked = train_seeds(fabric, spec, seeds, corpus, c, [tmp_path / f"stacked{s}" for s in seeds], [Weights()],
                          progress=False)
    for seed, ours in zip(seeds, stacked):
        theirs = train_run(fabric, spec, seed, corpus, c, tmp_path / f"separate{seed}", [Weights()], progress=False)
        assert ours.seed == seed and ours.to_json().keys() == theirs.to_json().keys()
        assert_close_runs(ours, theirs, tmp_path / f"stacked{seed}", tmp_path / f"separate{seed}")
        assert ours.probes["desc"] == theirs.probes["desc"]
        for row, their_row in zip((*ours.curve, ours), (*theirs.curve, theirs)):  # checkpoints, then the end
            assert row.probes["embedding_sum"] == pytest.approx(their_row.probes["embedding_sum"], rel=1e-6)
        assert json.loads((tmp_path / f"stacked{seed}" / "result.json").read_text())["steps"] == ours.steps
        files = [sorted(str(path.relative_to(tmp_path / f"{kind}{seed}")) for path in
                        (tmp_path / f"{kind}{seed}").rglob("*")) for kind in ("stacked", "separate")]
        assert files[0] == files[1] and "result.json" in files[0]  # curve, checkpoint, result, live metrics
        logged = [list(csv.DictReader((tmp_path / f"{kind}{seed}" / "logs" / "from-step-0" / "metrics.csv").open()))
                  for kind in ("stacked", "separate")]
        assert [(row.keys(), row["step"], row["lr"]) for row in logged[0]] == \
            [(row.keys(), row["step"], row["lr"]) for row in logged[1]]
        assert [float(row["loss"]) for row in logged[0]] == pytest.approx([float(row["loss"]) for row in logged[1]],
                                                                          rel=1e-5)
    if spec == "mlm:rule=bernoulli":  # seeds supervise different counts, so they reach the budget at other steps
        assert len({result.flops for result in stacked}) == len(seeds)


@pytest.mark.slow
def test_a_diverging_seed_stops_alone_and_is_recorded(corpus, fabric, tmp_path, monkeypatch, capsys):
    real, calls = SeedStack.forward, []

    def poisoned(self, params, batch, generators):
        losses = real(self, params, batch, generators)
        calls.append(1)
        if len(calls) == 3:  # the third step: seed 1's loss (and so its gradients) become NaN
            losses = losses * torch.tensor([1.0, math.nan, 1.0])
        return losses
    monkeypatch.setattr(SeedStack, "forward", poisoned)
    results = train_seeds(fabric, "mlm", [0, 1, 2], corpus, config(), [tmp_path / f"s{s}" for s in range(3)],
                          progress=False)
    assert results[1] is None and results[0] is not None and results[2] is not None
    record = json.loads((tmp_path / "s1" / "diverged.json").read_text())
    assert record["step"] == 2 and record["seed"] == 1 and record["diverged"] and record["last_finite_loss"] > 0
    assert "warning: mlm seed 1 diverged: the loss became nan at step 2" in capsys.readouterr().err
    assert not (tmp_path / "s1" / "result.json").exists()
    monkeypatch.undo()
    for seed in (0, 2):  # the others trained on as if it had never been there
        theirs = train_run(fabric, "mlm", seed, corpus, config(), tmp_path / f"separate{seed}", progress=False)
        assert_close_runs(results[seed], theirs, tmp_path / f"s{seed}", tmp_path / f"separate{seed}")


@pytest.mark.slow
@pytest.mark.parametrize("interruption", ["crash", "signal"])
def test_an_interrupted_group_resumes_as_if_uninterrupted(interruption, corpus, fabric, tmp_path, monkeypatch):
    # Bernoulli masks: the seeds reach their FLOP checkpoints at different steps, and a group save at each of them;
    # a yardstick at every checkpoint reads each seed's own objective
    spec, seeds = "mlm:rule=bernoulli", [0, 1, 2]
    probes = [Weights()]
    c = config(budget=3e8, probe_every_eval=True)
    straight = train_seeds(fabric, spec, seeds, corpus, c, [tmp_path / f"straight{s}" for s in seeds], probes,
                           progress=False)
    assert all("embedding_sum" in row.probes for result in straight for row in result.curve)
    dirs = [tmp_path / f"resumed{s}" for s in seeds]
    stop_at = straight[0].steps // 2 + 1  # after the first checkpoint, before the last
    if interruption == "crash":  # stops without saving: the group goes back to its last save
        assert train_seeds(fabric, spec, seeds, corpus, c, dirs, probes, progress=False,
                           stop_after_steps=stop_at) == [None, None, None]
    else:  # SIGUSR1 during a step: every seed saves at its end
        real, calls = SeedStack.backward, []

        def signalled(self, groups):
            calls.append(1)
            if len(calls) == stop_at:
                os.kill(os.getpid(), signal.SIGUSR1)
            return real(self, groups)
        with monkeypatch.context() as patch:
            patch.setattr(SeedStack, "backward", signalled)
            with pytest.raises(RunStopped) as stopped:
                train_seeds(fabric, spec, seeds, corpus, c, dirs, probes, progress=False)
        assert stopped.value.message.startswith(f"stopped by SIGUSR1 after step {stop_at} of {spec} seeds 0, 1, 2, "
                                                "stacked: each state is saved")
        assert [checkpoint(d)["counters"]["step"] for d in dirs] == [stop_at] * 3
    assert not any((d / "result.json").exists() for d in dirs)
    shutil.copytree(dirs[0], tmp_path / "alone0")
    resumed = train_seeds(fabric, spec, seeds, corpus, c, dirs, probes, progress=False)
    assert [without_timings(r) for r in resumed] == [without_timings(r) for r in straight]
    # a seed's folder also resumes as a separate run
    alone = train_run(fabric, spec, 0, corpus, c, tmp_path / "alone0", probes, progress=False)
    assert_close_runs(alone, straight[0], tmp_path / "alone0", tmp_path / "straight0")


def test_stacking_says_why_not_where_it_does_not_apply(corpus, fabric):
    assert can_batch_seeds("mlm", config(), fabric) is True
    assert can_batch_seeds("mlm:rule=bernoulli", config(), fabric, corpus) is True  # padded rows, nothing drawn
    assert can_batch_seeds("electra", config(), fabric, corpus) is True  # draws, on rows of one count
    assert "draws random numbers" in can_batch_seeds("electra:rule=bernoulli", config(), fabric, corpus)
    assert "draws random numbers" in can_batch_seeds("ar>electra:rule=bernoulli@0.5", config(), fabric, corpus)
    for overrides, reason in (({"compile": True}, "--compile"), ({"micro_batch": 2}, "--micro-batch"),
                              ({"activation_checkpointing": True}, "--activation-checkpointing"),
                              ({"model": "tiny:dropout=0.1"}, "dropout")):
        assert reason in can_batch_seeds("mlm", config(**overrides), fabric)
    with pytest.raises(Exception, match="cannot train as one stacked model: not with --compile"):
        train_seeds(fabric, "mlm", [0, 1], corpus, config(compile=True), [None, None], progress=False)


def test_finished_and_diverged_seeds_are_reused_and_only_the_others_train(corpus, fabric, tmp_path, monkeypatch):
    dirs = [tmp_path / f"s{s}" for s in range(3)]
    for run_dir in dirs:
        run_dir.mkdir()
    (dirs[0] / "result.json").write_text(written_record(seed=0, steps=5))
    (dirs[1] / "diverged.json").write_text(json.dumps({"seed": 1, "diverged": True}))
    trained = []

    def training(fabric, spec, seeds, corpus, config, run_dirs, yardsticks, progress, stop_after_steps=None):
        trained.append((seeds, run_dirs))
        return [({"seed": seed}, None) for seed in seeds]
    monkeypatch.setattr(bench.training.stacked, "seeds_trained", training)
    outcomes = trained_or_reused_seeds(fabric, "mlm", [0, 1, 2], corpus, config(), dirs, reuse=True)
    assert outcomes == [(from_json(json.loads(written_record(seed=0, steps=5)), ""), None),
                        (None, {"seed": 1, "diverged": True}), ({"seed": 2}, None)]
    assert trained == [([2], [dirs[2]])]
    assert [o[0]["seed"] for o in trained_or_reused_seeds(fabric, "mlm", [0, 1, 2], corpus, config(), dirs,
                                                          reuse=False)] == [0, 1, 2]


@pytest.mark.slow
def test_perf_times_the_default_comparisons_step_alone_at_once_and_stacked():
    # tiny shapes: this checks that the rows are made and hold sane keys; their speeds are bench.perf's to print
    from bench.training.throughput import comparison_rows
    rows = comparison_rows(steps=3, seeds=2, model="tiny", seq_len=16, batch_size=4,
                           data="synthetic:train=64,heldout=16,words=64,states=4", rounds=3)
    names = [row["name"] for row in rows]
    assert [name.split(": ")[1] for name in names][1:] == ["one run, 1 thread", "two runs at once, 2 processes of 1 "
                                                           "thread", "2 seeds stacked, " + names[0].split(", ")[-1]]
    assert [row["runs"] for row in rows] == [1, 1, 2, 2]
    for row in rows:
        assert row["tokens"] == row["runs"] * 3 * 4 * 16 and row["seconds"] > 0 and row["ours_tokens_per_s"] > 0
        assert row["flops_per_step"] == rows[0]["flops_per_step"] and row["ours_flops_per_s"] > 0
        assert len(row["seconds_each_round"]) == 3 and sorted(row["seconds_each_round"])[1] == row["seconds"]
    assert "peer_tokens_per_s" not in rows[0]
    assert all(row["peer_tokens_per_s"] == rows[0]["ours_tokens_per_s"] for row in rows[1:])


@pytest.mark.slow
def test_seeds_in_different_pieces_of_a_schedule_train_in_one_step(corpus, fabric, tmp_path, monkeypatch):
    # Bernoulli masks move each seed's switch to ar to its own step: in the steps between, the stack runs one forward
    # per piece, each on the parameters of its own seeds
    spec, seeds, pieces = "mlm:rule=bernoulli,rate=0.5>ar@0.5", list(range(6)), []
    real = SeedStack.backward
    monkeypatch.setattr(SeedStack, "backward", lambda self, groups: pieces.append(len(groups)) or real(self, groups))
    stacked = train_seeds(fabric, spec, seeds, corpus, config(4e8), [tmp_path / f"stacked{s}" for s in seeds],
                          progress=False)
    assert max(pieces) == 2
    for seed, ours in zip(seeds, stacked):
        theirs = train_run(fabric, spec, seed, corpus, config(4e8), tmp_path / f"separate{seed}", progress=False)
        assert_close_runs(ours, theirs, tmp_path / f"stacked{seed}", tmp_path / f"separate{seed}")
