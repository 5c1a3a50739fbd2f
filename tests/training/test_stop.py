"""A stop signal ends every phase within one batch, fit or step (bench.common.stopping), not only training: a scheduler
gives 30-120 s before SIGKILL, and an untrained control's downstream fine-tuning once ran 25-70 s past a SIGTERM.
Each test sends the signal from inside the phase's first step, so what is checked is where the phase stops, never how
long it took."""

import json
import os
import signal
from dataclasses import replace

import pytest

import bench.yardsticks.readout
from bench.common.stopping import EXIT_STOPPED, PhaseStopped, RunStopped, check_stop, stop_on_signals
from bench.data.corpus import load_corpus
from bench.training.recipe import RunConfig
from bench.training.runs import control_run
from bench.training.state import Context, Work
from bench.yardsticks.downstream import Downstream, FinetuneConfig
from bench.yardsticks.examples import TaskContext
from bench.yardsticks.probes import ProbeConfig, Probes
from bench.yardsticks.tasks import load_task

STEPS = 4  # fine-tuning steps per rate; two rates
CONFIG = RunConfig(budget_flops=1.0, model="tiny", lr=1e-3)


@pytest.fixture(scope="module")
def corpus():
    """A language whose states share words, so that its states task has positions to ask about."""
    return load_corpus("synthetic:words=64,lexicon=8,topics=2,train=8,heldout=32", 16)


def yardsticks(corpus):
    """The control's yardsticks, tiny: the downstream task (frozen, then fine-tuned at each rate) and the probes."""
    task = load_task("synthetic:states,size=32", TaskContext(corpus.seq_len, corpus.vocab, language=corpus.language))
    recipe = FinetuneConfig(steps=STEPS, batch=4, lrs=(1e-3, 3e-3), probe=ProbeConfig(iterations=2))
    probes = ProbeConfig(train_windows=8, test_windows=8, iterations=2, finetune_steps=2, finetune_batch=4)
    return [Downstream([task], recipe), Probes(corpus, probes)]


def signalled_in_the_first_step(monkeypatch) -> list[int]:
    """readout.finetune, but the first fine-tuning step's loss sends this process SIGTERM, as a scheduler's warning
    landing mid-step would; returns the list that counts the steps taken."""
    steps, finetune = [], bench.yardsticks.readout.finetune

    def counted(parameters, loss_of, *args, **kwargs):
        def loss(rows):
            steps.append(len(steps))
            if len(steps) == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            return loss_of(rows)
        return finetune(parameters, loss, *args, **kwargs)

    monkeypatch.setattr(bench.yardsticks.readout, "finetune", counted)
    return steps


def test_a_signal_in_an_untrained_controls_fine_tuning_stops_it_after_that_step(corpus, fabric, tmp_path,
                                                                                  monkeypatch, capsys):
    # the control's fine-tuning over the rates is the longest phase a comparison runs outside training: before
    # bench.common.stopping, all of its 2 × STEPS steps and the probes ran, the result was written, and only then the
    # stop
    work, context = Work("mlm", 0, CONFIG, tmp_path / "control"), Context(corpus, yardsticks(corpus))
    straight = control_run(fabric, Work("mlm", 0, CONFIG, tmp_path / "straight"), Context(corpus, yardsticks(corpus)))
    before = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        steps = signalled_in_the_first_step(patch)
        with pytest.raises(RunStopped) as stopped:
            control_run(fabric, work, context)
    assert steps == [0]  # the step the signal arrived in, and no other
    assert stopped.value.code == EXIT_STOPPED and signal.getsignal(signal.SIGTERM) is before
    assert stopped.value.message.startswith("stopped by SIGTERM while control was read (nothing of it is written")
    assert capsys.readouterr().err.strip().splitlines() == [stopped.value.message]
    assert not (work.run_dir / "result.json").exists()
    # --resume reads it again, from the start: the same control as one never stopped
    resumed = control_run(fabric, replace(work, reuse=True), context)
    assert json.loads((work.run_dir / "result.json").read_text())["downstream"] == straight.to_json()["downstream"]
    assert resumed.probes == straight.probes


def test_every_reading_phase_checks_for_a_stop_between_its_steps(corpus):
    # features batch by batch, each L-BFGS evaluation, each fine-tuning step: with a stop already asked, a reading
    # of the backbone ends before its first one
    import torch

    from bench.training.batches import build_run_objective
    from bench.yardsticks import readout

    backbone = build_run_objective("mlm", CONFIG, corpus).backbone
    weight = torch.ones(1, requires_grad=True)
    x, y, tokens = torch.randn(16, 4), torch.arange(16) % 2, corpus.heldout.with_format("torch")[:8]["tokens"]
    read = lambda rows: backbone(tokens[rows], attention="causal")  # noqa: E731
    phases = {"features": lambda: readout.features(backbone, 8, read, 4),
              "fit": lambda: readout.fit_linear_probe(x, y, x, y, 2, readout.DEFAULT_FIT),
              "finetune": lambda: readout.finetune([weight], lambda rows: weight.square().sum(), 16, 3, 4, 1e-3,
                                                   lambda step: 1.0, 0)}
    with stop_on_signals() as request:
        for phase in phases.values():
            phase()  # none asked: each runs
        request.signal_name = "SIGTERM"
        for name, phase in phases.items():
            with pytest.raises(PhaseStopped):
                phase()
            assert backbone.training  # features restores the backbone's mode on its way out
    check_stop()  # outside a stop scope a signal is the process's default action, never an exception here


def test_a_phase_stopped_outside_any_run_ends_the_command_with_one_line(capsys):
    # the Bayes references, tuning's fine-tuning: no run catches their stop, the command's scope does
    with pytest.raises(RunStopped) as stopped:
        with stop_on_signals():
            raise PhaseStopped("SIGUSR1")
    assert stopped.value.code == EXIT_STOPPED
    assert capsys.readouterr().err.strip() == stopped.value.message
    assert stopped.value.message.startswith("stopped by SIGUSR1 before the phase under way finished")
