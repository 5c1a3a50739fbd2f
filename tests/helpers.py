"""What tests share besides fixtures (tests/conftest.py holds those): tiny objectives, a signal at a chosen call,
recorded settings, the golden comparison, and the embedded language's brute-force enumeration. Every test imports them
one way: `from tests.helpers import ...`."""

import itertools
import json
import math
import os
import signal
from pathlib import Path

import torch

from backbone import Backbone, preset
from objectives import Vocab, build_objective

VOCAB = Vocab.for_words(40, num_sentinels=30)
GOLDEN = Path(__file__).parent / "fixtures" / "comparison.json"  # tests/fixtures/make_comparison.py writes it


def random_tokens(batch_size: int, seq_len: int, seed: int = 0, vocab: Vocab = VOCAB) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(vocab.first_ordinary, vocab.end_ordinary, (batch_size, seq_len), generator=generator)


def tiny_objective(spec: str, seq_len: int = 64, vocab: Vocab = VOCAB, model: str = "tiny", **overrides):
    torch.manual_seed(0)
    return build_objective(spec, Backbone(preset(model, vocab.size, max_seq_len=seq_len, **overrides)), vocab)


def signalling(function, when=lambda *args, **kwargs: True):
    """`function`, but sending this process SIGTERM first on the calls `when` picks: a scheduler's warning that
    lands exactly there."""
    def signalled(*args, **kwargs):
        if when(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)
        return function(*args, **kwargs)
    return signalled


def recorded_settings(data: str, seq_len: int | str, model: str = "tiny") -> dict:
    """A comparison's config.json as bench.orchestration.planning.record writes it, for one trained on `data` at
    `seq_len`."""
    from bench.compare import parse_config
    from bench.orchestration.config import SETTING
    from bench.orchestration.planning import CONFIG_SCHEMA

    config = parse_config(["--data", data, "--seq-len", str(seq_len), "--model", model])
    return {"schema": CONFIG_SCHEMA, "config": config.recorded(SETTING), "derived": {}}


def written_record(**fields) -> str:
    """A result.json's text as a finished run writes it (or, given `read_as`, an untrained control): the golden
    comparison's first run or control (tests/fixtures/comparison.json) with `fields` changed."""
    golden = json.loads(GOLDEN.read_text())
    return json.dumps({**(golden["controls"] if "read_as" in fields else golden["runs"])[0], **fields})


def language_lists(language):
    return (language.prior.tolist(), language.initial.tolist(), language.transition.tolist(),
            language.emission.tolist())


def joint_probability(P, k, path, words):
    """p(component k, state path, words), straight from the definition."""
    prior, initial, transition, emission = P
    p = prior[k] * initial[k][path[0]] * emission[k][path[0]][words[0]]
    for t in range(1, len(words)):
        p *= transition[k][path[t - 1]][path[t]] * emission[k][path[t]][words[t]]
    return p


def path_probabilities(P, words):
    """{(k, path): p(k, path, words)} over all components and state paths."""
    K, S = len(P[0]), len(P[1][0])
    return {(k, path): joint_probability(P, k, path, words)
            for k in range(K) for path in itertools.product(range(S), repeat=len(words))}


def enumerated_probability(P, words):
    return sum(path_probabilities(P, words).values())


def enumerated_posterior(P, seen: list[int], chosen: list[int], vocab_size: int, corruption) -> dict[tuple, float]:
    """{guess: p(the true words at `chosen` are `guess`, and what was seen)}, by enumeration: the other positions are
    the words `seen`; `corruption(i, x)` is p(what was seen at position i | its true word x)."""
    weights = {}
    for guess in itertools.product(range(vocab_size), repeat=len(chosen)):
        words = list(seen)
        for i, x in zip(chosen, guess):
            words[i] = x
        weights[guess] = enumerated_probability(P, words) * math.prod(corruption(i, x) for i, x in zip(chosen, guess))
    return weights
