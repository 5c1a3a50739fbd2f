"""Exact Bayes ceilings of the embedded pair tasks (synthetic:order, synthetic:same-source) and the likelihood from an
arbitrary time they rest on: against brute-force enumeration of the generative story, against the task builder's own
examples by Monte Carlo, and on languages where the answer is known in closed form.

The brute-force reference enumerates every (component, state path) of a whole window of T words, in plain Python over
lists; a word that is not shown (before a segment, or the window's last 3) is left out of the product, which sums it
out exactly since emission rows sum to one. It shares no code with the scaled forward recursions.
"""
import itertools
import math
from dataclasses import replace

import pytest
import torch

from bench.analysis.findings import Stat
from bench.analysis.summaries import DownstreamSummary, TaskFlops, TaskRow, TaskSummary
from bench.data.inference import (binary_ceiling, component_posterior, log_likelihood_from, order_posterior,
                                  same_source_posterior)
from bench.data.synthetic import Language, LanguageConfig, make_language, sample
from bench.report.yardstick_tables import downstream_table
from bench.yardsticks.examples import TaskContext
from bench.yardsticks.tasks import load_task
from objectives import Vocab
from objectives.pairs import SPECIAL_POSITIONS, cut_range

# 3 states (one feature value: the pair tasks ask about order, not agreement), so that every path of a window of 7
# words can be enumerated
TINY = LanguageConfig(topics=2, categories=3, function=1, closed=1, features=1, setters=1, words=4, lexicon=2,
                      zipf=0.7, topic=0.5, successors=2, leak=0.1, seed=3)
WINDOW = 7  # T: C = 4 content words, cut at 1..3


@pytest.fixture(scope="module")
def tiny():
    return make_language(TINY)



def one_ceiling(task) -> float | None:
    """The ceiling where every kind of reader has the same one (a sequence's label); None otherwise."""
    values = set(task.ceilings.values())
    return values.pop() if len(values) == 1 else None

def _lists(language):
    return (language.prior.tolist(), language.initial.tolist(), language.transition.tolist(),
            language.emission.tolist())


def _prob(P, seen):
    """p(the words of `seen` that are not None, at their positions) for a sequence of len(seen) words from time 0."""
    while seen and seen[-1] is None:  # unseen words after the last seen one sum to one (transition rows sum to one)
        seen = seen[:-1]
    if not seen:
        return 1.0
    prior, initial, transition, emission = P
    K, S = len(prior), len(initial[0])
    total = 0.0
    for k in range(K):
        for path in itertools.product(range(S), repeat=len(seen)):
            p = prior[k] * initial[k][path[0]]
            for t in range(1, len(seen)):
                p *= transition[k][path[t - 1]][path[t]]
            for t, word in enumerate(seen):
                if word is not None:
                    p *= emission[k][path[t]][word]
            total += p
    return total


def _cut_prior(cut, content_length):
    low, high = cut_range(content_length)
    return 1 / (high - low + 1) if low <= cut <= high else 0.0


def _story_order(P, x, y, start=0):
    """P(label 1 | shown x, y) for order, from the story: a window of T words from time `start` cut at h, then
    label 1 shows (a, b), label 0 shows (b, a), each with prior 1/2."""
    C = len(x) + len(y)
    before, hidden_tail = [None] * start, [None] * SPECIAL_POSITIONS  # unseen: what precedes, the last 3 words
    positive = 0.5 * _cut_prior(len(x), C) * _prob(P, before + x + y + hidden_tail)  # w = x ++ y, cut at len(x)
    negative = 0.5 * _cut_prior(len(y), C) * _prob(P, before + y + x + hidden_tail)  # w = y ++ x, swapped
    return positive / (positive + negative)


def _story_same_source(P, x, y, start=0):
    """P(label 1 | shown x, y) for same-source: label 0 shows a = w[:h] beside w'[h:C] of another window w', both
    windows from time `start`."""
    C, T, h, before = len(x) + len(y), len(x) + len(y) + SPECIAL_POSITIONS, len(x), [None] * start
    positive = 0.5 * _cut_prior(h, C) * _prob(P, before + x + y + [None] * SPECIAL_POSITIONS)
    negative = 0.5 * _cut_prior(h, C) * _prob(P, before + x + [None] * (T - h)) * _prob(
        P, before + [None] * h + y + [None] * SPECIAL_POSITIONS)
    return positive / (positive + negative)


