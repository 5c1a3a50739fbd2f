"""Real English text that nobody here wrote, from this machine's own documentation, as a pretraining corpus and a
labelled task (README: Your corpus and downstream tasks).

    python examples/docs_corpus.py --out docs-data
    python -m bench.compare --data text:docs-data/corpus.jsonl --downstream docs-data/library.jsonl,\
        docs-data/order.jsonl,docs-data/continues.jsonl,text_pair=text_pair ...

- corpus.jsonl: the Python language reference topics (pydoc_data), the long descriptions (README files) of every
  installed distribution and the docstrings of other installed libraries (matplotlib, scikit-learn, datasets, ...),
  one paragraph per record;
- library.jsonl: the opening paragraph of the docstrings of public functions and classes of four installed libraries
  (numpy, scipy, pandas, torch), labelled by the library it came from. None of it is in the corpus.
- order.jsonl: the same passages, half of them with two adjacent words swapped, labelled by whether the word order is
  the passage's own ("own" / "swapped"): a bag of words, which random features already read, cannot tell them apart,
  so it asks what pretraining must teach (BLiMP-style minimal pairs made from the corpus's kind of text).
- continues.jsonl: the same passages cut in two halves, the second either the passage's own or the second half of
  another passage of the same library (so the topic cannot tell them), labelled "continues" / "other": a sentence-pair
  task, read as text and text_pair;
- replaced.conll: the same passages' first words, at 15 % of them the word its own or (half of them) another drawn
  from the passages' word frequencies, tagged "original" / "replaced" (ELECTRA's question, as a tagging task);
- hidden/{train,dev,test}.conll: the same passages' first words with one hidden as [MASK], tagged with the word it
  hides, one of the passages' 10 most frequent ("the", "a", "of", ...): the cloze question, which the context
  answers; a passage once per word it can hide, every copy in its passage's split.
The last two tag only the words they ask about ("_" elsewhere, read as context), and the script prints what the
input alone gives on them. What you get depends on what is installed: the files say how many passages each source
gave.
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
    # in one order on every run: the corpus's order decides which documents are held out and which windows train
    for distribution in sorted(importlib.metadata.distributions(), key=lambda d: str(d.metadata.get("Name"))):
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
        # by name: a module's dict can be filled from a set (numpy.matlib's star import), whose order changes with
        # every process's string hashing, and with it which docstring opens a task
        for attribute, value in sorted(vars(module).items(), key=lambda item: item[0]):
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


def continues_task(rows: list[dict], seed: int = 0) -> list[dict]:
    """Each passage of 8 words or more cut after half its words: half of them with their own second half
    ("continues"), the others with the second half of another passage of the same library ("other")."""
    rng, found = random.Random(seed), []
    halves = [(row["label"], row["text"].split()) for row in rows if len(row["text"].split()) >= 8]
    for index, (library, words) in enumerate(halves):
        cut = len(words) // 2
        others = [i for i, (other, _) in enumerate(halves) if other == library and i != index]
        if rng.random() < 0.5 or not others:
            found.append({"text": " ".join(words[:cut]), "text_pair": " ".join(words[cut:]), "label": "continues"})
        else:
            other = halves[rng.choice(others)][1]
            found.append({"text": " ".join(words[:cut]), "text_pair": " ".join(other[len(other) // 2:]),
                          "label": "other"})
    return found


Tagged = list[tuple[str, str]]  # a passage as (word, tag) pairs; the tag "_" marks a word read, never scored
ASKED_RATE = 0.15  # the positions asked about per passage, as the embedded replaced-word probe asks 15 %


def replaced_task(passages: list[str], seed: int = 0) -> list[Tagged]:
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


HIDDEN_ANSWERS = 10  # the hidden-word task's classes: the passages' most frequent words
HELD_OUT = {"test": 0.2, "dev": 0.1}  # as bench's own split of a pool: test from all, dev from the rest

def hidden_task(passages: list[str], answers: int = HIDDEN_ANSWERS) -> list[list[Tagged]]:
    """Per passage, its first ORDER_WINDOW words once for each word that can be hidden: a word (never the first)
    that is one of the `answers` most frequent words of the passages, lowercased as the tokenizer reads them, shown
    as [MASK] and tagged with itself; every other word is "_", read as context and never scored. A passage without
    such a word gives none. Which of "the", "a", "of", "to", ... stood there is a question of syntax that the
    context answers and the position alone does not (the input-only controls: the most frequent answer, and
    neighbours_alone), the cloze question masked and causal language models are trained on. One hidden word per
    copy, so that a causal reader, read at the word before, sees no other; the copies of a passage must stay in one
    split (split_by_passage), or another copy would show a test answer."""
    windows = [text.split()[:ORDER_WINDOW] for text in passages]
    counts: dict[str, int] = {}
    for words in windows:
        for word in words:
            counts[word.lower()] = counts.get(word.lower(), 0) + 1
    asked = set(sorted(counts, key=lambda word: (-counts[word], word))[:answers])
    return [[[("[MASK]", word.lower()) if i == hidden else (word, "_") for i, word in enumerate(words)]
             for hidden in range(1, len(words)) if words[hidden].lower() in asked]
            for words in windows]


def split_by_passage(copies: list[list[Tagged]], seed: int = 0) -> dict[str, list[Tagged]]:
    """train / dev / test sentences, every copy of a passage in the split its passage was drawn into (HELD_OUT)."""
    order = [i for i, passage in enumerate(copies) if passage]
    random.Random(seed).shuffle(order)
    test = round(HELD_OUT["test"] * len(order))
    dev = test + round(HELD_OUT["dev"] * (len(order) - test))
    drawn = {"test": order[:test], "dev": order[test:dev], "train": order[dev:]}
    return {split: [sentence for i in sorted(rows) for sentence in copies[i]] for split, rows in drawn.items()}


def neighbours_alone(train: list[Tagged], test: list[Tagged]) -> float:
    """The hidden-word task's input-only control, by hand: the most frequent training answer after the same word and
    before the same word, else after the same word, else the most frequent answer of all, scored on `test` (the two
    neighbours, lowercased, as a lookup table: what the words next to the hidden one give with no pretraining)."""
    def neighbours(sentence: Tagged) -> tuple[str, str, str]:
        i = next(i for i, (_, tag) in enumerate(sentence) if tag != "_")
        after = sentence[i + 1][0].lower() if i + 1 < len(sentence) else ""
        return sentence[i - 1][0].lower(), after, sentence[i][1]

    def most_frequent(answers: list[str]) -> str:
        return max(sorted(set(answers)), key=answers.count)

    both: dict[tuple[str, str], list[str]] = {}
    before: dict[str, list[str]] = {}
    for previous, following, answer in map(neighbours, train):
        both.setdefault((previous, following), []).append(answer)
        before.setdefault(previous, []).append(answer)
    overall = most_frequent([answer for answers in before.values() for answer in answers])
    right = 0
    for previous, following, answer in map(neighbours, test):
        table = both.get((previous, following)) or before.get(previous)
        right += (most_frequent(table) if table else overall) == answer
    return right / len(test)


def word_alone(sentences: list[Tagged], train_share: float = 0.7) -> float:
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


def write_conll(path: Path, sentences: list[Tagged]) -> None:
    """One word and its tag per line, a blank line after each passage (what conll:PATH reads)."""
    with open(path, "w") as handle:
        handle.writelines("".join(f"{word}\t{tag}\n" for word, tag in sentence) + "\n" for sentence in sentences)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for corpus.jsonl and the tasks library.jsonl, order.jsonl, continues.jsonl, "
                             "replaced.conll and hidden/")
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
    continues = continues_task(task)
    with open(args.out / "continues.jsonl", "w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in continues)
    replaced = replaced_task([row["text"] for row in task])
    write_conll(args.out / "replaced.conll", replaced)
    counts = {library: sum(row["label"] == library for row in task) for library in LIBRARIES}
    print(f"{args.out / 'corpus.jsonl'}: {len(corpus)} paragraphs, {sum(len(t.split()) for t in corpus):,} words")
    print(f"{args.out / 'library.jsonl'}: " + ", ".join(f"{library} {count}" for library, count in counts.items()))
    print(f"{args.out / 'order.jsonl'}: {len(order)} passages, {sum(r['label'] == 'swapped' for r in order)} swapped")
    print(f"{args.out / 'continues.jsonl'}: {len(continues)} pairs, "
          f"{sum(r['label'] == 'other' for r in continues)} with another passage's second half")
    tags = [tag for sentence in replaced for _, tag in sentence if tag != "_"]
    print(f"{args.out / 'replaced.conll'}: {len(replaced)} passages, {len(tags)} words asked, "
          f"{tags.count('replaced')} replaced; the word alone gives {word_alone(replaced):.3f}")
    hidden = split_by_passage(hidden_task([row["text"] for row in task]))
    (args.out / "hidden").mkdir(exist_ok=True)
    for split, sentences in hidden.items():
        write_conll(args.out / "hidden" / f"{split}.conll", sentences)
    answers = [tag for sentence in hidden["train"] for _, tag in sentence if tag != "_"]
    by_count = sorted(set(answers), key=lambda answer: (-answers.count(answer), answer))
    asked = [tag for sentence in hidden["test"] for _, tag in sentence if tag != "_"]
    print(f"{args.out / 'hidden'}: train / dev / test "
          + " / ".join(str(len(hidden[split])) for split in ("train", "dev", "test"))
          + f" words hidden, one a copy of its passage, answers {', '.join(by_count)}; on test the most frequent "
          f"answer gives {asked.count(by_count[0]) / len(asked):.3f}, the neighbours alone "
          f"{neighbours_alone(hidden['train'], hidden['test']):.3f}")


if __name__ == "__main__":
    main()
