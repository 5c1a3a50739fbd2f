"""Tests for bench.data.synthetic and bench.data.inference: exact inference against brute-force enumeration, and the
sampler against the model.

The brute-force references below enumerate every (component, state path) and, for the masked floor, every unknown
word, in plain Python over lists; they share no code with the forward-backward implementation.
"""
import itertools
import math
import random
from dataclasses import replace

import pytest
import torch

from bench.data.inference import (component_posterior, hidden_state_posterior, kept_word_posterior,
                                  log_likelihood_from, masked_token_nll, next_state_posterior, next_token_nll,
                                  replaced_token_posterior, state_posteriors)
from bench.data.synthetic import Language, LanguageConfig, make_language, sample
from tests.helpers import (enumerated_posterior, enumerated_probability, joint_probability, language_lists,
                           path_probabilities)

# two topics; three categories (one closed, the agreeing open one, one setter) x two feature values: 6 states and 4
# words, small enough to enumerate every (topic, state path) of 4 positions and every unknown word at up to 4 of them
TINY = LanguageConfig(topics=2, categories=3, function=1, closed=1, features=2, setters=1, words=4, lexicon=2,
                      zipf=0.7, topic=0.5, successors=2, leak=0.1, seed=3)
TINY_STATES = TINY.categories * TINY.features
L = 4


@pytest.fixture(scope="module")
def tiny():
    language = make_language(TINY)
    words = sample(language, 6, L, seed=11).words
    # Also a few fixed sequences, including unlikely ones, so the checks do not ride on typical samples only.
    words = torch.cat([words, torch.tensor([[0, 0, 0, 0], [3, 2, 1, 0], [1, 3, 1, 3]])])
    return language, words


# ----------------------------------------------------------------------------------------------- brute force
# ----------------------------------------------------------------------------------------------- exact inference
def test_log_likelihood_matches_enumeration(tiny):
    language, words = tiny
    P = language_lists(language)
    expected = [math.log(enumerated_probability(P, w)) for w in words.tolist()]
    assert log_likelihood_from(language, words).tolist() == pytest.approx(expected, abs=1e-9)


def test_next_token_nll_matches_enumeration(tiny):
    language, words = tiny
    P = language_lists(language)
    got = next_token_nll(language, words)
    assert got.shape == (len(words), L - 1) and got.dtype == torch.float64
    for n, w in enumerate(words.tolist()):
        expected = [-math.log(enumerated_probability(P, w[: t + 2]) / enumerated_probability(P, w[: t + 1]))
                    for t in range(L - 1)]
        assert got[n].tolist() == pytest.approx(expected, abs=1e-9)


def test_posteriors_match_enumeration(tiny):
    language, words = tiny
    P = language_lists(language)
    K, S = TINY.topics, TINY_STATES
    smoothing, filtering = state_posteriors(language, words)
    components = component_posterior(language, words)
    assert smoothing.shape == filtering.shape == (len(words), L, K * S) and components.shape == (len(words), K)
    for n, w in enumerate(words.tolist()):
        joint = path_probabilities(P, w)
        total = sum(joint.values())
        for k in range(K):
            expected = sum(p for (c, _), p in joint.items() if c == k) / total
            assert components[n, k].item() == pytest.approx(expected, abs=1e-9)
        for t in range(L):
            prefix = path_probabilities(P, w[: t + 1])
            prefix_total = sum(prefix.values())
            for k, s in itertools.product(range(K), range(S)):
                smooth = sum(p for (c, path), p in joint.items() if c == k and path[t] == s) / total
                filt = sum(p for (c, path), p in prefix.items() if c == k and path[t] == s) / prefix_total
                assert smoothing[n, t, k * S + s].item() == pytest.approx(smooth, abs=1e-9)
                assert filtering[n, t, k * S + s].item() == pytest.approx(filt, abs=1e-9)


def _corrupt(words, rng, V):
    """Select 1-4 positions per sequence and mask, keep or randomly replace each. The outcomes are drawn evenly rather
    than at the process rates: the posterior is defined for any observation, and this exercises every branch."""
    observed, selected = [], []
    for w in words.tolist():
        chosen = set(rng.sample(range(len(w)), rng.randint(1, 4)))
        outcome = {i: rng.choice(("mask", "keep", "random")) for i in chosen}
        observed.append([-1 if outcome.get(i) == "mask" else rng.randrange(V) if outcome.get(i) == "random" else x
                         for i, x in enumerate(w)])
        selected.append([i in chosen for i in range(len(w))])
    return torch.tensor(observed), torch.tensor(selected)


