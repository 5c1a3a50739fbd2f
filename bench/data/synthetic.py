"""The embedded synthetic language: a seeded mixture of hidden Markov models, and its sampler. Its exact inference is
bench.data.inference.

Because the generating distribution is known, exact inference gives the suite's "physical limits": the Bayes-optimal
next-token and masked-token losses, and the best achievable accuracy for tagging each position's hidden state (from the
whole sequence or from the left context only), for classifying a sequence's component ("genre"), and for the two
sentence-pair tasks made from its windows (order and same-source).

Words are integer ids in [0, V); the caller maps them onto model token ids (no special tokens here).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
from torch import Tensor

F64 = torch.float64


@dataclass(frozen=True)
class LanguageConfig:
    """A language with structure at three distances (docs/language.md): the syntax of word categories (local), the
    agreement of a lexical feature between distant words (phrase level), and a topic that shapes the choice of
    content words (the whole window)."""

    topics: int = 8  # K, the mixture's components: one topic per window, uniform prior
    categories: int = 12  # word categories, the syntax's states
    function: int = 5  # of which closed-class (function-word) categories, each with `closed` words
    closed: int = 8  # words of a closed-class category (per form, for the agreeing one)
    features: int = 3  # values of the agreement feature ("gender"); the hidden state is (category, feature)
    setters: int = 2  # open categories whose words carry a lexical feature: entering one draws the feature anew
    words: int = 1000  # V
    lexicon: int = 300  # words of an open-class category, drawn from the shared open pool (so words are ambiguous)
    zipf: float = 1.1  # Zipf exponent of every category's word distribution
    topic: float = 1.0  # share of an open category's word distribution that ranks its words the topic's own way
    successors: int = 2  # nonzero successors of each category in the syntax
    leak: float = 0.01  # share of each transition and emission row spread uniformly over all states / words
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("topics", "categories", "function", "closed", "features", "words", "lexicon", "successors"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LanguageConfig.{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.setters, bool) or not isinstance(self.setters, int) or self.setters < 0:
            raise ValueError(f"LanguageConfig.setters must be an integer >= 0, got {self.setters!r}")
        if self.successors > self.categories:
            raise ValueError(f"LanguageConfig.successors ({self.successors}) must be <= categories "
                             f"({self.categories})")
        if self.function + 1 + self.setters > self.categories:
            raise ValueError(f"LanguageConfig: categories ({self.categories}) must hold the {self.function} closed "
                             f"ones, the agreeing open one and the {self.setters} setters")
        if self.lexicon < self.features:
            raise ValueError(f"LanguageConfig.lexicon ({self.lexicon}) must be >= features ({self.features})")
        if self.lexicon > self.words - closed_words(self):
            raise ValueError(f"LanguageConfig.lexicon ({self.lexicon}) must be <= the open pool, words minus the "
                             f"closed-class words ({self.words - closed_words(self)})")
        if not self.zipf > 0:  # written this way so NaN is rejected too
            raise ValueError(f"LanguageConfig.zipf must be > 0, got {self.zipf!r}")
        if not 0 <= self.topic <= 1:
            raise ValueError(f"LanguageConfig.topic must be in [0, 1], got {self.topic!r}")
        # leak > 0 keeps every state path and every word possible in every topic: exact inference divides by
        # likelihoods (the scaled recursions by p(x_t | ...), the masked-token floor by the emission evidence), and
        # an impossible sequence or kept word would make that 0 / 0.
        if not 0 < self.leak <= 1:
            raise ValueError(f"LanguageConfig.leak must be in (0, 1], got {self.leak!r}")


def closed_words(config: LanguageConfig) -> int:
    """The closed-class words: `closed` per function category, `features` forms of each for the agreeing one."""
    return config.closed * (config.function - 1 + config.features)


# eq=False: dataclass equality would compare tensors elementwise and fail on `bool(...)`.
@dataclass(frozen=True, eq=False)
class Language:
    """The true distribution, float64 tensors: a mixture of K hidden Markov models over S states and V words. Each
    state is a (category, feature) pair; `category` and `feature` (S,) say which (a language made by hand, as the
    tests make, may leave them out: every state its own category, one feature value)."""

    prior: Tensor  # (K,)      component probabilities
    initial: Tensor  # (K, S)    initial state distribution per component
    transition: Tensor  # (K, S, S) rows sum to 1
    emission: Tensor  # (K, S, V) rows sum to 1
    category: Tensor | None = None  # (S,) int64
    feature: Tensor | None = None  # (S,) int64

    def __post_init__(self) -> None:
        S = self.emission.shape[1]
        if self.category is None:
            object.__setattr__(self, "category", torch.arange(S))
        if self.feature is None:
            object.__setattr__(self, "feature", torch.zeros(S, dtype=torch.int64))


def make_language(config: LanguageConfig) -> Language:
    """Draw a language; deterministic in `config.seed`. The generative story of a window:

    1. a topic k, uniformly;
    2. a path of hidden states (category c_t, feature f_t): the categories follow a sparse syntax (`successors`
       nonzero successors each, Dirichlet(1) weights, shared by every topic); the feature is drawn uniformly when the
       path enters a *setter* category and carried unchanged otherwise, so it links a setter's word to every later
       word until the next setter;
    3. a word per position from the state's distribution, Zipf(`zipf`) over its category's words:
       - a closed category (function words) emits its `closed` words the same way in every topic; the first of them
         is *agreeing*: it has one form per feature value and emits the form of the current feature;
       - an open category emits `lexicon` words drawn from one shared open pool (a word belongs to several
         categories: context must tell which), ranked by a mixture of one ranking shared by all topics and the
         topic's own (`topic` sets the mixture): the topic shapes word choice, not syntax;
       - the first open category is agreeing too (its lemmas have one form per feature value); each setter's word
         carries a lexical feature (a noun's gender: a setter's words split evenly into the values), so a setter at
         feature f emits only its words of feature f.
    Every row gets `leak` spread uniformly, so every word sequence is possible under every topic, if improbable
    (exact inference needs that)."""
    K, C, Fv, V = config.topics, config.categories, config.features, config.words
    S = C * Fv
    g = torch.Generator().manual_seed(config.seed)
    agreeing, setters = {0, config.function}, range(config.function + 1, config.function + 1 + config.setters)

    def zipf(n: int) -> Tensor:
        weights = torch.arange(1, n + 1, dtype=F64) ** -config.zipf
        return weights / weights.sum()

    # the syntax: each category picks `successors` distinct successors (first columns of a random permutation),
    # with Dirichlet(1) weights (normalised Exponential(1) draws, floored so that none is 0)
    successors = torch.rand(C, C, generator=g).argsort(-1)[:, :config.successors]
    weights = (-torch.log1p(-torch.rand(C, config.successors, generator=g, dtype=F64))).clamp_min(1e-12)
    syntax = torch.zeros(C, C, dtype=F64).scatter_(-1, successors, weights / weights.sum(-1, keepdim=True))
    # the roles go to the frequent categories, as in real text, where the words that mark agreement (articles,
    # inflected auxiliaries) are among the most frequent: categories renumbered, within the closed and within the
    # open ones, by how often the syntax visits them, so that the agreeing ones (the first of each) and the setters
    # (the next open ones) are the most frequent of their kind. A sparse syntax visits some categories rarely, and
    # agreement carried by those would be a few words in a thousand: nothing an objective learns at a small budget.
    visits = torch.full((C,), 1.0 / C, dtype=F64)
    for _ in range(200):
        visits = visits @ ((1 - config.leak) * syntax + config.leak / C)
    order = torch.cat([torch.argsort(-visits[:config.function], stable=True),
                       config.function + torch.argsort(-visits[config.function:], stable=True)])
    syntax = syntax[order][:, order]
    carried = torch.eye(Fv, dtype=F64).expand(C, Fv, Fv).clone()  # (next category, f, f'): f' = f ...
    carried[list(setters)] = 1.0 / Fv  # ... except into a setter, which draws f' afresh
    transition = torch.einsum("ab,bfg->afbg", syntax, carried).reshape(S, S)
    transition = (1 - config.leak) * transition + config.leak / S
    initial = torch.full((S,), 1.0 / S, dtype=F64)

    emission = torch.zeros(K, C, Fv, V, dtype=F64)
    first = 0
    for c in range(config.function):  # closed classes: ids 0 .. closed_words - 1
        forms = Fv if c in agreeing else 1
        ids = torch.arange(first, first + config.closed * forms).reshape(config.closed, forms)
        first += config.closed * forms
        for f in range(Fv):
            emission[:, c, f, ids[:, f % forms]] = zipf(config.closed)
    pool = torch.arange(first, V)  # the open pool, shared by every open category
    uses = torch.zeros(len(pool))  # how many open categories hold each pool word so far
    for c in range(config.function, C):
        forms = Fv if c in agreeing else 1
        lemmas = config.lexicon // forms
        # the least used words first, ties in random order: every pool word belongs to some category, and the
        # categories share words evenly (a word of two categories is ambiguous)
        least_used = torch.argsort(uses + torch.rand(len(pool), generator=g) * 0.5)[:lemmas * forms]
        uses[least_used] += 1
        ids = pool[least_used[torch.randperm(len(least_used), generator=g)]].reshape(lemmas, forms)
        # a setter's words split evenly into the feature values (their order is random): every value has words, and
        # a word two setters share may carry a different value in each (a homograph)
        gender = torch.arange(lemmas) % Fv
        shared = torch.zeros(lemmas, dtype=F64).index_put_((torch.randperm(lemmas, generator=g),), zipf(lemmas))
        for k in range(K):
            own = torch.zeros(lemmas, dtype=F64).index_put_((torch.randperm(lemmas, generator=g),), zipf(lemmas))
            lemma = (1 - config.topic) * shared + config.topic * own
            for f in range(Fv):
                if c in setters:  # the words of gender f, their shares renormalised
                    of_f = torch.where(gender == f, lemma, 0.0)
                    emission[k, c, f].index_put_((ids[:, 0],), of_f / of_f.sum(), accumulate=True)
                else:
                    emission[k, c, f].index_put_((ids[:, f % forms],), lemma, accumulate=True)
    emission = emission.reshape(K, S, V)
    emission = (1 - config.leak) * emission + config.leak / V
    return Language(prior=torch.full((K,), 1.0 / K, dtype=F64), initial=initial.expand(K, S).contiguous(),
                    transition=transition.expand(K, S, S).contiguous(), emission=emission.contiguous(),
                    category=torch.arange(S) // Fv, feature=torch.arange(S) % Fv)


@dataclass(frozen=True, eq=False)
class Sample:
    words: Tensor  # (N, L) int64
    states: Tensor  # (N, L) int64, GLOBAL hidden state id = component * S + state
    components: Tensor  # (N,) int64


def _cdf(p: Tensor) -> Tensor:
    # Dividing by the last cumulative value makes every entry from the last nonzero one on exactly 1.0, so an
    # inverse-CDF draw with u < 1 can never land on a zero-probability entry (sparse transitions).
    c = p.cumsum(-1)
    return c / c[..., -1:]


def _draw(cdf_rows: Tensor, u: Tensor) -> Tensor:
    """One categorical draw per row: the first index whose cumulative probability exceeds u."""
    return torch.searchsorted(cdf_rows, u[:, None], right=True).squeeze(-1)


def sample(language: Language, num_sequences: int, length: int, seed: int) -> Sample:
    """Draw `num_sequences` sequences of `length` words; vectorised over sequences, deterministic in `seed`."""
    if num_sequences < 1 or length < 1:
        raise ValueError(f"need num_sequences >= 1 and length >= 1, got {num_sequences} and {length}")
    K, S, _ = language.emission.shape
    N, L = num_sequences, length
    g = torch.Generator().manual_seed(seed)
    u_comp = torch.rand(N, generator=g, dtype=F64)
    u_state, u_word = torch.rand(2, L, N, generator=g, dtype=F64)
    cdf_initial, cdf_transition = _cdf(language.initial), _cdf(language.transition)
    cdf_emission = _cdf(language.emission)

    comps = _draw(_cdf(language.prior).expand(N, K).contiguous(), u_comp)
    words = torch.empty(L, N, dtype=torch.int64)
    states = torch.empty(L, N, dtype=torch.int64)
    state = _draw(cdf_initial[comps], u_state[0])
    for t in range(L):
        if t:
            state = _draw(cdf_transition[comps, state], u_state[t])
        states[t] = state
        words[t] = _draw(cdf_emission[comps, state], u_word[t])
    return Sample(words=words.T.contiguous(), states=(comps[:, None] * S + states.T).contiguous(), components=comps)


def digest(language: Language) -> str:
    """A fingerprint of the language's tables and of a few windows its sampler draws: what a cache of sampled corpora
    must be keyed on, since the same options give other windows once make_language or sample changes."""
    hashed = hashlib.sha256()
    for table in (language.prior, language.initial, language.transition, language.emission,
                  sample(language, 4, 16, seed=0).words):
        hashed.update(table.contiguous().numpy().tobytes())
    return hashed.hexdigest()[:16]
