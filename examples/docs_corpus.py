"""Real English text that nobody here wrote, from this machine's own documentation, as a pretraining corpus and a
labelled task (README: Downstream tasks).

    python examples/docs_corpus.py --out docs-data
    python -m bench.compare --data text:docs-data/corpus.jsonl --downstream docs-data/library.jsonl ...

- corpus.jsonl: the Python language reference topics (pydoc_data), the long descriptions (README files) of every
  installed distribution and the docstrings of other installed libraries (matplotlib, scikit-learn, datasets, ...),
  one paragraph per record;
- library.jsonl: the opening paragraph of the docstrings of public functions and classes of four installed libraries
  (numpy, scipy, pandas, torch), labelled by the library it came from. None of it is in the corpus.
- order.jsonl: the same passages, half of them with two adjacent words swapped, labelled by whether the word order is
  the passage's own ("own" / "swapped"): a bag of words, which random features already read, cannot tell them apart,
  so it asks what pretraining must teach (BLiMP-style minimal pairs made from the corpus's kind of text).
What you get depends on what is installed: the files say how many passages each source gave.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import inspect
import json
import pkgutil
import random
import re
import warnings
from pathlib import Path

LIBRARIES = ("numpy", "scipy", "pandas", "torch")
CORPUS_LIBRARIES = ("matplotlib", "sklearn", "datasets", "seaborn", "lightning_fabric", "pyarrow", "PIL")
PER_LIBRARY = 600


def paragraphs(text: str, min_words: int = 8) -> list[str]:
    """Prose paragraphs: blank-line separated, whitespace collapsed, code and tables left out."""
    found = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if not line.lstrip().startswith((">>>", "...", "|", "+-", "=="))]
        paragraph = " ".join(" ".join(lines).split())
        if len(paragraph.split()) >= min_words and sum(c.isalpha() for c in paragraph) > 0.6 * len(paragraph):
            found.append(paragraph)
    return found


def corpus_paragraphs() -> list[str]:
    import pydoc_data.topics

    texts = list(pydoc_data.topics.topics.values())
    for distribution in importlib.metadata.distributions():
        description = distribution.metadata.get_payload() or distribution.metadata.get("Description") or ""
        texts.append(description)
    for library in CORPUS_LIBRARIES:
        texts.extend(docstrings(library))
    return [p for text in texts for p in paragraphs(text)]


def docstrings(library: str) -> list[str]:
    """The docstrings of the public functions and classes the library's modules define, once each."""
    try:
        package = importlib.import_module(library)
    except ImportError:
        return []
    modules = pkgutil.walk_packages(package.__path__, library + ".", onerror=lambda name: None)
    names = [package.__name__] + [m.name for m in modules if not any(part.startswith("_") or part in ("tests", "testing")
                                                                     for part in m.name.split("."))]
    seen, passages = set(), []
    for name in names:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except Exception:  # optional dependencies, platform-specific modules
            continue
        for attribute, value in vars(module).items():
            if attribute.startswith("_") or not (inspect.isfunction(value) or inspect.isclass(value)):
                continue
            if not getattr(value, "__module__", "").startswith(library):
                continue
            text = inspect.getdoc(value)
            if text and text not in seen:
                seen.add(text)
                passages.append(text)
    return passages


def library_passages(library: str, limit: int, seed: int = 0) -> list[str]:
    """The opening prose paragraph of each docstring of the library, shuffled, at most `limit`."""
    openings = list(dict.fromkeys(p[0] for p in map(paragraphs, docstrings(library)) if p))
    random.Random(seed).shuffle(openings)
    return openings[:limit]


ORDER_WINDOW = 24  # the swap falls among a passage's first words, inside any model window it is read in


def order_task(passages: list[str], seed: int = 0) -> list[dict]:
    """Each passage once, labelled "own", or "swapped" with two adjacent words exchanged (chosen among the first
    ORDER_WINDOW words, never two equal ones): the same words either way, only their order differs."""
    rng, rows = random.Random(seed), []
    for text in passages:
        words = text.split()
        pairs = [i for i in range(min(len(words), ORDER_WINDOW) - 1) if words[i] != words[i + 1]]
        if not pairs:
            continue
        if rng.random() < 0.5:
            rows.append({"text": text, "label": "own"})
        else:
            i = rng.choice(pairs)
            words[i], words[i + 1] = words[i + 1], words[i]
            rows.append({"text": " ".join(words), "label": "swapped"})
    return rows