@pytest.mark.parametrize("keep, rand, mask", [(0.1, 0.1, 0.8), (0.3, 0.5, 0.2), (0.5, 0.0, 0.5)])
def test_masked_token_nll_matches_enumeration(tiny, keep, rand, mask):
    language, words = tiny
    P = language_lists(language)
    V = TINY.words
    observed, selected = _corrupt(words, random.Random(0), V)
    if rand == 0:  # with no random replacements a visible selected word is the true one
        observed = torch.where(observed >= 0, words, observed)
    got = masked_token_nll(language, words, observed, selected, keep, rand, mask)
    assert got.shape == words.shape
    assert (got[~selected] == 0).all()

    def corruption(w, x):  # p(observed w | true word x) at a selected position: the corruption process itself
        return mask if w == -1 else keep * (w == x) + rand / V

    covered = set()
    for n, (w, obs, sel) in enumerate(zip(words.tolist(), observed.tolist(), selected.tolist())):
        chosen = [i for i in range(L) if sel[i]]
        covered.update("mask" if obs[i] == -1 else "kept" if obs[i] == w[i] else "random" for i in chosen)
        # Enumerate the unknown true words at the selected positions; the others are seen as they are.
        weights = enumerated_posterior(P, obs, chosen, V, lambda i, x, obs=obs: corruption(obs[i], x))
        total = sum(weights.values())
        for j, i in enumerate(chosen):
            expected = -math.log(sum(p for g, p in weights.items() if g[j] == w[i]) / total)
            assert got[n, i].item() == pytest.approx(expected, abs=1e-9)
    assert covered == {"mask", "kept", "random"} - ({"random"} if rand == 0 else set())  # every branch exercised


def test_masked_token_nll_rejects_bad_inputs(tiny):
    language, words = tiny
    selected = torch.zeros_like(words, dtype=torch.bool)
    observed = words.clone()
    observed[0, 0] = -1  # [MASK] at a position that was not selected
    with pytest.raises(ValueError, match="not selected"):
        masked_token_nll(language, words, observed, selected, 0.1, 0.1, 0.8)
    with pytest.raises(ValueError, match="sum to 1"):
        masked_token_nll(language, words, words, selected, 0.2, 0.2, 0.8)


@pytest.mark.slow
def test_long_sequences_stay_finite_and_consistent():
    # 2000 steps: an unscaled forward pass would underflow long before; the scaled one must stay exact.
    language = make_language(LanguageConfig(seed=1))
    words = sample(language, 3, 2000, seed=2).words
    nll = next_token_nll(language, words)
    smoothing, filtering = state_posteriors(language, words)
    assert torch.isfinite(nll).all() and torch.isfinite(smoothing).all() and torch.isfinite(filtering).all()
    assert torch.allclose(smoothing.sum(-1), torch.ones(3, 2000, dtype=torch.float64), atol=1e-9)
    assert torch.allclose(smoothing[:, -1], filtering[:, -1], atol=1e-12)  # same information at the last step
    # Chain rule: log p(x) = log p(x_0) + sum_t log p(x_{t+1} | x[..t]).
    first = (language.prior[:, None] * language.initial)[..., None].mul(language.emission).sum((0, 1))
    assert torch.allclose(log_likelihood_from(language, words), first[words[:, 0]].log() - nll.sum(1), rtol=1e-11)


# ----------------------------------------------------------------------------------------------- language & sampler
SMALL = LanguageConfig(topics=3, categories=6, function=2, closed=3, features=2, setters=1, words=40, lexicon=10,
                       seed=4)


