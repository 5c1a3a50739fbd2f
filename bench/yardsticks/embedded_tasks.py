"""The embedded language's own tasks, sampled afresh from the true distribution: hidden-state tagging, mixture
component, and the pair tasks (order, same-source) made as the pair objectives make theirs, with Bayes ceilings.
"""

from __future__ import annotations

import torch
from torch import Tensor

from backbone import ConfigError
from bench.data import synthetic
from bench.seeds import derive_seed
from bench.yardsticks.examples import Split, Task, TaskContext, TaskOptions, encode, encode_tagged
from objectives import Vocab
from objectives.pairs import EMBEDDED_TASK_OF, Pairs, make_pairs, pair_layout

SYNTHETIC_TASKS = ("tagging", "component", "order", "same-source")
PAIR_TASK_OF = {task: pair for pair, task in EMBEDDED_TASK_OF.items()}  # the pair mode each pair task asks about
PAIR_POSTERIORS = {"order": synthetic.order_posterior, "same-source": synthetic.same_source_posterior}

# --- the embedded language's tasks ------------------------------------------------------------------------------------

def synthetic_task(spec: str, name: str, options: TaskOptions, context: TaskContext) -> Task:
    if name not in SYNTHETIC_TASKS:
        raise ConfigError(f"{spec}: unknown embedded task {name!r}; choose one of {', '.join(SYNTHETIC_TASKS)}")
    if context.language is None:
        raise ConfigError(f"{spec}: the embedded language's tasks need --data synthetic or synthetic:text")
    if context.spell is not None and name in PAIR_TASK_OF:
        raise ConfigError(f"{spec}: the pair tasks need --data synthetic (their Bayes ceiling reads the words as "
                          "tokens); on synthetic:text use synthetic:tagging or synthetic:component")
    if options.size < 8:
        raise ConfigError(f"{spec}: size={options.size} is too small; use 8 or more")
    language, window, first = context.language, context.seq_len, context.vocab.first_ordinary
    K, S, _ = language.emission.shape
    sizes = {"train": options.size, "dev": max(2, options.size // 4), "test": max(2, options.size // 2)}
    splits, ceiling = {}, None
    for number, (split, count) in enumerate(sizes.items()):
        # seeds of their own: never the corpus's samples (seeds 2·seed and 2·seed + 1 of the small integers)
        seed = derive_seed(1 + SYNTHETIC_TASKS.index(name), number)
        # Pairs are cut from the middle of a sequence: a window that opens one starts with words that say so (the
        # chain's first states), a cue a swapped pair breaks and any encoder reads next to [BOS]; with it the order
        # task rewarded every model for the window's start rather than for the order of its segments.
        start = window if name in PAIR_TASK_OF else 0
        drawn = synthetic.sample(language, count, start + window, seed)
        tokens, lengths = drawn.words[:, start:] + first, torch.full((count,), window, dtype=torch.long)
        if context.spell is not None:
            # The words spelled and tokenized as synthetic:text writes them, cut to the window. No ceiling: the cut
            # falls at a word piece, and a truncated window's component evidence is not the sampled window's.
            splits[split] = _spelled(name, drawn, context)
        elif name == "tagging":
            # No ceiling: a causal backbone's feature at a position has read only the words up to it (its ceiling is
            # the filtering accuracy), the others the whole window (smoothing); one number would hold one of them to
            # the wrong limit (synthetic.state_posteriors gives both).
            splits[split] = Split(tokens, lengths, drawn.states)
        elif name == "component":
            splits[split] = Split(tokens, lengths, drawn.components)
            if split == "test":  # every backbone's sequence feature has read the whole window
                ceiling = synthetic.component_posterior(language, drawn.words).amax(-1).mean().item()
        else:
            splits[split], pairs = _synthetic_pairs(name, tokens, lengths, context.vocab,
                                                    torch.Generator().manual_seed(seed))
            if split == "test":  # from the pairs as shown: words in shown order and where the separator falls
                posterior = PAIR_POSTERIORS[name](language, pairs.content - first, pairs.first_length, start)
                ceiling = synthetic.binary_ceiling(posterior)
    level, labels = ("token", [f"{k}.{s}" for k in range(K) for s in range(S)]) if name == "tagging" \
        else ("sequence", [str(k) for k in range(K)] if name == "component" else ["no", "yes"])
    sizes_text = ", ".join(f"{split} {count}" for split, count in sizes.items())
    spelled = " and spelled as synthetic:text" if context.spell else ""
    return Task(spec, level, (options.metric or "accuracy",), labels, splits["train"], splits["dev"],
                splits["test"], f"sampled from the embedded language{spelled}; {sizes_text}",
                pair=name in PAIR_TASK_OF, first_position=name in PAIR_TASK_OF, bayes_ceiling=ceiling)


def _spelled(name: str, drawn: synthetic.Sample, context: TaskContext) -> Split:
    """A tagging or component task on the words of `drawn` as synthetic:text spells them: a tag on each word's first
    piece (as CoNLL tasks are read), or the component of the whole text."""
    words = [[context.spell(word) for word in row] for row in drawn.words.tolist()]
    if name == "tagging":
        return encode_tagged(context, words, drawn.states.tolist())
    return encode(context, [" ".join(row) for row in words], None, drawn.components)


def _synthetic_pairs(name: str, tokens: Tensor, lengths: Tensor, vocab: Vocab,
                     generator: torch.Generator) -> tuple[Split, Pairs]:
    """Each sampled window as "[BOS] a [EOS] b [EOS]", made exactly as mlm:pair=sop (order) or mlm:pair=nsp
    (same-source) makes its pairs (objectives.pairs): the label says whether b follows a in the same sequence. order's
    negatives swap a and b; same-source's take b from another window. Each label is a fair coin. The pairs before
    the layout come back too: their content in shown order is what the Bayes ceiling is computed from."""
    pairs = make_pairs(PAIR_TASK_OF[name], tokens, generator)
    laid_out, _, _ = pair_layout(pairs, vocab)
    return Split(laid_out, lengths, pairs.is_next), pairs
