import json
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from bench.common.files import unpack_counts
import torch

from backbone import measure_flops
from bench.data.corpus import load_corpus
from bench.training.batches import build_run_objective
from bench.training.recipe import RunConfig
from bench.yardsticks.probes import (ProbeConfig, Probes, features, input_only_controls, probe_ceilings, probe_data,
                                     question, run_probes)
from bench.yardsticks.readout import fit_linear_probe, majority_accuracy

CONFIG = ProbeConfig(train_windows=24, test_windows=8, iterations=20, finetune_steps=3, finetune_batch=4)


@pytest.fixture(scope="module")
def corpus():
    return load_corpus("synthetic:words=64,lexicon=8,topics=2,train=8,heldout=32", 16)


def objective_for(spec, corpus):
    return build_run_objective(spec, RunConfig(budget_flops=1.0, model="tiny"), corpus)


def test_linear_probe_recovers_a_linear_code_and_not_noise():
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(5, (600,), generator=generator)
    code = torch.nn.functional.one_hot(labels, 5).float() * 3 + torch.randn(600, 5, generator=generator) * 0.1
    x = torch.cat([code, torch.randn(600, 11, generator=generator)], dim=1) * 7 + 2  # scaled and shifted
    accuracy, flops, probe = fit_linear_probe(x[:400], labels[:400], x[400:], labels[400:], 5, ProbeConfig())
    assert accuracy == 1.0 and flops > 0
    # the returned probe works on the raw features: it standardises them itself
    assert (probe(x[400:]).argmax(-1) == labels[400:]).float().mean().item() == accuracy
    noise = torch.randn(600, 16, generator=generator)
    chance, _, _ = fit_linear_probe(noise[:400], labels[:400], noise[400:], labels[400:], 5, ProbeConfig())
    assert chance < 0.35  # 5 balanced classes: 0.2 expected


def test_a_feature_constant_in_training_reads_as_nothing_at_test():
    # a one-hot word the training rows never hold (std 0): standardised by 1e-6, its untrained weight became a logit
    # of hundreds wherever a test row held it, and the probe's answer there was noise
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(3, (300,), generator=generator)
    code = torch.nn.functional.one_hot(labels, 3).float() + torch.randn(300, 3, generator=generator) * 0.3
    x = torch.cat([code, torch.zeros(300, 8)], dim=1)
    x[200:, 3:] = 1.0  # every test row holds every feature the training rows never held
    accuracy, _, _ = fit_linear_probe(x[:200], labels[:200], x[200:], labels[200:], 3, ProbeConfig())
    without, _, _ = fit_linear_probe(code[:200], labels[:200], code[200:], labels[200:], 3, ProbeConfig())
    assert accuracy == without > 0.9


def test_majority_chance():
    assert majority_accuracy(torch.tensor([1, 1, 2]), torch.tensor([1, 2, 2, 1])) == 0.5


def test_span_is_probed_with_a_prefix_over_the_whole_window(corpus):
    assert objective_for("span", corpus).probe_attention(16) == {"attention": "prefix", "prefix_len": 16}
    assert objective_for("ar", corpus).probe_attention(16) == {"attention": "causal"}
    assert objective_for("electra", corpus).probe_attention(16) == {"attention": "bidirectional"}
    backbone = objective_for("span", corpus).backbone
    tokens = corpus.windows("heldout")[:3]
    torch.testing.assert_close(features(backbone, tokens, objective_for("span", corpus).probe_attention(16)),
                               features(backbone, tokens, {"attention": "bidirectional"}))


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["ar", "mlm", "electra", "span"])
def test_probes_are_bounded_deterministic_and_leave_model_and_rng_alone(spec, corpus):
    objective = objective_for(spec, corpus)
    before = [p.detach().clone() for p in objective.parameters()]
    torch.manual_seed(5)
    first = run_probes(objective, corpus, CONFIG)
    after_rng = torch.rand(1)
    torch.manual_seed(5)
    assert run_probes(objective, corpus, CONFIG) == first
    assert torch.equal(torch.rand(1), after_rng)  # the global RNG is where it was
    assert all(torch.equal(a, b) for a, b in zip(before, objective.parameters()))  # fine-tuning used a copy
    for key in ("hidden_state", "replaced_word", "replaced_word_finetuned"):
        assert 0.0 <= first[key]["score"] <= 1.0
        # the hits per test window add up to the score (bench.analysis.uncertainty resamples them)
        hits, units = unpack_counts(first[key]["hits"]), unpack_counts(first[key]["units"])
        assert hits.sum() / units.sum() == pytest.approx(first[key]["score"]) and len(units) == CONFIG.test_windows
    assert first["sees"] == objective.tagging_ceiling
    # every matrix product the probes execute, as FlopCounterMode measures it, equals what they report
    assert measure_flops(lambda: run_probes(objective, corpus, CONFIG)) == first["probe_flops"]


def test_the_fine_tuned_probe_of_a_backbone_with_dropout_does_not_depend_on_the_global_generator(corpus):
    """Dropout draws from torch's global generator, which holds whatever the run (or the process, for a control)
    did before: the fine-tuned probe starts it from its own seed, so a score depends on the backbone alone."""
    objective = build_run_objective("mlm", RunConfig(budget_flops=1.0, model="tiny:dropout=0.1"), corpus)
    scores = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        scores.append(run_probes(objective, corpus, CONFIG)["replaced_word_finetuned"])
    assert scores[0] == scores[1]