@pytest.mark.parametrize("config", [LanguageConfig(), TINY, SMALL, LanguageConfig(topic=0.0, features=1, seed=5)])
def test_language_structure(config):
    """The generative story of make_language's docstring, checked on its tables."""
    language = make_language(config)
    K, C, Fv, V = config.topics, config.categories, config.features, config.words
    S = C * Fv
    assert language.prior.shape == (K,) and language.initial.shape == (K, S)
    assert language.transition.shape == (K, S, S) and language.emission.shape == (K, S, V)
    assert all(x.dtype == torch.float64 for x in (language.prior, language.initial, language.transition,
                                                   language.emission))
    for rows in (language.prior, language.initial, language.transition, language.emission):
        assert torch.allclose(rows.sum(-1), torch.ones((), dtype=torch.float64), atol=1e-12)
    assert language.category.tolist() == [s // Fv for s in range(S)]
    assert language.feature.tolist() == [s % Fv for s in range(S)]
    # Every transition and word keeps the leak's share, so no sequence is impossible under any topic.
    assert (language.transition >= config.leak / S * (1 - 1e-12)).all()
    assert (language.emission >= config.leak / V * (1 - 1e-12)).all()
    # The syntax is every topic's: topics shape word choice only.
    assert torch.equal(language.transition, language.transition[:1].expand(K, S, S))
    above = (language.transition[0] > config.leak / S * (1 + 1e-9)).view(C, Fv, C, Fv)
    setters = range(config.function + 1, config.function + 1 + config.setters)
    for target in range(C):
        entered = above[:, :, target, :]  # (from category, f, f')
        if target in setters:  # the feature is drawn afresh, uniformly
            rows = language.transition[0].view(C, Fv, C, Fv)[:, :, target, :]
            assert torch.allclose(rows, rows[..., :1].expand_as(rows))
        else:  # carried: f' = f wherever the syntax allows the step
            assert not (entered & ~torch.eye(Fv, dtype=torch.bool)).any()
    # The syntax has `successors` successors per category.
    syntax = above.any(1).any(-1)  # (from, to)
    assert (syntax.sum(-1) == config.successors).all()
    # The roles go to the frequent categories: within the closed and within the open ones, categories are numbered
    # by how often a long path visits them (counted on sampled paths, not from the syntax), so the agreeing one of
    # each kind and the setters are the most frequent of their kind.
    visits = torch.bincount(language.category[sample(language, 64, 256, seed=9).states % S].flatten(), minlength=C)
    for kind in (range(config.function), range(config.function, C)):
        counts = visits[list(kind)].double()
        rank_ok = counts[:-1] >= counts[1:] - 4 * (counts[:-1] + counts[1:]).sqrt()  # within sampling noise
        assert rank_ok.all(), (kind, counts.tolist())
    emitted = (language.emission > config.leak / V * (1 + 1e-9)).view(K, C, Fv, V)
    # Every word is some state's, and the closed classes hold the first words, `closed` per form.
    assert emitted.any(0).any(0).any(0).all()
    for c in range(config.function):
        words = emitted[:, c].any(0).any(0)
        forms = Fv if c == 0 else 1
        assert int(words.sum()) == config.closed * forms
        # the same in every topic; the agreeing one emits its feature's forms only
        assert torch.equal(emitted[:, c], emitted[:1, c].expand(K, Fv, V))
        assert (emitted[0, c].sum(-1) == config.closed).all()
        zipf = torch.arange(1, config.closed + 1, dtype=torch.float64) ** -config.zipf
        top = language.emission.view(K, C, Fv, V)[0, c, 0].sort(descending=True).values[:config.closed]
        assert torch.allclose(top, (1 - config.leak) * zipf / zipf.sum() + config.leak / V, atol=1e-12)
    # Open categories: `lexicon` words each (the agreeing one in Fv forms), the topic's own choice among them.
    for c in range(config.function, C):
        words = emitted[:, c].any(0).any(0)
        lemmas = config.lexicon // (Fv if c == config.function else 1)
        assert int(words.sum()) == lemmas * (Fv if c == config.function else 1)
        if config.topic > 0 and (emitted[0, c].sum(-1) > 1).all():  # a choice among words for the topic to shape
            assert not torch.equal(language.emission.view(K, C, Fv, V)[0, c], language.emission.view(K, C, Fv, V)[1, c])
        if c in setters:  # each word carries one feature: the feature's rows share no word
            assert (emitted[0, c].sum(0) <= 1).all()


def test_make_language_is_deterministic_in_seed():
    a, b, c = (make_language(LanguageConfig(seed=s)) for s in (5, 5, 6))
    for name in ("prior", "initial", "transition", "emission"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert not torch.equal(a.transition, c.transition) and not torch.equal(a.emission, c.emission)


def test_sample_is_deterministic_in_seed():
    language = make_language(TINY)
    a, b, c = sample(language, 50, 20, seed=1), sample(language, 50, 20, seed=1), sample(language, 50, 20, seed=2)
    assert torch.equal(a.words, b.words) and torch.equal(a.states, b.states)
    assert torch.equal(a.components, b.components)
    assert not torch.equal(a.words, c.words)
    assert a.words.shape == a.states.shape == (50, 20) and a.components.shape == (50,)
    assert a.words.dtype == a.states.dtype == a.components.dtype == torch.int64


def test_sample_matches_the_model():
    language = make_language(TINY)
    K, S, V = TINY.topics, TINY_STATES, TINY.words
    N = 40_000
    s = sample(language, N, 3, seed=7)
    assert (s.states // S == s.components[:, None]).all()  # global ids live inside the sequence's component
    assert s.words.min() >= 0 and s.words.max() < V

    def close(counts, probs):  # within 5 binomial standard errors
        n = counts.sum(-1, keepdim=True)
        freq = counts / n.clamp_min(1)
        return ((freq - probs).abs() <= 5 * (probs * (1 - probs) / n.clamp_min(1)).sqrt() + 1e-3).all()

    first_word = (language.prior[:, None, None] * language.initial[..., None] * language.emission).sum((0, 1))
    assert close(torch.bincount(s.words[:, 0], minlength=V).double(), first_word)
    assert close(torch.bincount(s.components, minlength=K).double(), language.prior)
    first_state = (language.prior[:, None] * language.initial).flatten()
    assert close(torch.bincount(s.states[:, 0], minlength=K * S).double(), first_state)
    # Transitions: empirical rows match, and a zero-probability transition is never taken.
    pairs = torch.bincount(s.states[:, :-1].flatten() * K * S + s.states[:, 1:].flatten(), minlength=(K * S) ** 2)
    pairs = pairs.view(K * S, K * S).double()
    block = torch.block_diag(*language.transition)
    assert (pairs[block == 0] == 0).all()
    assert close(pairs, block)
    emitted = torch.bincount(s.states.flatten() * V + s.words.flatten(), minlength=K * S * V).view(K * S, V)
    assert close(emitted.double(), language.emission.reshape(K * S, V))


def test_sample_never_draws_impossible_entries_even_if_rows_do_not_sum_to_one():
    # Rounding can leave a row's sum a hair below 1; the sampler must still never draw a zero-probability successor
    # nor run off the end of a row. Halving every row makes that failure mode frequent instead of rare.
    language = make_language(TINY)
    halved = Language(prior=language.prior / 2, initial=language.initial / 2, transition=language.transition / 2,
                      emission=language.emission / 2)
    s = sample(halved, 5000, 4, seed=0)
    S = TINY_STATES
    assert s.components.max() < TINY.topics and s.words.max() < TINY.words
    local = s.states % S
    steps = language.transition[s.components[:, None], local[:, :-1], local[:, 1:]]
    assert (steps > 0).all() and (s.states // S == s.components[:, None]).all()


def test_properties_on_sampled_data():
    config = replace(SMALL, seed=2)
    language = make_language(config)
    words = sample(language, 128, 48, seed=3).words
    nll = next_token_nll(language, words).mean().item()
    assert nll < math.log(config.words)
    # Cross-entropy >= entropy: any other model predicts the true language's samples worse.
    other = make_language(replace(SMALL, seed=9))
    assert nll < next_token_nll(other, words).mean().item()
    # ... including a context-free predictor (the average emission row).
    marginal = (language.emission * language.prior[:, None, None] / language.emission.shape[1]).sum((0, 1))
    assert nll < -marginal.log()[words[:, 1:]].mean().item()
    # the Bayes tagger's expected accuracy: the mean largest posterior, from the whole sequence or its left part
    smoothing, filtering = (posterior.amax(-1).mean().item() for posterior in state_posteriors(language, words))
    assert smoothing >= filtering > 1 / language.emission.shape[1] / config.topics
    assert 1 / config.topics < component_posterior(language, words).amax(-1).mean().item() <= 1


@pytest.mark.parametrize("field, value", [("topics", 0), ("categories", 0), ("words", -1), ("successors", 0),
                                          ("successors", 13), ("zipf", 0.0), ("zipf", float("nan")),
                                          ("features", 2.5), ("setters", -1), ("categories", 7), ("lexicon", 2),
                                          ("lexicon", 1445), ("topic", 1.5), ("topic", float("nan")), ("leak", 0.0),
                                          ("leak", 1.5)])
def test_bad_config_raises(field, value):
    with pytest.raises(ValueError, match=field):
        LanguageConfig(**{field: value})


def test_unigram_is_the_marginal_over_window_positions_by_enumeration():
    import itertools

    from bench.data.inference import log_likelihood_from, unigram
    from bench.data.synthetic import make_language
    language = make_language(replace(TINY, seed=5))
    length = 3
    sequences = torch.tensor(list(itertools.product(range(TINY.words), repeat=length)))
    probability = log_likelihood_from(language, sequences).exp()
    assert probability.sum().item() == pytest.approx(1.0)
    marginal = torch.zeros(TINY.words, dtype=torch.float64)
    for t in range(length):
        marginal.index_add_(0, sequences[:, t], probability)
    torch.testing.assert_close(unigram(language, length), marginal / length)


# ----------------------------------------------------------------------------------------------- the probes' questions
def _chosen(words, seed):
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.rand(words.shape, generator=generator) < 0.4
    chosen[:, 2] = True  # every row has one
    return chosen


def test_hidden_state_posterior_matches_enumeration(tiny):
    language, words = tiny
    P, (K, S) = language_lists(language), (TINY.topics, TINY_STATES)
    hidden = _chosen(words, 0)
    got = hidden_state_posterior(language, words, hidden)
    assert got.shape == (len(words), L, S)
    prior, initial, transition, emission = P
    for n, (w, h) in enumerate(zip(words.tolist(), hidden.tolist())):
        # a hidden word's emission sums to one over the words: it drops out of the joint
        joint = {}
        for k in range(K):
            for path in itertools.product(range(S), repeat=L):
                p = prior[k] * initial[k][path[0]]
                for t in range(L):
                    p *= transition[k][path[t - 1]][path[t]] if t else 1.0
                    p *= 1.0 if h[t] else emission[k][path[t]][w[t]]
                joint[(k, path)] = p
        total = sum(joint.values())
        for t in range(L):
            for s in range(S):
                expected = sum(p for (_, path), p in joint.items() if path[t] == s) / total
                assert got[n, t, s].item() == pytest.approx(expected, abs=1e-9)


def test_next_state_posterior_matches_enumeration(tiny):
    language, words = tiny
    P, (K, S) = language_lists(language), (TINY.topics, TINY_STATES)
    got = next_state_posterior(language, words)
    assert got.shape == (len(words), L, S)
    prior, initial, _, _ = P
    for s in range(S):  # nothing seen before the first position
        assert got[:, 0, s].tolist() == pytest.approx([sum(prior[k] * initial[k][s] for k in range(K))] * len(words))
    for n, w in enumerate(words.tolist()):
        for t in range(1, L):
            # p(s_t | x[..t-1]): the paths of length t + 1 with the word at t summed out
            joint = {(k, path): joint_probability(P, k, path[:t], w[:t]) * P[2][k][path[t - 1]][path[t]]
                     for k in range(K) for path in itertools.product(range(S), repeat=t + 1)}
            total = sum(joint.values())
            for s in range(S):
                expected = sum(p for (_, path), p in joint.items() if path[t] == s) / total
                assert got[n, t, s].item() == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("left_only", [False, True])
def test_kept_word_posterior_matches_enumeration(tiny, left_only):
    language, words = tiny
    P, (K, S, V) = language_lists(language), (TINY.topics, TINY_STATES, TINY.words)
    chosen = _chosen(words, 1)
    replacement = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    got = kept_word_posterior(language, words, chosen, replacement, left_only)
    prior, initial, transition, emission = P
    q = replacement.tolist()
    for n, (w, c) in enumerate(zip(words.tolist(), chosen.tolist())):
        for t in range(L):
            if not c[t]:
                assert got[n, t].item() == 0.0
                continue
            seen = t + 1 if left_only else L  # a causal reader sees the shown words up to t
            kept_total = total = 0.0
            for k in range(K):
                for path in itertools.product(range(S), repeat=seen):
                    chosen_here = [i for i in range(seen) if c[i]]
                    for pattern in itertools.product((True, False), repeat=len(chosen_here)):
                        kept = dict(zip(chosen_here, pattern))
                        p = prior[k] * initial[k][path[0]]
                        for i in range(seen):
                            p *= transition[k][path[i - 1]][path[i]] if i else 1.0
                            if i not in kept:
                                p *= emission[k][path[i]][w[i]]
                            elif kept[i]:  # kept: the original is the shown word
                                p *= 0.5 * emission[k][path[i]][w[i]]
                            else:  # replaced: any original, then the shown word drawn from q
                                p *= 0.5 * sum(emission[k][path[i]][x] for x in range(V)) * q[w[i]]
                        total += p
                        kept_total += p if kept[t] else 0.0
            assert got[n, t].item() == pytest.approx(kept_total / total, abs=1e-9)


def test_replaced_token_posterior_matches_enumeration(tiny):
    """ELECTRA's question, brute force: every component, state path, original word sequence and pattern of drawn
    positions of a 3-word window, each position's draw from its own distribution; a draw equal to the original is
    not replaced."""
    language, _ = tiny
    P, (K, S, V) = language_lists(language), (TINY.topics, TINY_STATES, TINY.words)
    prior, initial, transition, emission = P
    short, rho = 3, 0.3
    shown = torch.tensor([[0, 1, 2], [3, 3, 3], [2, 0, 1], [1, -1, 0]])  # -1: a special token the generator drew
    q = torch.softmax(torch.randn(len(shown), short, V, generator=torch.Generator().manual_seed(5),
                                  dtype=torch.float64), -1)
    got = replaced_token_posterior(language, shown, q, rho)
    assert got.shape == shown.shape
    q_lists = q.tolist()
    for n, f in enumerate(shown.tolist()):
        replaced, total = [0.0] * short, 0.0
        for k in range(K):
            for path in itertools.product(range(S), repeat=short):
                p_path = prior[k] * initial[k][path[0]] * math.prod(
                    transition[k][path[t - 1]][path[t]] for t in range(1, short))
                for drawn in itertools.product((False, True), repeat=short):
                    # an undrawn position shows its original, so only originals equal to the shown word have weight
                    # there: the terms left out are exactly 0
                    choices = [range(V) if drawn[t] else ([f[t]] if f[t] >= 0 else []) for t in range(short)]
                    for originals in itertools.product(*choices):
                        p = p_path
                        for t in range(short):
                            p *= emission[k][path[t]][originals[t]]
                            if drawn[t]:  # the shown word is the generator's draw, whatever the original
                                p *= rho * (q_lists[n][t][f[t]] if f[t] >= 0 else 1.0)
                            else:  # the shown word is the original
                                p *= 1 - rho
                        total += p
                        for t in range(short):
                            replaced[t] += p * (originals[t] != f[t])
        assert got[n].tolist() == pytest.approx([r / total for r in replaced], abs=1e-9)
    assert got[3, 1].item() == pytest.approx(1.0)  # no original is a special token
    assert replaced_token_posterior(language, shown.clamp_min(0), q, 0.0).abs().max().item() == 0.0


def test_the_masked_floor_is_float64_at_a_kept_word():
    # one state, so the floor at a selected, visible position is p(x | w shown) = e[x] (keep [x = w] + r / V) /
    # sum_y e[y] (keep [y = w] + r / V), in closed form; a float32 step once put it 2^-24 off (keep times a bool)
    emission = torch.tensor([[[0.3, 0.25, 0.2, 0.15, 0.1]]], dtype=torch.float64)
    one = torch.ones(1, 1, dtype=torch.float64)
    language = Language(prior=torch.ones(1, dtype=torch.float64), initial=one, transition=one[None], emission=emission)
    keep, rand, mask, V = 0.1, 0.1, 0.8, 5
    words = torch.tensor([[1]])
    got = masked_token_nll(language, words, words, torch.tensor([[True]]), keep, rand, mask)[0, 0].item()
    e = emission[0, 0].tolist()
    evidence = [e[y] * (keep * (y == 1) + rand / V) for y in range(V)]
    assert got == pytest.approx(-math.log(evidence[1] / sum(evidence)), abs=1e-15)