def _shown(language, count, seed):
    """Shown pairs to score: sampled contents and a few fixed unlikely ones, each at every cut of the range."""
    C = WINDOW - SPECIAL_POSITIONS
    contents = sample(language, count, C, seed=seed).words.tolist() + [[0, 0, 0, 0], [3, 2, 1, 0], [1, 3, 1, 3]]
    low, high = cut_range(C)
    rows = [(content, cut) for content in contents for cut in range(low, high + 1)]
    return torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])


# ----------------------------------------------------------------------------------------------- likelihood from h
@pytest.mark.parametrize("start", [0, 1, 3])
def test_log_likelihood_from_a_later_time_matches_enumeration(tiny, start):
    P = _lists(tiny)
    words = torch.cat([sample(tiny, 4, 4, seed=5).words, torch.tensor([[0, 0, 0, 0], [3, 2, 1, 0]])])
    expected = [math.log(_prob(P, [None] * start + w)) for w in words.tolist()]
    assert log_likelihood_from(tiny, words, start).tolist() == pytest.approx(expected, abs=1e-9)
    if start:  # the unseen words summed out one by one, not through the state marginals
        explicit = [math.log(sum(_prob(P, list(u) + w) for u in itertools.product(range(TINY.words), repeat=start)))
                    for w in words.tolist()]
        assert log_likelihood_from(tiny, words, start).tolist() == pytest.approx(explicit, abs=1e-9)


def test_log_likelihood_from_handles_rows_of_different_starts_and_lengths(tiny):
    P = _lists(tiny)
    words = sample(tiny, 5, 4, seed=6).words
    start, lengths = torch.tensor([0, 2, 1, 3, 0]), torch.tensor([4, 1, 3, 2, 0])
    expected = [math.log(_prob(P, [None] * s + w[:n])) for w, s, n in zip(words.tolist(), start.tolist(),
                                                                         lengths.tolist())]
    got = log_likelihood_from(tiny, words, start, lengths)
    assert got.tolist() == pytest.approx(expected, abs=1e-9)
    assert got[-1].item() == 0.0  # nothing seen: probability one
    # the padding after each row's words is ignored, whatever it holds
    other_padding = torch.where(torch.arange(4) >= lengths[:, None], (words + 1) % TINY.words, words)
    assert torch.equal(got, log_likelihood_from(tiny, other_padding, start, lengths))
    with pytest.raises(ValueError, match="lengths"):
        log_likelihood_from(tiny, words, 0, 5)


# ----------------------------------------------------------------------------------------------- the posteriors
@pytest.mark.parametrize("start", [0, 2])  # a window opening a sequence, and one from later in it
def test_order_posterior_matches_the_generative_story(tiny, start):
    P = _lists(tiny)
    content, cut = _shown(tiny, 5, seed=7)
    expected = [_story_order(P, c[:h], c[h:], start) for c, h in zip(content.tolist(), cut.tolist())]
    assert order_posterior(tiny, content, cut, start).tolist() == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("start", [0, 2])
def test_same_source_posterior_matches_the_generative_story(tiny, start):
    P = _lists(tiny)
    content, cut = _shown(tiny, 5, seed=8)
    expected = [_story_same_source(P, c[:h], c[h:], start) for c, h in zip(content.tolist(), cut.tolist())]
    assert same_source_posterior(tiny, content, cut, start).tolist() == pytest.approx(expected, abs=1e-9)


def test_posteriors_refuse_an_empty_segment(tiny):
    content = torch.zeros(2, 4, dtype=torch.long)
    for posterior in (order_posterior, same_source_posterior):
        with pytest.raises(ValueError, match="two non-empty segments"):
            posterior(tiny, content, torch.tensor([1, 4]))


# ----------------------------------------------------------------------------------------------- the tasks' ceilings
def _context(language, seq_len):
    return TaskContext(seq_len, Vocab.for_words(language.emission.shape[-1]), language=language)


def _read_pairs(split, vocab):
    """(content in shown order as words, first segment lengths) read back from laid-out "[BOS] x [EOS] y [EOS]"."""
    tokens = split.tokens
    assert (tokens[:, 0] == vocab.BOS).all() and (tokens[:, -1] == vocab.EOS).all()
    separator = (tokens[:, 1:-1] == vocab.EOS).long().argmax(1) + 1
    assert ((tokens[:, 1:-1] == vocab.EOS).sum(1) == 1).all()  # words are never specials
    content = torch.stack([torch.cat([row[1:s], row[s + 1:-1]]) for row, s in zip(tokens, separator.tolist())])
    return content - vocab.first_ordinary, separator - 1