# --- the controls ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_untrained_control_is_the_runs_own_step_zero_backbone(corpus, tmp_path):
    from bench.downstream import control_objective
    from bench.training.distributed import make_fabric
    from bench.training.runs import control_run
    from bench.training.state import Context, Work, setup_run
    from bench.yardsticks.examples import TaskContext

    fabric, config = make_fabric("cpu"), RunConfig(budget_flops=1.0, model="tiny", lr=1e-3)
    context = Context(corpus, [Probes(corpus, CONFIG)])
    controls = {spec: control_run(fabric, Work(spec, 1, config, tmp_path / spec), context)
                for spec in ("mlm", "electra", "ar")}
    # scored directly: the backbone a run of that seed starts from, before its first step
    direct = run_probes(setup_run(fabric, Work("mlm", 1, config, tmp_path / "run"), Context(corpus)).objective, corpus,
                        CONFIG)
    assert controls["mlm"].probes == direct and controls["mlm"].flops == 0
    assert (controls["mlm"].control, controls["ar"].control) == ("untrained, bidirectional", "untrained, causal")
    # the objective matters only through how its backbone is read: electra reads as mlm does
    assert controls["electra"].probes == controls["mlm"].probes != controls["ar"].probes
    assert json.loads((tmp_path / "ar" / "result.json").read_text()) == controls["ar"].to_json()
    # bench.downstream --run rebuilds a control from its seed alone: the same weights
    settings = {"config": {"model": {"model": config.model}}}
    rebuilt = control_objective(controls["ar"], settings, TaskContext(corpus.seq_len, corpus.vocab))
    started = setup_run(fabric, Work("ar", 1, config, tmp_path / "ar-run"), Context(corpus)).objective
    assert all(torch.equal(a, b) for a, b in zip(rebuilt.backbone.state_dict().values(),
                                                 started.backbone.state_dict().values()))
    assert not torch.equal(rebuilt.backbone.token_embedding.weight,
                           control_objective(replace(controls["ar"], seed=2), settings,
                                             TaskContext(corpus.seq_len, corpus.vocab)).backbone.token_embedding.weight)


def test_input_only_controls_have_their_known_answers():
    corpus = load_corpus("synthetic:heldout=1200", 32)
    config = ProbeConfig(train_windows=800, test_windows=400)
    controls, data = input_only_controls(corpus, config), probe_data(corpus, config)
    for sees in ("smoothing", "filtering"):
        # the prior: the share of the asked test positions holding the most frequent state of the training ones
        _, read, labels = question(data, "hidden_state", sees)
        common = Counter(labels[data.train][read[data.train]].tolist()).most_common(1)[0][0]
        test_labels = labels[data.test][read[data.test]].tolist()
        assert controls[sees]["hidden_state"] == pytest.approx(test_labels.count(common) / len(test_labels))
        # a replacement is drawn from the words' own frequencies: a word alone says nothing of whether it was
        # replaced, and the best it can do is the majority label; so within sampling error of 1/2 (here ± 0.02)
        asked = int(data.chosen[data.test].sum())
        assert abs(controls[sees]["replaced_word"] - 0.5) < 3 * (0.25 / asked) ** 0.5 + 0.01
    # the replaced ones are about half of the asked positions, and only asked positions are ever replaced
    assert not (data.replaced & ~data.chosen).any()
    assert data.replaced.sum() / data.chosen.sum() == pytest.approx(0.5, abs=0.03)
    assert (data.shown != data.tokens).sum() <= data.replaced.sum()


@pytest.mark.slow
def test_a_backbone_trained_on_the_embedded_language_beats_its_control():
    from bench.training.distributed import make_fabric
    from bench.training.loop import fit
    from bench.training.state import Context, Work, setup_run

    corpus = load_corpus("synthetic:train=512,heldout=192", 32)
    config = ProbeConfig(train_windows=128, test_windows=64, iterations=30)
    fabric = make_fabric("cpu")
    with tempfile.TemporaryDirectory() as folder:
        train = RunConfig(budget_flops=8e10, model="tiny", lr=3e-3, eval_points=1)
        run = setup_run(fabric, Work("mlm", 0, train, Path(folder)), Context(corpus))
        before = run_probes(run.objective, corpus, config, finetune=False)
        fit(fabric, run)
        after = run_probes(run.objective, corpus, config, finetune=False)
    ceiling = probe_ceilings(corpus, config)["hidden_state_smoothing"]
    prior = input_only_controls(corpus, config)["smoothing"]["hidden_state"]
    # the masked word's state in the last layer, which MLM's transform head leaves less linearly readable early on:
    # 8e10 FLOPs (a few seconds) to clear the margin
    before, after = before["hidden_state"]["score"], after["hidden_state"]["score"]
    assert before < prior + 0.1 and after > before + 0.25 and after < ceiling


def test_the_probe_is_fitted_in_fp32_under_the_runs_autocast(corpus):
    # the readouts run on the device inside the run's autocast (bench.training); the backbone's features follow it, the
    # L-BFGS fit does not: under bf16 autocast it gives the fp32 fit bit for bit
    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(3, (300,), generator=generator)
    x = torch.nn.functional.one_hot(labels, 3).float() + torch.randn(300, 3, generator=generator)
    plain = fit_linear_probe(x[:200], labels[:200], x[200:], labels[200:], 3, ProbeConfig())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = fit_linear_probe(x[:200], labels[:200], x[200:], labels[200:], 3, ProbeConfig())
        hidden = features(objective_for("mlm", corpus).backbone, corpus.windows("heldout")[:4], {"attention": "causal"})
    assert plain[:2] == mixed[:2] and torch.equal(plain[2].linear.weight, mixed[2].linear.weight)
    assert hidden.dtype == torch.float32  # read back as fp32 from the half-precision forward
