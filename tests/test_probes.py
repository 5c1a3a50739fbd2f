import pytest
import torch

from backbone import measure_flops
from bench.data import load_corpus
from bench.probes import ProbeConfig, features, fit_linear_probe, majority_accuracy, run_probes
from bench.train import TrainConfig, build_run_objective

CONFIG = ProbeConfig(train_windows=24, test_windows=8, iterations=20, finetune_steps=3, finetune_batch=4)


@pytest.fixture(scope="module")
def corpus():
    return load_corpus("synthetic:words=32,states=4,components=2,train=8,heldout=32", 16)


def objective_for(spec, corpus):
    return build_run_objective(spec, TrainConfig(budget_flops=1.0, model="tiny"), corpus)


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
    for key in ("tagging_frozen", "tagging_finetuned", "component", "tagging_chance", "component_chance"):
        assert 0.0 <= first[key] <= 1.0
    # every matrix product the probes execute, as FlopCounterMode measures it, equals what they report
    assert measure_flops(lambda: run_probes(objective, corpus, CONFIG)) == first["probe_flops"]
