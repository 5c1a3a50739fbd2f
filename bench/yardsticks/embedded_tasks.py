"""The embedded language's own labelled tasks, sampled afresh from the true distribution, each with the Bayes ceiling of
each kind of reader and what the input alone gives:

- states: the word category of each position whose word alone does not settle it, every word shown (no [MASK]): the
  local syntax;
- agreement: the agreement feature of each position whose word alone does not show it: which value the last setter
  word carried, and the agreeing words around it show (phrase-level structure);
- topic: the window's topic (the whole window);
- order: whether two halves of a window are in their order (made as mlm:pair=sop makes its pairs);
- same-source: whether the second half continues the first (made as mlm:pair=nsp makes its pairs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from backbone import ConfigError
from bench.common.seeds import derive_seed
from bench.data import inference, synthetic
from bench.yardsticks import readout
from bench.yardsticks.examples import Split, Task, TaskContext, TaskOptions, encode, encode_tagged
from objectives import IGNORE, Vocab
from objectives.pairs import EMBEDDED_TASK_OF, make_pairs, pair_layout

SYNTHETIC_TASKS = ("states", "agreement", "topic", "order", "same-source")
TAGGING = ("states", "agreement")  # token-level tasks, each a label of the hidden state
PAIR_TASK_OF = {task: pair for pair, task in EMBEDDED_TASK_OF.items()}  # the pair mode each pair task asks about
PAIR_POSTERIORS = {"order": inference.order_posterior, "same-source": inference.same_source_posterior}
# the training signal each pair task copies (objectives.base.SIGNALS): the pair objective that trains on it
PAIR_SIGNALS = {"order": "sentence_order", "same-source": "next_sentence"}
# a position is asked about when its word's best guess at the label is right less than 60 % of the time: a word that
# settles its label (most do: sparse emissions) would measure the embedding table, which an untrained backbone has too,
# and a word that mostly settles it left a causal reader of this language's local syntax within a few per cent of its
# ceiling at the default budget (0.9 asked about positions whose word gave the label up to 90 %: ar closed 0.92 of
# states' range from its control to its left-context ceiling; 0.6 0.86; 0.5 0.79, one seed; docs/default.md). Below
# 0.6 too few positions are asked to tune on: 0.44 per window on `states` at 0.5, 2.6 at 0.6, so a dev split of 128
# windows held about 60 at 0.5 and picks fell within their noise.
SETTLED = 0.6
READERS = ("smoothing", "filtering")  # Objective.tagging_ceiling: the whole window, or the words up to a position


def synthetic_task(spec: str, name: str, options: TaskOptions, context: TaskContext) -> Task:
    if name not in SYNTHETIC_TASKS:
        raise ConfigError(f"{spec}: unknown embedded task {name!r}; choose one of {', '.join(SYNTHETIC_TASKS)}")
    if context.language is None:
        raise ConfigError(f"{spec}: the embedded language's tasks need --data synthetic or synthetic:text")
    if context.spell is not None and name in PAIR_TASK_OF:
        raise ConfigError(f"{spec}: the pair tasks need --data synthetic (their Bayes ceiling reads the words as "
                          "tokens); on synthetic:text use synthetic:states, synthetic:agreement or synthetic:topic")
    if options.size < 8:
        raise ConfigError(f"{spec}: size={options.size} is too small; use 8 or more")
    sizes = {"train": options.size, "dev": max(2, options.size // 4), "test": max(2, options.size // 2)}
    build = {"states": _tagging, "agreement": _tagging, "topic": _topic}.get(name, _pairs)
    splits, ceilings, input_only = {}, {}, None
    for number, (split, count) in enumerate(sizes.items()):
        # seeds of their own: never the corpus's samples (seeds 2·seed and 2·seed + 1 of the small integers)
        seed = derive_seed(1 + SYNTHETIC_TASKS.index(name), number)
        splits[split], found = build(name, count, seed, context, split == "test")
        ceilings = found or ceilings
    # the Bayes ceilings and the input-only values are accuracies, which beside another metric bound nothing; and
    # spelled windows are cut at a word piece, so neither number is the sampled window's
    bounded = context.spell is None and (options.metric or "accuracy") == "accuracy"
    if bounded:
        input_only = INPUT_ONLY[name](name, splits["train"], splits["test"], context)
    K = context.language.emission.shape[0]
    level, labels = (("token", [str(c) for c in range(int(label_of(context.language, name).max()) + 1)])
                     if name in TAGGING else
                     ("sequence", [str(k) for k in range(K)] if name == "topic" else ["no", "yes"]))
    sizes_text = ", ".join(f"{split} {count}" for split, count in sizes.items())
    spelled = " and spelled as synthetic:text" if context.spell else ""
    return Task(spec, level, (options.metric or "accuracy",), labels, splits["train"], splits["dev"], splits["test"],
                f"sampled from the embedded language{spelled}; {sizes_text}", pair=name in PAIR_TASK_OF,
                first_position=name in PAIR_TASK_OF, ceilings=ceilings if bounded else {},
                input_only=input_only, copies=(PAIR_SIGNALS[name],) if name in PAIR_SIGNALS else ())


# --- the tasks -------------------------------------------------------------------------------------------------------

def label_of(language: synthetic.Language, name: str) -> Tensor:
    """(S,): what a tagging task asks of each hidden state, its category or its agreement feature."""
    return language.category if name == "states" else language.feature


def by_label(probabilities: Tensor, labels: Tensor, dim: int) -> Tensor:
    """Probabilities over the hidden states along `dim` summed into their labels (S -> number of labels)."""
    shape = list(probabilities.shape)
    shape[dim] = int(labels.max()) + 1
    return probabilities.new_zeros(shape).index_add_(dim, labels, probabilities)


def word_evidence(language: synthetic.Language, window: int) -> Tensor:
    """(S, V): p(state | the word alone), states weighted by how often they occur over a window, topics summed out."""
    marginals = inference.state_marginals(language, window - 1)  # (window, K, S)
    frequency = language.prior[:, None] * marginals.sum(0)  # (K, S)
    joint = (frequency[..., None] * language.emission).sum(0)  # (S, V)
    return joint / joint.sum(0, keepdim=True)


def asked_positions(language: synthetic.Language, words: Tensor, window: int, name: str = "states") -> Tensor:
    """(N, T) bool: the positions whose word alone leaves the task's label open (SETTLED)."""
    return by_label(word_evidence(language, window), label_of(language, name), 0).amax(0)[words] < SETTLED