@pytest.mark.parametrize("name", ["order", "same-source"])
def test_task_ceiling_is_the_mean_best_posterior_of_its_test_pairs_from_time_T(tiny, name):
    # the task's windows are times T .. 2T − 1 of their sequences; the posteriors at a later start are checked by
    # enumeration above (start 2; T = 7 would take 3^14 paths per row)
    context = _context(tiny, WINDOW)
    task = load_task(f"synthetic:{name},size=8", context)
    content, cut = _read_pairs(task.test, context.vocab)
    posterior_of = order_posterior if name == "order" else same_source_posterior
    posterior = posterior_of(tiny, content, cut, WINDOW)
    assert one_ceiling(task) == pytest.approx(binary_ceiling(posterior), abs=1e-12)
    # not the ceiling from time 0: the start is passed through
    assert binary_ceiling(posterior) != pytest.approx(binary_ceiling(posterior_of(tiny, content, cut, 0)), abs=1e-6)
    assert task.describe()["ceilings"] == {"smoothing": one_ceiling(task), "filtering": one_ceiling(task)}


def test_component_task_has_its_ceiling_and_states_has_one_per_reader(tiny):
    context = _context(tiny, WINDOW)
    component = load_task("synthetic:topic,size=8", context)
    words = component.test.tokens - context.vocab.first_ordinary
    assert one_ceiling(component) == pytest.approx(component_posterior(tiny, words).amax(-1).mean().item(), abs=1e-12)
    # the states task's ceiling depends on how a backbone reads (filtering for a causal one, smoothing otherwise)
    states = load_task("synthetic:states,size=8", context)
    assert one_ceiling(states) is None and states.ceilings["filtering"] <= states.ceilings["smoothing"]


def test_pair_tasks_input_only_lookup_is_the_one_hot_of_every_word_pair_read_on_the_pairs_training_shows(tiny):
    from bench.yardsticks.embedded_tasks import _junction
    context = _context(tiny, WINDOW)
    task = load_task("synthetic:order,size=16", context)
    V, first = tiny.emission.shape[-1], context.vocab.first_ordinary
    def every_pair(split):  # the reader of all V² pairs, by hand: the words either side of the first [EOS]
        at = [row.tolist().index(Vocab.EOS) for row in split.tokens]
        return torch.stack([torch.nn.functional.one_hot((row[s - 1] - first) * V + row[s + 1] - first, V * V)
                            for row, s in zip(split.tokens, at)]).float()
    shown = every_pair(task.train).sum(0) > 0
    for split in (task.train, task.test):
        lookup = _junction(split, context, task.train)[:, 2 * V:]
        torch.testing.assert_close(lookup, every_pair(split)[:, shown])


# A language where order tells a lot: sparse, distinct transitions and few words per state.
STRUCTURED = LanguageConfig(topics=2, categories=4, function=2, closed=1, features=2, setters=1, words=8, lexicon=2,
                            successors=1, zipf=2.0, topic=0.5, leak=0.05, seed=1)


def _iid_mixture(emissions):
    """Components of one state each: the words are i.i.d. given the component, so any order is as likely as any
    other, and with a single component the two segments are independent."""
    emission = torch.tensor(emissions, dtype=torch.float64)[:, None, :]
    K = len(emissions)
    return Language(prior=torch.full((K,), 1 / K, dtype=torch.float64), initial=torch.ones(K, 1, dtype=torch.float64),
                    transition=torch.ones(K, 1, 1, dtype=torch.float64), emission=emission)


ORDER_BLIND = _iid_mixture([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7]])  # same-source can still tell the topic
# one topic, one state: i.i.d. words, neither task
BLIND = _iid_mixture([[0.4, 0.3, 0.2, 0.1]])


