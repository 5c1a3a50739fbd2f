"""Exact Bayes posteriors of the embedded pair tasks (synthetic:order, synthetic:same-source) and the likelihood from an
arbitrary time they rest on, against brute-force enumeration of the generative story.

The brute-force reference enumerates every (component, state path) of a whole window of T words, in plain Python over
lists; a word that is not shown (before a segment, or the window's last 3) is left out of the product, which sums it
out exactly since emission rows sum to one. It shares no code with the scaled forward recursions.
"""
import itertools
import math

import pytest
import torch

from bench.synthetic import (
    LanguageConfig,
    log_likelihood,
    log_likelihood_from,
    make_language,
    order_posterior,
    same_source_posterior,
    sample,
)
from objectives.pairs import SPECIAL_POSITIONS, cut_range

TINY = LanguageConfig(components=2, states=3, words=4, successors=2, zipf=0.7, support=2, genre=0.5, leak=0.1, seed=3)
WINDOW = 7  # T: C = 4 content words, cut at 1..3


@pytest.fixture(scope="module")
def tiny():
    return make_language(TINY)


def _lists(language):
    return (language.prior.tolist(), language.initial.tolist(), language.transition.tolist(),
            language.emission.tolist())


def _prob(P, seen):
    """p(the words of `seen` that are not None, at their positions) for a sequence of len(seen) words from time 0."""
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


def _story_order(P, x, y):
    """P(label 1 | shown x, y) for order, from the story: a window of T words from time 0 cut at h, then label 1
    shows (a, b), label 0 shows (b, a), each with prior 1/2."""
    C = len(x) + len(y)
    hidden_tail = [None] * SPECIAL_POSITIONS  # the window's last 3 words, never shown
    positive = 0.5 * _cut_prior(len(x), C) * _prob(P, x + y + hidden_tail)  # w = x ++ y, cut at len(x)
    negative = 0.5 * _cut_prior(len(y), C) * _prob(P, y + x + hidden_tail)  # w = y ++ x, cut at len(y), swapped
    return positive / (positive + negative)


def _story_same_source(P, x, y):
    """P(label 1 | shown x, y) for same-source: label 0 shows a = w[:h] beside w'[h:C] of another window w'."""
    C, T, h = len(x) + len(y), len(x) + len(y) + SPECIAL_POSITIONS, len(x)
    positive = 0.5 * _cut_prior(h, C) * _prob(P, x + y + [None] * SPECIAL_POSITIONS)
    negative = 0.5 * _cut_prior(h, C) * _prob(P, x + [None] * (T - h)) * _prob(P, [None] * h + y
                                                                               + [None] * SPECIAL_POSITIONS)
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
def test_order_posterior_matches_the_generative_story(tiny):
    P = _lists(tiny)
    content, cut = _shown(tiny, 5, seed=7)
    expected = [_story_order(P, c[:h], c[h:]) for c, h in zip(content.tolist(), cut.tolist())]
    assert order_posterior(tiny, content, cut).tolist() == pytest.approx(expected, abs=1e-9)


def test_same_source_posterior_matches_the_generative_story(tiny):
    P = _lists(tiny)
    content, cut = _shown(tiny, 5, seed=8)
    expected = [_story_same_source(P, c[:h], c[h:]) for c, h in zip(content.tolist(), cut.tolist())]
    assert same_source_posterior(tiny, content, cut).tolist() == pytest.approx(expected, abs=1e-9)


def test_posteriors_refuse_an_empty_segment(tiny):
    content = torch.zeros(2, 4, dtype=torch.long)
    for posterior in (order_posterior, same_source_posterior):
        with pytest.raises(ValueError, match="two non-empty segments"):
            posterior(tiny, content, torch.tensor([1, 4]))


# ----------------------------------------------------------------------------------------------- long sequences
def test_long_sequences_give_finite_likelihoods_and_posteriors():
    # 2000 steps: an unscaled recursion would underflow long before; the scaled one, masked, must stay exact.
    language = make_language(LanguageConfig(seed=1))
    words = sample(language, 3, 2000, seed=2).words
    later = log_likelihood_from(language, words, 1000)
    assert torch.isfinite(later).all() and (later < -1000).all()  # about 2 nats a word: far below float64's range
    masked = log_likelihood_from(language, words, 0, torch.tensor([1000, 1500, 2000]))
    for n, length in enumerate((1000, 1500, 2000)):
        assert masked[n].item() == pytest.approx(log_likelihood(language, words[n:n + 1, :length]).item(), rel=1e-12)
    cut = torch.tensor([500, 1000, 1500])
    order, same = order_posterior(language, words, cut), same_source_posterior(language, words, cut)
    for posterior in (order, same):
        assert torch.isfinite(posterior).all() and ((0 < posterior) & (posterior < 1)).all()
    # showing the segments the other way round swaps the hypotheses
    swapped = torch.stack([torch.cat([w[h:], w[:h]]) for w, h in zip(words, cut.tolist())])
    assert torch.allclose(order_posterior(language, swapped, 2000 - cut), 1 - order, atol=1e-9)