def _tagging(name: str, count: int, seed: int, context: TaskContext, test: bool) -> tuple[Split, dict]:
    """Every word shown; each asked position labelled with its state's category (states) or feature (agreement). A
    reader of the whole window is held to the smoothing posterior, a causal one (its own word and the words before)
    to the filtering posterior."""
    language, window = context.language, context.seq_len
    drawn = synthetic.sample(language, count, window, seed)
    S, labels_of_states = language.emission.shape[1], label_of(language, name)
    asked = asked_positions(language, drawn.words, window, name)
    if not asked.any():
        raise ConfigError(f"synthetic:{name}: no word of its {count} sampled windows leaves its label open in this "
                          "language (each word names it); raise the task's size= or use a language whose words are "
                          "more ambiguous")
    labels = torch.where(asked, labels_of_states[drawn.states % S], IGNORE)
    if context.spell is not None:
        return encode_tagged(context, [[context.spell(w) for w in row] for row in drawn.words.tolist()],
                             labels.tolist()), {}
    split = Split(drawn.words + context.vocab.first_ordinary, torch.full((count,), window), labels)
    if not test:
        return split, {}
    smoothing, filtering = inference.state_posteriors(language, drawn.words)
    per_label = lambda p: by_label(p.unflatten(-1, (-1, S)).sum(-2), labels_of_states, -1)  # noqa: E731
    return split, {"smoothing": per_label(smoothing).amax(-1)[asked].mean().item(),
                   "filtering": per_label(filtering).amax(-1)[asked].mean().item()}


def _topic(name: str, count: int, seed: int, context: TaskContext, test: bool) -> tuple[Split, dict]:
    """The window's topic; every reader has read the whole window (a causal one at its last token)."""
    drawn = synthetic.sample(context.language, count, context.seq_len, seed)
    if context.spell is not None:
        return encode(context, [" ".join(context.spell(w) for w in row) for row in drawn.words.tolist()], None,
                      drawn.components), {}
    split = Split(drawn.words + context.vocab.first_ordinary, torch.full((count,), context.seq_len), drawn.components)
    if not test:
        return split, {}
    ceiling = inference.component_posterior(context.language, drawn.words).amax(-1).mean().item()
    return split, dict.fromkeys(READERS, ceiling)


