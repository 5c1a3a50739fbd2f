"""examples/docs_corpus.py's tasks: what each asks, and that the word alone cannot answer the replaced-word one."""

import importlib.util
import random
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("docs_corpus", Path(__file__).parents[1] / "examples" / "docs_corpus.py")
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
