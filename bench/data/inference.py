"""Exact inference in the embedded language (bench.data.synthetic): the Bayes floors of the objectives' losses, the
Bayes ceilings of the questions asked of it (hidden states, components, the pair tasks, the probes' questions) and
the Bayes reference of ELECTRA's discriminator.

Inference is float64 and exact, batched over sequences and components; the only Python loop is over time. Recursions
run in probability space with per-(component, sequence) rescaling at every step (Rabiner's scaled forward-backward):
each component's state distribution is renormalised to sum to one and the log of the normaliser is kept. Because the
scaling is per component, a component that becomes very unlikely never underflows to zero (the test runs 2000 steps),
and the mixture over components is only formed in log space (logsumexp). Internal layout is (L, K, N, S): time-major
so a step reads one contiguous slab, and component-major so a step is a single `bmm` against the (K, S, S) transitions.
"""
from __future__ import annotations

import torch
from torch import Tensor

from bench.data.synthetic import F64, Language


# Exact inference. `ev` (L, K, N, S) is the likelihood of what is seen at position t given (component, state); for
# plain text it is emission[k, s, x_t], and the masked-LM floor swaps in the corruption-aware likelihood.


def _check_words(words: Tensor, V: int, name: str = "words") -> None:
    if words.dim() != 2 or words.numel() == 0 or words.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must be a non-empty (N, L) integer tensor, got {tuple(words.shape)} {words.dtype}")
    if words.min() < 0 or words.max() >= V:
        raise ValueError(f"{name} must lie in [0, {V}), got range [{words.min()}, {words.max()}]")


def _emission_evidence(language: Language, words: Tensor) -> Tensor:
    """(L, K, N, S): emission[k, s, words[n, t]]."""
    _check_words(words, language.emission.shape[-1])
    return language.emission.transpose(1, 2)[:, words.T.long()].permute(1, 0, 2, 3).contiguous()