def _pairs(name: str, count: int, seed: int, context: TaskContext, test: bool) -> tuple[Split, dict]:
    """Each window "[BOS] a [EOS] b [EOS]", made exactly as mlm:pair=sop (order) or mlm:pair=nsp (same-source) makes
    its pairs (objectives.pairs): the label says whether b follows a in the same sequence. The windows are cut from
    the middle of a sequence (times T .. 2T − 1): a window that opens one starts with words that say so, a cue a
    swapped pair breaks and any encoder reads next to [BOS]. Each label is a fair coin; every reader sees it all."""
    window, vocab = context.seq_len, context.vocab
    drawn = synthetic.sample(context.language, count, 2 * window, seed)
    tokens = drawn.words[:, window:] + vocab.first_ordinary
    pairs = make_pairs(PAIR_TASK_OF[name], tokens, torch.Generator().manual_seed(seed))
    laid_out, _, _ = pair_layout(pairs, vocab)
    split = Split(laid_out, torch.full((count,), window), pairs.is_next)
    if not test:
        return split, {}
    # from the pairs as shown: words in shown order and where the separator falls
    posterior = PAIR_POSTERIORS[name](context.language, pairs.content - vocab.first_ordinary, pairs.first_length,
                                      window)
    return split, dict.fromkeys(READERS, inference.binary_ceiling(posterior))


# --- what the input alone gives (Hewitt & Liang's control) ------------------------------------------------------------

def _tagging_input_only(name: str, train: Split, test: Split, context: TaskContext) -> float:
    """The Bayes answer from the word alone (and nothing else), exact: its expected accuracy on the asked positions."""
    words = test.tokens - context.vocab.first_ordinary
    evidence = by_label(word_evidence(context.language, context.seq_len), label_of(context.language, name), 0)
    return evidence.amax(0)[words][test.labels != IGNORE].mean().item()


def _bag(split: Split, context: TaskContext, train: Split) -> Tensor:
    """The bag of words of each example (special tokens left out)."""
    ordinary = split.tokens - context.vocab.first_ordinary
    inside = (ordinary >= 0) & (ordinary < context.language.emission.shape[-1])
    counts = F.one_hot(ordinary.clamp_min(0), context.language.emission.shape[-1]).float() * inside[..., None]
    return counts.sum(1) / inside.sum(1, keepdim=True).clamp_min(1)


def _meeting_words(split: Split, context: TaskContext) -> Tensor:
    """(N,): the pair of words that meet across the separator, as one index word_before · V + word_after."""
    V, first = context.language.emission.shape[-1], context.vocab.first_ordinary
    separator = (split.tokens == Vocab.EOS).long().argmax(1)  # the first [EOS]: the one between the segments
    rows = torch.arange(len(split))
    return (split.tokens[rows, separator - 1] - first) * V + split.tokens[rows, separator + 1] - first


def _junction(split: Split, context: TaskContext, train: Split) -> Tensor:
    """A pair's bags of words on either side of the separator and the pair of words that meet there (a lookup table
    of the one transition shown across the separator): what a reader that knows no other order of words has. The
    lookup table has one column per pair the training split shows: a pair it never shows has no weight to learn (the
    reader of all V² columns, a million at 1,000 words, leaves its weight where it started), so it reads as nothing."""
    separator = (split.tokens == Vocab.EOS).long().argmax(1)
    side = torch.arange(split.tokens.shape[1])[None, :] > separator[:, None]
    first_half = Split(torch.where(side, Vocab.PAD, split.tokens), split.lengths, split.labels)
    second_half = Split(torch.where(side, split.tokens, Vocab.PAD), split.lengths, split.labels)
    seen = torch.unique(_meeting_words(train, context))
    meeting = _meeting_words(split, context)
    column = torch.searchsorted(seen, meeting).clamp_max(len(seen) - 1)
    lookup = F.one_hot(column, len(seen)).float() * (seen[column] == meeting)[:, None]
    return torch.cat([_bag(first_half, context, train), _bag(second_half, context, train), lookup], dim=1)


def _linear_input_only(features):
    def control(name: str, train: Split, test: Split, context: TaskContext) -> float:
        classes = int(max(train.labels.max(), test.labels.max())) + 1
        accuracy, _, _ = readout.fit_linear_probe(features(train, context, train), train.labels,
                                                  features(test, context, train), test.labels, classes,
                                                  readout.DEFAULT_FIT)
        return accuracy
    return control


INPUT_ONLY = {"states": _tagging_input_only, "agreement": _tagging_input_only, "topic": _linear_input_only(_bag),
              "order": _linear_input_only(_junction), "same-source": _linear_input_only(_junction)}
