"""examples/docs_corpus.py's tasks: what each asks, and that the word alone cannot answer the replaced-word one."""

import importlib.util
import random
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("docs_corpus", Path(__file__).parents[2] / "examples" / "docs_corpus.py")
docs_corpus = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs_corpus)


def zipf_passages(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)]
    weights = [1 / (i + 1) for i in range(300)]
    return [" ".join(rng.choices(words, weights, k=rng.randint(5, 40))) for _ in range(count)]


def test_the_replaced_word_task_asks_15_percent_and_replaces_half_of_them():
    passages = zipf_passages(2000)
    sentences = docs_corpus.replaced_task(passages)
    assert len(sentences) == len(passages)
    asked = replaced = 0
    for passage, sentence in zip(passages, sentences):
        words = passage.split()[:docs_corpus.ORDER_WINDOW]
        assert len(sentence) == len(words)
        tags = [tag for _, tag in sentence]
        assert tags.count("_") < len(words)  # at least one word asked
        assert len(words) - tags.count("_") == max(1, round(0.15 * len(words)))
        for (shown, tag), own in zip(sentence, words):
            assert (shown == own) == (tag != "replaced")  # only a replaced word differs, and it always does
        asked += len(words) - tags.count("_")
        replaced += tags.count("replaced")
    assert replaced / asked == pytest.approx(0.5, abs=0.03)
    assert docs_corpus.replaced_task(passages) == sentences  # a function of the passages and the seed


def test_the_word_alone_is_worked_by_hand_and_near_chance_on_the_task():
    # "a" always replaced, "b" always original in the first 70 %; "c" never asked there: the majority tag
    training = [[("a", "replaced"), ("b", "original"), ("b", "original")]] * 7
    held_out = [[("a", "replaced"), ("b", "original"), ("c", "replaced"), ("z", "_")]] * 3
    assert docs_corpus.word_alone(training + held_out) == pytest.approx(2 / 3)
    # replacements are drawn by the passages' own word frequencies: a word's tag is a coin flip given the word
    assert docs_corpus.word_alone(docs_corpus.replaced_task(zipf_passages(4000))) == pytest.approx(0.5, abs=0.03)


def test_the_hidden_word_task_hides_each_frequent_word_once_per_copy_never_the_first():
    passages = zipf_passages(2000) + ["w299 w298", "W0 w298"]  # no frequent word after the first: no copy
    copies = docs_corpus.hidden_task(passages, answers=5)
    counts = {}
    for passage in passages:
        for word in passage.split()[:docs_corpus.ORDER_WINDOW]:
            counts[word.lower()] = counts.get(word.lower(), 0) + 1
    frequent = set(sorted(counts, key=counts.get, reverse=True)[:5])
    assert frequent == {"w0", "w1", "w2", "w3", "w4"}
    assert len(copies) == len(passages) and copies[-2:] == [[], []]
    for passage, sentences in zip(passages, copies):
        words = passage.split()[:docs_corpus.ORDER_WINDOW]
        asked = [i for i, word in enumerate(words) if i > 0 and word in frequent]
        assert len(sentences) == len(asked)  # one copy per word that can be hidden
        for at, sentence in zip(asked, sentences):
            assert [i for i, (_, tag) in enumerate(sentence) if tag != "_"] == [at]  # one hidden word a copy
            assert sentence[at] == ("[MASK]", words[at].lower())
            assert [w for i, (w, _) in enumerate(sentence) if i != at] == words[:at] + words[at + 1:]
    assert docs_corpus.hidden_task(passages, answers=5) == copies  # a function of the passages


def test_a_passages_copies_stay_in_one_split_drawn_as_bench_draws_a_pool():
    copies = docs_corpus.hidden_task(zipf_passages(1000), answers=5)
    splits = docs_corpus.split_by_passage(copies)

    def passage(sentence: list[tuple[str, str]]) -> tuple[str, ...]:  # the hidden word put back (all lowercase)
        return tuple(tag if word == "[MASK]" else word for word, tag in sentence)

    passage_of = {}
    for split, sentences in splits.items():
        for sentence in sentences:
            assert passage_of.setdefault(passage(sentence), split) == split  # another copy would show a test answer
    assert sum(map(len, splits.values())) == sum(map(len, copies))
    passages = {split: len(set(map(passage, sentences))) for split, sentences in splits.items()}
    with_copies = sum(1 for c in copies if c)
    assert passages["test"] == round(0.2 * with_copies)
    assert passages["dev"] == round(0.1 * (with_copies - passages["test"]))
    assert docs_corpus.split_by_passage(copies) == splits


def test_the_neighbours_alone_are_worked_by_hand():
    def passage(before: str, answer: str, after: str) -> list[tuple[str, str]]:
        return [(before, "_"), ("[MASK]", answer), (after, "_")]

    training = [passage("To", "be", "x")] * 3 + [passage("to", "the", "y")] * 4 + [passage("of", "a", "z")] * 3
    held_out = [passage("to", "be", "X"),  # (to, x) seen: "be"
                passage("to", "the", "w"),  # (to, w) unseen, "to" alone: "the" (4 of 7)
                passage("in", "a", "z")]  # "in" unseen: the most frequent answer of all, "the" (4 of 10)
    assert docs_corpus.neighbours_alone(training, held_out) == pytest.approx(2 / 3)