def _forward(language: Language, ev: Tensor, start: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """alpha (L, K, N, S) = p(s_t | evidence[..t], k); log_z (L, K, N) = log p(evidence_t | evidence[..t-1], k).
    `start` (K, N, S) is the state distribution of the first position, per component and sequence (default: the
    initial distribution, i.e. the evidence starts at time 0)."""
    L, K, N, S = ev.shape
    alpha, log_z = torch.empty_like(ev), ev.new_empty(L, K, N)
    predicted = language.initial[:, None, :].expand(K, N, S) if start is None else start
    for t in range(L):
        joint = predicted * ev[t]
        z = joint.sum(-1, keepdim=True)
        alpha[t] = joint / z
        log_z[t] = z.squeeze(-1).log()
        if t + 1 < L:
            predicted = torch.bmm(alpha[t], language.transition)
    return alpha, log_z


def _backward(language: Language, ev: Tensor, log_z: Tensor) -> Tensor:
    """beta (L, K, N, S), scaled by the forward normalisers, so that alpha * beta = p(s_t | all evidence, k)."""
    beta = torch.empty_like(ev)
    beta[-1] = 1.0
    z = log_z.exp()[..., None]
    transition_t = language.transition.transpose(1, 2)
    for t in range(ev.shape[0] - 2, -1, -1):
        beta[t] = torch.bmm(ev[t + 1] * beta[t + 1], transition_t) / z[t + 1]
    return beta


def _log_component_filter(language: Language, log_z: Tensor) -> Tensor:
    """(L, K, N): log p(k | evidence[..t]), the component posterior updated online."""
    return torch.log_softmax(language.prior.log()[None, :, None] + log_z.cumsum(0), dim=1)


def _posterior(language: Language, ev: Tensor) -> Tensor:
    """(L, K, N, S): p(component k, state s_t | all the evidence)."""
    alpha, log_z = _forward(language, ev)
    beta = _backward(language, ev, log_z)
    return _log_component_filter(language, log_z)[-1].exp()[None, :, :, None] * alpha * beta


def _to_global(x: Tensor) -> Tensor:
    """(L, K, N, S) -> (N, L, K * S), global state id = k * S + s."""
    L, K, N, S = x.shape
    return x.permute(2, 0, 1, 3).reshape(N, L, K * S)


def state_marginals(language: Language, steps: int) -> Tensor:
    """(steps + 1, K, S): p(s_t = s | k) for t = 0..steps, each component's chain run forward from its initial
    distribution with nothing observed (initial @ transition^t)."""
    marginals = [language.initial]
    for _ in range(steps):
        marginals.append(torch.bmm(marginals[-1][:, None, :], language.transition).squeeze(1))
    return torch.stack(marginals)


def log_likelihood_from(language: Language, words: Tensor, start: Tensor | int = 0,
                        lengths: Tensor | int | None = None) -> Tensor:
    """(N,): log p(the words seen at times start_n .. start_n + lengths_n − 1 of a fresh sequence) under the mixture.

    Row n holds its lengths_n words first; what follows is padding (any valid ids), ignored. The words before
    `start` and after the last are unseen and summed out: each component's state at time `start` is distributed as
    initial @ transition^start, and the component is drawn from the prior. start = 0 with full lengths is
    log_likelihood. Rows may differ in start and length: the padding's forward normalisers are masked out of the sum
    (the recursion is causal, so it never changes the ones before it)."""
    _check_words(words, language.emission.shape[-1])
    N, L = words.shape
    start = torch.as_tensor(start, dtype=torch.int64).expand(N)
    lengths = torch.as_tensor(L if lengths is None else lengths, dtype=torch.int64).expand(N)
    if start.min() < 0 or lengths.min() < 0 or lengths.max() > L:
        raise ValueError(f"need start >= 0 and 0 <= lengths <= {L}, got start range [{start.min()}, {start.max()}] "
                         f"and lengths range [{lengths.min()}, {lengths.max()}]")
    first_state = state_marginals(language, int(start.max()))[start].transpose(0, 1)  # (K, N, S)
    _, log_z = _forward(language, _emission_evidence(language, words), first_state.contiguous())
    seen = torch.arange(L)[:, None] < lengths[None, :]  # (L, N)
    log_z = torch.where(seen[:, None, :], log_z, 0.0)
    return torch.logsumexp(language.prior.log()[:, None] + log_z.sum(0), dim=0)


# The embedded pair tasks (objectives.pairs, bench.yardsticks.embedded_tasks synthetic:order and same-source). A window
# w of T words is sampled from time `start` of a fresh sequence (0 for a window that opens a sequence); its first
# C = T − 3 words are cut at h, uniform over a range symmetric under h -> C − h, into a = w[:h] and b = w[h:C]; the pair
# is shown as x then y, label 1 ("is next") being (x, y) = (a, b), with prior 1/2. What is shown is the C words in their
# shown order, `content` = x ++ y, and `first_length` = len(x). The last 3 words of the window are never shown and sum
# out of every likelihood below; the cut's prior is the same under both labels (for order by its symmetry), so it
# cancels too.


def _check_pairs(content: Tensor, first_length: Tensor) -> None:
    if first_length.shape != content.shape[:1]:
        raise ValueError(f"first_length must be ({content.shape[0]},), got {tuple(first_length.shape)}")
    if first_length.min() < 1 or first_length.max() >= content.shape[1]:
        raise ValueError(f"first_length must lie in [1, {content.shape[1] - 1}] (two non-empty segments), got range "
                         f"[{first_length.min()}, {first_length.max()}]")


def order_posterior(language: Language, content: Tensor, first_length: Tensor, start: int = 0) -> Tensor:
    """(N,): P(label 1 | x, y) for sentence-order prediction, where label 0 shows the window's segments swapped:
    the hypotheses are "x ++ y are the words from time `start`" (cut at len(x)) and "y ++ x are" (cut at
    C − len(x)), so P = p(x ++ y) / (p(x ++ y) + p(y ++ x))."""
    _check_pairs(content, first_length)
    N, C = content.shape
    swapped = content.gather(1, (torch.arange(C) + first_length[:, None]) % C)  # y ++ x
    both = log_likelihood_from(language, torch.cat([content, swapped]), start)
    return torch.sigmoid(both[:N] - both[N:])


def same_source_posterior(language: Language, content: Tensor, first_length: Tensor, start: int = 0) -> Tensor:
    """(N,): P(label 1 | x, y) for next-sentence prediction, where label 0 takes y from the same positions h..C−1 of
    another, independent window (its component drawn afresh): P = p(x ++ y) / (p(x ++ y) + p(x) q_h(y)), with q_h(y)
    the likelihood of y as the words at times start + h .. start + C − 1 of a fresh sequence."""
    _check_pairs(content, first_length)
    N, C = content.shape
    joint = log_likelihood_from(language, content, start)
    first = log_likelihood_from(language, content, start, first_length)
    second_words = content.gather(1, (torch.arange(C) + first_length[:, None]).clamp_max(C - 1))  # y, then padding
    second = log_likelihood_from(language, second_words, start + first_length, C - first_length)
    return torch.sigmoid(joint - first - second)


def binary_ceiling(posterior: Tensor) -> float:
    """The Bayes classifier answers the likelier label and is right with probability max(P, 1 − P): its expected
    accuracy on these examples is the mean of that (lower variance than counting its hits)."""
    return torch.maximum(posterior, 1 - posterior).mean().item()


def unigram(language: Language, length: int) -> Tensor:
    """(V,) the marginal word distribution over the positions of a window of `length` words: the best prediction that
    ignores all context, whose loss (the "unigram loss") is where a model starts from. Exact: the state marginals
    are propagated through each component's transitions."""
    state = language.initial  # (K, S) p(s_t | component)
    total = torch.zeros(language.emission.shape[-1], dtype=F64)
    # elementwise products and sums, no matrix product: a probe that draws from it spends no FLOPs a counter sees
    for _ in range(length):
        total += (language.prior[:, None, None] * state[..., None] * language.emission).sum((0, 1))
        state = (state[..., None] * language.transition).sum(1)
    return total / length


def next_token_nll(language: Language, words: Tensor) -> Tensor:
    """(N, L-1): -log p(x[t+1] | x[..t]) for t = 0..L-2, exactly the positions a causal LM over an L-token window is
    scored on. The Bayes-optimal next-token loss is its mean."""
    _, log_z = _forward(language, _emission_evidence(language, words))
    log_comp = _log_component_filter(language, log_z)
    # p(x[t+1] | x[..t]) = sum_k p(k | x[..t]) p(x[t+1] | x[..t], k)
    return -torch.logsumexp(log_comp[:-1] + log_z[1:], dim=1).T.contiguous()


def masked_token_nll(
    language: Language,
    words: Tensor,
    observed: Tensor,
    selected: Tensor,
    keep_prob: float,
    random_prob: float,
    mask_prob: float,
) -> Tensor:
    """(N, L): -log p(x_i = words_i | all evidence of the sequence) at selected positions, 0 elsewhere.

    BERT-style corruption: `selected` (N, L) marks the positions chosen for the loss; each is replaced by [MASK]
    (`observed == -1`) with `mask_prob`, by a word drawn uniformly from the V words with `random_prob` (it may equal
    the original), or kept with `keep_prob`. `observed` holds the corrupted ids the model sees.

    This predictor also knows *which* positions were selected (a model does not: a kept word looks like any other).
    Conditioning on more information can only lower the expected loss, so (with `observed` drawn by the corruption
    process) its mean is a valid lower bound on the expected masked-LM loss of any model that sees `observed` alone:
    the floor, not necessarily a tight one.
    """
    V = language.emission.shape[-1]
    probs = (keep_prob, random_prob, mask_prob)
    if min(probs) < 0 or abs(sum(probs) - 1.0) > 1e-9:
        raise ValueError(f"keep_prob, random_prob, mask_prob must be >= 0 and sum to 1, got {probs}")
    if not words.shape == observed.shape == selected.shape:
        raise ValueError(f"words, observed, selected must share a shape, got {words.shape}, {observed.shape}, "
                         f"{selected.shape}")
    _check_words(observed.clamp_min(0), V, "observed")
    selected, visible = selected.bool(), observed >= 0
    if (~selected & ~visible).any():
        raise ValueError("observed is -1 ([MASK]) at a position that is not selected")
    if (selected & visible).any() and keep_prob + random_prob == 0:
        raise ValueError("a selected position is visible although mask_prob == 1")
    norm = keep_prob + random_prob or 1.0

    emit_obs = _emission_evidence(language, observed.clamp_min(0))
    emit_true = _emission_evidence(language, words)
    # Evidence per position. Not selected: the word is seen as is. Selected and [MASK]: p([MASK] | x) = mask_prob for
    # every x, i.e. no evidence. Selected and visible w: p(w | x, not [MASK]) = (keep [w == x] + random / V) / norm;
    # summed against the emission row that is (keep emission[w] + random / V) / norm.
    sel, vis = selected.T[:, None, :, None], visible.T[:, None, :, None]
    ev = torch.where(sel, torch.where(vis, (keep_prob * emit_obs + random_prob / V) / norm, 1.0), emit_obs)
    posterior = _posterior(language, ev)  # p(k, s_i | all evidence)
    # Given s_i, x_i is independent of the rest of the sequence, so
    # p(x_i | evidence) = sum_{k,s} p(k, s_i = s | evidence) * emission[k, s, x_i] lik_i(x_i) / ev_i[k, s].
    # float64 throughout: a bool times a float would be float32, 2^-24 off the exact likelihood
    lik = torch.where(visible, (keep_prob * (observed == words).to(F64) + random_prob / V) / norm, 1.0)
    p = (posterior * emit_true / ev).sum(-1).sum(1) * lik.T  # (L, N)
    return torch.where(selected, -p.T.log(), 0.0)


def state_posteriors(language: Language, words: Tensor) -> tuple[Tensor, Tensor]:
    """(smoothing, filtering), each (N, L, K*S): p(global state at t | x[..L-1]) and p(global state at t | x[..t])."""
    ev = _emission_evidence(language, words)
    alpha, log_z = _forward(language, ev)
    beta = _backward(language, ev, log_z)
    comp = _log_component_filter(language, log_z).exp()[..., None]  # (L, K, N, 1)
    return _to_global(comp[-1:] * alpha * beta), _to_global(comp * alpha)


def component_posterior(language: Language, words: Tensor) -> Tensor:
    """(N, K): p(component | x[..L-1])."""
    _, log_z = _forward(language, _emission_evidence(language, words))
    return _log_component_filter(language, log_z)[-1].exp().T.contiguous()


# The probes' questions (bench.yardsticks.probes): what a position's context says about it, with its own word hidden or
# perhaps replaced. A reader that sees the whole window (bidirectional) conditions on every word it is shown; a causal
# reader on the words before the position (and, for the replaced word, the position's own word).


def hidden_state_posterior(language: Language, words: Tensor, hidden: Tensor) -> Tensor:
    """(N, L, S): p(state s_t | the words at every position that is not `hidden`), the component summed out: at a
    hidden position, what its context alone says of its state. `hidden` (N, L) bool."""
    ev = _emission_evidence(language, words)
    if hidden.shape != words.shape:
        raise ValueError(f"hidden must be {tuple(words.shape)}, got {tuple(hidden.shape)}")
    ev = torch.where(hidden.T[:, None, :, None], 1.0, ev)  # a hidden word is no evidence: every state emits "hidden"
    return _posterior(language, ev).sum(1).permute(1, 0, 2).contiguous()


def next_state_posterior(language: Language, words: Tensor) -> Tensor:
    """(N, L, S): p(state s_t | x[..t-1]), the component summed out: what the words before a position say of its
    state (row 0: the initial distribution, nothing seen). What a causal reader at t − 1 can know of position t."""
    alpha, log_z = _forward(language, _emission_evidence(language, words))
    component = _log_component_filter(language, log_z).exp()  # (L, K, N): p(k | x[..t])
    ahead = torch.einsum("lkn,lkns,kst->lnt", component[:-1], alpha[:-1], language.transition)
    N = words.shape[0]
    first = torch.einsum("k,ks->s", language.prior, language.initial).expand(N, 1, -1)
    return torch.cat([first, ahead.transpose(0, 1)], dim=1).contiguous()


def kept_word_posterior(language: Language, shown: Tensor, chosen: Tensor, replacement: Tensor,
                        left_only: bool) -> Tensor:
    """(N, L): P(the word shown at t is the original | what a reader sees), at the `chosen` positions (N, L) bool,
    each of which independently kept its word or, with probability 1/2, had it replaced by a draw from
    `replacement` (V,) (which may draw the original back: it is still "replaced"). `left_only`: a causal reader,
    which sees the shown words up to and including t; otherwise every shown word. 0 elsewhere.

    A chosen position's evidence is p(shown w | s) = ½ emission[s, w] + ½ q(w); given the state posterior from all
    the evidence, P(kept) = Σ p(k, s_t | evidence) · ½ emission[k, s, w] / evidence[k, s]."""
    V = language.emission.shape[-1]
    if chosen.shape != shown.shape or replacement.shape != (V,):
        raise ValueError(f"chosen must be {tuple(shown.shape)} and replacement ({V},), got {tuple(chosen.shape)} and "
                         f"{tuple(replacement.shape)}")
    emitted = _emission_evidence(language, shown)  # (L, K, N, S): emission[k, s, shown]
    drawn = replacement.to(F64)[shown.T][:, None, :, None]  # (L, 1, N, 1): q(shown)
    ev = torch.where(chosen.T[:, None, :, None], 0.5 * emitted + 0.5 * drawn, emitted)
    if left_only:
        alpha, log_z = _forward(language, ev)
        posterior = _log_component_filter(language, log_z).exp()[..., None] * alpha
    else:
        posterior = _posterior(language, ev)
    kept = (posterior * 0.5 * emitted / ev).sum((1, 3)).T  # (N, L)
    return torch.where(chosen, kept, 0.0)


def replaced_token_posterior(language: Language, shown: Tensor, replacement: Tensor, resample: float) -> Tensor:
    """(N, L): P(the word shown at t is not the original | every shown word), ELECTRA's discriminator question, for
    a corruption that at each position independently, with probability `resample`, replaced the original by a draw
    from `replacement` (N, L, V), the generator's distribution at that position; a draw equal to the original leaves
    it original, as ELECTRA labels it. The discriminator does not know which positions were drawn, so every
    position's evidence mixes both stories: p(shown w | s) = (1 − ρ) emission[s, w] + ρ q_t(w), of which the part
    "drawn, and not the original" is ρ q_t(w) (1 − emission[s, w]). Given the state posterior from all the evidence,
    P(replaced) = Σ p(k, s_t | evidence) · ρ q_t(w) (1 − emission[k, s, w]) / evidence[k, s]. Exact under this
    story; `shown` may hold -1 for a draw outside the language's words (a special token), which is replaced."""
    V = language.emission.shape[-1]
    if replacement.shape != (*shown.shape, V):
        raise ValueError(f"replacement must be {(*shown.shape, V)}, got {tuple(replacement.shape)}")
    if not 0 <= resample <= 1:
        raise ValueError(f"resample must lie in [0, 1], got {resample}")
    outside = shown < 0
    words = shown.clamp_min(0)
    emitted = torch.where(outside.T[:, None, :, None], 0.0, _emission_evidence(language, words))  # (L, K, N, S)
    drawn = replacement.to(F64).gather(-1, words[..., None]).squeeze(-1)  # (N, L): q_t(shown)
    drawn = torch.where(outside, 1.0, drawn).T[:, None, :, None]  # an outside word can only have been drawn
    ev = (1 - resample) * emitted + resample * drawn
    replaced = (_posterior(language, ev) * resample * drawn * (1 - emitted) / ev).sum((1, 3)).T  # (N, L)
    return replaced.clamp(0.0, 1.0)
