import json
import os
import signal
from pathlib import Path

import pytest
import torch

from backbone import Backbone, preset
from bench.data.corpus import load_corpus
from bench.environment import describe, package_versions
from bench.training.distributed import make_fabric
from objectives import Vocab, build_objective

VOCAB = Vocab.for_words(40, num_sentinels=30)


def pytest_report_header() -> str:
    # what the tests ran on, in every run's header (CI's fresh environments included): the ranges in pyproject.toml
    # are only as honest as the versions they were tested with
    return "objective-bench key packages: " + describe(package_versions())


def random_tokens(batch_size: int, seq_len: int, seed: int = 0, vocab: Vocab = VOCAB) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(vocab.first_ordinary, vocab.end_ordinary, (batch_size, seq_len), generator=generator)


def tiny_objective(spec: str, seq_len: int = 64, vocab: Vocab = VOCAB, model: str = "tiny", **overrides):
    torch.manual_seed(0)
    return build_objective(spec, Backbone(preset(model, vocab.size, max_seq_len=seq_len, **overrides)), vocab)


@pytest.fixture(scope="module")
def corpus():
    """The embedded language's tiny corpus the training tests run on (a module may define its own)."""
    return load_corpus("synthetic:train=64,heldout=16,words=64,states=4", 32)


@pytest.fixture(scope="module")
def fabric():
    """One CPU process's Fabric."""
    return make_fabric()


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)


def signalling(function, when=lambda *args, **kwargs: True):
    """`function`, but sending this process SIGTERM first on the calls `when` picks: a scheduler's warning that
    lands exactly there."""
    def signalled(*args, **kwargs):
        if when(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGTERM)
        return function(*args, **kwargs)
    return signalled


def recorded_settings(data: str, seq_len: int | str, model: str = "tiny") -> dict:
    """A comparison's config.json as bench.planning.record writes it, for one trained on `data` at `seq_len`."""
    from bench.compare import parse_config
    from bench.config import SETTING
    from bench.planning import CONFIG_SCHEMA

    config = parse_config(["--data", data, "--seq-len", str(seq_len), "--model", model])
    return {"schema": CONFIG_SCHEMA, "config": config.recorded(SETTING), "derived": {}}


GOLDEN = Path(__file__).parent / "fixtures" / "comparison.json"  # tests/fixtures/make_comparison.py writes it


@pytest.fixture
def golden_results():
    """The golden comparison's results.json, read back typed (bench.analysis.results.load_results)."""
    from bench.analysis.results import load_results

    return load_results(json.loads(GOLDEN.read_text()))


def written_record(**fields) -> str:
    """A result.json's text as a finished run writes it (or, given `read_as`, an untrained control): the golden
    comparison's first run or control (tests/fixtures/comparison.json) with `fields` changed."""
    golden = json.loads(GOLDEN.read_text())
    return json.dumps({**(golden["controls"] if "read_as" in fields else golden["runs"])[0], **fields})
