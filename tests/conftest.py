"""The fixtures every test folder shares; plain helpers live in tests/helpers.py."""

import json
import os

# Tiny shapes: a second thread (torch's, or numpy's BLAS) only adds its start-up and synchronisation, and on a busy
# machine its spin-waits: the unit run took 8 minutes at the default of 2 threads while other work held both cores,
# 2 at one. Set before torch and numpy load, which read it once; the tests about thread counts set their own, and
# the processes the tests start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from bench.common.environment import describe, package_versions
from bench.data.corpus import load_corpus
from bench.training.distributed import make_fabric
from tests.helpers import GOLDEN


def pytest_report_header() -> str:
    # what the tests ran on, in every run's header (CI's fresh environments included): the ranges in pyproject.toml
    # are only as honest as the versions they were tested with
    return "objective-bench key packages: " + describe(package_versions())


@pytest.fixture(scope="module")
def corpus():
    """The embedded language's tiny corpus the training tests run on (a module may define its own)."""
    return load_corpus("synthetic:train=64,heldout=16,words=64,lexicon=8", 32)


@pytest.fixture(scope="module")
def fabric():
    """One CPU process's Fabric."""
    return make_fabric()


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)


@pytest.fixture
def golden_results():
    """The golden comparison's results.json, read back typed (bench.analysis.results.load_results)."""
    from bench.analysis.results import load_results

    return load_results(json.loads(GOLDEN.read_text()))