@pytest.mark.parametrize("language, name, expected", [
    (make_language(STRUCTURED), "order", "solvable"), (make_language(STRUCTURED), "same-source", "solvable"),
    (ORDER_BLIND, "order", "chance"), (ORDER_BLIND, "same-source", "solvable"),
    (BLIND, "order", "chance"), (BLIND, "same-source", "chance"),
])
@pytest.mark.slow
def test_ceiling_is_the_bayes_classifiers_accuracy_on_sampled_examples(language, name, expected):
    """The ceiling is an expectation of the Bayes classifier's accuracy: on the task's own test examples its hits
    must agree with it within sampling error. Exchangeable words make order carry nothing (ceiling exactly 1/2);
    a single component of independent words makes the segments independent (same-source exactly 1/2 too)."""
    context = _context(language, 16)
    task = load_task(f"synthetic:{name},size=4000", context)
    content, cut = _read_pairs(task.test, context.vocab)
    posterior = (order_posterior if name == "order" else same_source_posterior)(language, content, cut, 16)
    assert binary_ceiling(posterior) == pytest.approx(one_ceiling(task), abs=1e-12)
    hits = ((posterior > 0.5).long() == task.test.labels).double()
    best = torch.maximum(posterior, 1 - posterior)
    error = ((best * (1 - best)).mean() / len(hits)).sqrt().item()  # each hit is a coin of bias `best`
    assert abs(hits.mean().item() - one_ceiling(task)) < 4 * error
    if expected == "chance":
        assert one_ceiling(task) == pytest.approx(0.5, abs=1e-9)
    else:
        # well above chance, even without the cue of a window that opens a sequence (0.63 for this order task)
        assert one_ceiling(task) > 0.6 and hits.mean().item() > 0.5 + 8 * 0.5 / len(hits) ** 0.5


# ----------------------------------------------------------------------------------------------- long sequences
@pytest.mark.slow
def test_long_sequences_give_finite_likelihoods_and_posteriors():
    # 2000 steps: an unscaled recursion would underflow long before; the scaled one, masked, must stay exact.
    language = make_language(LanguageConfig(seed=1))
    words = sample(language, 3, 2000, seed=2).words
    later = log_likelihood_from(language, words, 1000)
    assert torch.isfinite(later).all() and (later < -1000).all()  # about 2 nats a word: far below float64's range
    masked = log_likelihood_from(language, words, 0, torch.tensor([1000, 1500, 2000]))
    for n, length in enumerate((1000, 1500, 2000)):
        assert masked[n].item() == pytest.approx(log_likelihood_from(language, words[n:n + 1, :length]).item(), rel=1e-12)
    cut = torch.tensor([500, 1000, 1500])
    order, same = order_posterior(language, words, cut), same_source_posterior(language, words, cut)
    for posterior in (order, same):
        assert torch.isfinite(posterior).all() and ((0 < posterior) & (posterior < 1)).all()
    # showing the segments the other way round swaps the hypotheses
    swapped = torch.stack([torch.cat([w[h:], w[:h]]) for w, h in zip(words, cut.tolist())])
    assert torch.allclose(order_posterior(language, swapped, 2000 - cut), 1 - order, atol=1e-9)


# ----------------------------------------------------------------------------------------------- the report
def test_downstream_table_shows_the_ceilings_beside_the_majority_class(golden_results):
    row = TaskRow(objective="mlm", pooling="mean over tokens", frozen=Stat(0.51, None, 1), finetuned=Stat(0.52, None, 1),
                  native=Stat(0.47, None, 1), metrics={}, rates={"0.001": 1}, rate_at_edge=False, flops=TaskFlops(frozen=1.0, finetune=2.0))
    described = {"level": "sequence", "classes": 2, "metric": "accuracy", "source": "sampled",
                 "majority_accuracy": 0.494}
    tasks = [TaskSummary({"task": "synthetic:order", **described, "ceilings": {"smoothing": 0.9587, "filtering": 0.9587},
                          "input_only": 0.52, "copies": ["sentence_order"]}, [row]),
             TaskSummary({"task": "file.csv", **described, "ceilings": {}}, [row])]
    results = replace(golden_results, setup={"downstream": "recipe"},
                      downstream=DownstreamSummary(tasks))
    intro, order, plain = downstream_table(results).split("\n**`")
    assert "Bayes ceiling" in intro  # what it means, said once
    assert "majority-class accuracy 0.494; Bayes ceiling whole window 0.959, left context 0.959" in order
    assert "input only 0.520; copies sentence_order" in order
    assert "majority-class accuracy 0.494" in plain and "Bayes ceiling" not in plain
    assert "native read (diagnostic)" in order and "| 0.470 " in order
