"""The glue between the objectives' corruption and exact inference, checked against brute-force enumeration."""

import math

import pytest
import torch

from bench.data.corpus import load_corpus
from bench.data.inference import next_token_nll
from bench.data.inference import unigram as synthetic_unigram
from bench.training.batches import build_run_objective, eval_batches
from bench.training.recipe import RunConfig
from bench.yardsticks.bayes import loss_floors, unigram_losses
from bench.yardsticks.probes import ProbeConfig, probe_ceilings
from objectives import IGNORE
from tests.helpers import enumerated_posterior, enumerated_probability, language_lists

TINY_DATA = ("synthetic:topics=2,categories=3,function=1,closed=1,features=2,setters=1,words=4,lexicon=2,zipf=0.7,"
             "topic=0.5,successors=2,leak=0.1,seed=3,train=8,heldout=40")
SEQ_LEN = 5


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(TINY_DATA, SEQ_LEN)


def batches_for(spec: str, corpus):
    config = RunConfig(budget_flops=1.0, model="tiny", batch_size=8, eval_windows=40)
    objective = build_run_objective(spec, config, corpus)
    return objective, eval_batches(objective, corpus, config)


def brute_force_masked_floor(corpus, batches, keep: float, rand: float, mask: float) -> float:
    P, V, first = language_lists(corpus.language), corpus.vocab.num_ordinary, corpus.vocab.first_ordinary

    def corruption(seen: int, x: int) -> float:  # p(what the model sees | true word x) at a chosen position
        return mask if seen == corpus.vocab.MASK else keep * (seen - first == x) + rand / V

    losses = []
    for batch in batches:
        for tokens, seen, targets in zip(batch.original.tolist(), batch.inputs.tolist(), batch.targets.tolist()):
            chosen = [i for i, t in enumerate(targets) if t != IGNORE]
            weights = enumerated_posterior(P, [t - first for t in seen], chosen, V,
                                           lambda i, x, seen=seen: corruption(seen[i], x))
            total = sum(weights.values())
            for j, i in enumerate(chosen):
                losses.append(-math.log(sum(p for g, p in weights.items() if g[j] == tokens[i] - first) / total))
    return sum(losses) / len(losses)


def test_ar_floor_is_the_next_token_loss_by_enumeration(corpus):
    objective, batches = batches_for("ar", corpus)
    P, first = language_lists(corpus.language), corpus.vocab.first_ordinary
    losses = [-math.log(enumerated_probability(P, words[:t + 1]) / enumerated_probability(P, words[:t]))
              for batch in batches for words in (batch.original - first).tolist() for t in range(1, SEQ_LEN)]
    assert loss_floors(objective, batches, corpus)["loss"] == pytest.approx(sum(losses) / len(losses), abs=1e-9)


@pytest.mark.slow  # a brute force over every masked position's word, 10-30 s each on 2 cores
@pytest.mark.parametrize("spec, shares", [("mlm:rate=0.4", (0.1, 0.1, 0.8)),
                                          ("mlm:rate=0.4,mask=0.2,random=0.5,keep=0.3", (0.3, 0.5, 0.2))])
def test_mlm_floor_under_the_exact_corruption(spec, shares, corpus):
    objective, batches = batches_for(spec, corpus)
    kinds = torch.cat([b.info["rewrite"] for b in batches])
    assert {1, 2, 3} <= set(kinds.unique().tolist())  # [MASK], random and kept positions all occur
    expected = brute_force_masked_floor(corpus, batches, *shares)
    assert loss_floors(objective, batches, corpus)["loss"] == pytest.approx(expected, abs=1e-9)


@pytest.mark.slow  # the same brute force, ~20 s on 2 cores
def test_electra_floor_is_its_generators(corpus):
    objective, batches = batches_for("electra:rate=0.4,mask=0.5", corpus)
    floors = loss_floors(objective, batches, corpus)
    assert set(floors) == {"generator_loss"}
    assert floors["generator_loss"] == pytest.approx(brute_force_masked_floor(corpus, batches, 0.5, 0.0, 0.5),
                                                     abs=1e-9)


def test_span_masked_mlm_has_no_floor(corpus):
    objective, batches = batches_for("mlm:span=geometric,rate=0.4", corpus)
    assert loss_floors(objective, batches, corpus) == {}


def test_span_floor_on_its_own_batches(corpus):
    """At T = 12 span corruption hides one word, the last raw one, behind one sentinel: its Bayes loss over the three
    targets (sentinel, word, EOS) is then the next-token loss of that word alone (the sentinel and EOS are certain)."""
    longer = load_corpus(TINY_DATA, 12)
    objective, batches = batches_for("span", longer)
    lengths = objective.lengths(12)
    assert (lengths.noise, lengths.spans, lengths.targets) == (1, 1, 3)
    words = torch.cat([batch.original[:, :lengths.raw] for batch in batches]) - longer.vocab.first_ordinary
    expected = next_token_nll(longer.language, words)[:, -1].sum().item() / (len(words) * lengths.targets)
    floor = loss_floors(objective, batches, longer)["loss"]
    assert floor == pytest.approx(expected, abs=1e-10)
    assert floor < unigram_losses(objective, batches, longer)["loss"]


def test_span_unigram_gives_the_markers_their_share(corpus):
    """The context-free start of span corruption's range: sentinel and EOS each one of a sequence's targets, the
    words the noise's share times the unigram, computed here from the definition over the batch's targets."""
    longer = load_corpus(TINY_DATA, 12)
    objective, batches = batches_for("span:density=0.4,mean_span=1", longer)
    vocab, lengths = longer.vocab, objective.lengths(12)
    unigram = synthetic_unigram(longer.language, 12)
    losses = []
    for batch in batches:
        for row in batch.targets.tolist():
            for token in (t for t in row if t != IGNORE):
                if vocab.first_ordinary <= token < vocab.end_ordinary:
                    losses.append(-math.log(lengths.noise / lengths.targets * unigram[token - vocab.first_ordinary]))
                else:
                    losses.append(math.log(lengths.targets))
    assert unigram_losses(objective, batches, longer)["loss"] == pytest.approx(sum(losses) / len(losses), abs=1e-10)


def test_probe_ceilings_are_ordered():
    # a reader of the whole window sees everything a causal one does, and more: in expectation its replaced-word
    # ceiling is the higher; enough windows that the sample mean shows it
    many = load_corpus(TINY_DATA.replace("heldout=40", "heldout=400"), 12)
    c = probe_ceilings(many, ProbeConfig(train_windows=100, test_windows=300))
    assert 0.5 <= c["replaced_word_filtering"] <= c["replaced_word_smoothing"] <= 1
    states = many.language.emission.shape[1]
    assert all(1 / states < c[f"hidden_state_{sees}"] <= 1 for sees in ("smoothing", "filtering"))