ASKED_RATE = 0.15  # the positions asked about per passage, as the embedded replaced-word probe asks 15 %


def replaced_task(passages: list[str], seed: int = 0) -> list[list[tuple[str, str]]]:
    """Each passage's first ORDER_WINDOW words; at ASKED_RATE of the positions (at least one) the word is asked
    about: with probability 1/2 it is "replaced" by a word drawn from the passages' own word frequencies, else
    "original"; every other word is "_", read as context and never scored. A replaced word is as frequent as a kept
    one, so the word alone says little of its tag (the input-only control is near chance, 0.5): the tag is whether
    the word fits its context, which is what pretraining on text must teach (ELECTRA's replaced-token detection, and
    the embedded replaced-word probe, as a downstream task)."""
    rng = random.Random(seed)
    windows = [text.split()[:ORDER_WINDOW] for text in passages]
    vocabulary = [word for words in windows for word in words]  # with repeats: drawn by frequency
    sentences = []
    for words in windows:
        if len(words) < 2:
            continue
        asked = set(rng.sample(range(len(words)), max(1, round(ASKED_RATE * len(words)))))
        tagged = []
        for i, word in enumerate(words):
            if i not in asked:
                tagged.append((word, "_"))
            elif rng.random() < 0.5:
                tagged.append((word, "original"))
            else:
                other = word
                while other == word:
                    other = rng.choice(vocabulary)
                tagged.append((other, "replaced"))
        sentences.append(tagged)
    return sentences


def word_alone(sentences: list[list[tuple[str, str]]], train_share: float = 0.7) -> float:
    """The input-only control, by hand: each word's most frequent tag in the first passages (the overall majority for
    a word never asked there), scored on the rest."""
    cut = int(train_share * len(sentences))
    seen: dict[str, dict[str, int]] = {}
    for sentence in sentences[:cut]:
        for word, tag in sentence:
            if tag != "_":
                seen.setdefault(word, {}).setdefault(tag, 0)
                seen[word][tag] += 1
    totals = {tag: sum(counts.get(tag, 0) for counts in seen.values()) for tag in ("original", "replaced")}
    majority = max(totals, key=totals.get)
    asked = [(word, tag) for sentence in sentences[cut:] for word, tag in sentence if tag != "_"]
    guess = {word: max(counts, key=counts.get) for word, counts in seen.items()}
    return sum(guess.get(word, majority) == tag for word, tag in asked) / len(asked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for corpus.jsonl, library.jsonl and "
                                                                           "order.jsonl")
    parser.add_argument("--per-library", type=int, default=PER_LIBRARY, help=f"passages per library (default "
                                                                             f"{PER_LIBRARY})")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    task = [{"text": text, "label": library} for library in LIBRARIES
            for text in library_passages(library, args.per_library)]
    held = {row["text"] for row in task}
    corpus = [text for text in corpus_paragraphs() if text not in held]
    with open(args.out / "corpus.jsonl", "w") as handle:
        handle.writelines(json.dumps({"text": text}) + "\n" for text in corpus)
    random.Random(0).shuffle(task)
    with open(args.out / "library.jsonl", "w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in task)
    order = order_task([row["text"] for row in task])
    with open(args.out / "order.jsonl", "w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in order)
    replaced = replaced_task([row["text"] for row in task])
    with open(args.out / "replaced.conll", "w") as handle:
        handle.writelines("".join(f"{word}\t{tag}\n" for word, tag in sentence) + "\n" for sentence in replaced)
    counts = {library: sum(row["label"] == library for row in task) for library in LIBRARIES}
    print(f"{args.out / 'corpus.jsonl'}: {len(corpus)} paragraphs, {sum(len(t.split()) for t in corpus):,} words")
    print(f"{args.out / 'library.jsonl'}: " + ", ".join(f"{library} {count}" for library, count in counts.items()))
    print(f"{args.out / 'order.jsonl'}: {len(order)} passages, {sum(r['label'] == 'swapped' for r in order)} swapped")
    tags = [tag for sentence in replaced for _, tag in sentence if tag != "_"]
    print(f"{args.out / 'replaced.conll'}: {len(replaced)} passages, {len(tags)} words asked, "
          f"{tags.count('replaced')} replaced; the word alone gives {word_alone(replaced):.3f}")


if __name__ == "__main__":
    main()
