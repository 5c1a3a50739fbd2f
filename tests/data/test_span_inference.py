"""bench.data.span_inference against brute force: every composition of the noise into spans, every hidden word and
every (component, state path) enumerated in plain Python (tests.helpers), sharing no code with the forward pass."""
import itertools
import math

import pytest
import torch

from bench.data.span_inference import span_nll
from bench.data.synthetic import Language
from tests.helpers import enumerated_probability, language_lists

V = 3


@pytest.fixture(scope="module")
def language():
    """Two components, two states, three words: small enough to enumerate every hidden word and state path."""
    f64 = torch.float64
    return Language(prior=torch.tensor([0.35, 0.65], dtype=f64),
                    initial=torch.tensor([[0.8, 0.2], [0.3, 0.7]], dtype=f64),
                    transition=torch.tensor([[[0.1, 0.9], [0.6, 0.4]], [[0.7, 0.3], [0.2, 0.8]]], dtype=f64),
                    emission=torch.tensor([[[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]],
                                           [[0.2, 0.5, 0.3], [0.5, 0.1, 0.4]]], dtype=f64))


def compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    return [c for c in itertools.product(range(1, total + 1), repeat=parts) if sum(c) == total]


def enumerated_nll(P, words: list[int], noise: list[bool]) -> float:
    """-log p(targets | inputs): what the input shows (the visible words and how many between two sentinels) is
    matched against every way of placing them (each noise composition, equally likely), every hidden word summed."""
    runs = [(hidden, len(list(group))) for hidden, group in itertools.groupby(noise)]
    shown_lengths = [length for hidden, length in runs if not hidden]
    visible = [w for w, hidden in zip(words, noise) if not hidden]
    total_noise = sum(noise)
    inputs = 0.0
    for spans in compositions(total_noise, len(shown_lengths)):
        layout = [flag for shown, hidden in zip(shown_lengths, spans) for flag in [False] * shown + [True] * hidden]
        hidden_at = [i for i, flag in enumerate(layout) if flag]
        for guess in itertools.product(range(V), repeat=total_noise):
            filled, shown_words, guessed = [], iter(visible), iter(guess)
            for flag in layout:
                filled.append(next(guessed) if flag else next(shown_words))
            assert len(hidden_at) == total_noise
            inputs += enumerated_probability(P, filled)
    return -math.log(enumerated_probability(P, words)) + math.log(inputs)


@pytest.mark.parametrize("masks", [
    ["vvnnn"],  # one span: the hidden words are the window's end
    ["vnvnn", "vnnvn"],  # two spans, two layouts of the same input
    ["vnvvnn", "vnnvvn", "vvnvnn", "vvnnvn"],  # every layout of 3 visible and 3 noise words in two spans
    ["vnvnvn"],  # three spans of one word: a single layout
])
def test_span_nll_matches_enumeration(language, masks):
    P = language_lists(language)
    generator = torch.Generator().manual_seed(len(masks))
    for mask in masks:
        noise = torch.tensor([[c == "n" for c in mask]] * 4)
        words = torch.randint(0, V, noise.shape, generator=generator)
        got = span_nll(language, words, noise)
        assert got.dtype == torch.float64 and got.shape == (4,)
        expected = [enumerated_nll(P, w, n) for w, n in zip(words.tolist(), noise.tolist())]
        assert got.tolist() == pytest.approx(expected, abs=1e-10)
        assert (got >= -1e-12).all()


def test_one_layout_leaves_only_the_hidden_words(language):
    """Where the input admits a single layout (every span one word), the loss is that of the hidden words given the
    visible ones: a masked-token question, checked against the likelihood ratio directly."""
    P = language_lists(language)
    words = [[0, 2, 1, 1, 2, 0]]
    noise = [[False, True, False, True, False, True]]
    got = span_nll(language, torch.tensor(words), torch.tensor(noise)).item()
    visible_only = sum(enumerated_probability(P, [0, a, 1, b, 2, c]) for a in range(V) for b in range(V)
                       for c in range(V))
    assert got == pytest.approx(-math.log(enumerated_probability(P, words[0]) / visible_only), abs=1e-10)


def test_span_nll_rejects_bad_masks(language):
    words = torch.zeros(2, 5, dtype=torch.int64)
    with pytest.raises(ValueError, match="same noise count"):
        span_nll(language, words, torch.tensor([[c == "n" for c in m] for m in ("vnvnn", "vvnnn")]))
    with pytest.raises(ValueError, match="start visible"):
        span_nll(language, words, torch.tensor([[c == "n" for c in "nvvnn"]] * 2))
    with pytest.raises(ValueError, match="shape"):
        span_nll(language, words, torch.ones(2, 4, dtype=torch.bool))
