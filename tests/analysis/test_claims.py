"""bench.analysis.claims: Holm within a named family, and the one rule of every comparison."""

import pytest

from bench.analysis.claims import (AHEAD, BEHIND, NOT_MEASURABLE, NOT_SEPARATED, beats_control, family, holm,
                                   measurable, outcome)


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 → 3·0.01 = 0.03, 2·0.03 = 0.06, max(0.06, 1·0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    adjusted = holm([None, 0.01, float("nan"), 0.04, 0.03])
    assert adjusted[0] is None and adjusted[2] is None  # no test: not counted (m = 3, not 5)
    assert adjusted[1:2] + adjusted[3:] == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.6]) == [1.0, 1.0] and holm([]) == []


def test_a_family_is_named_and_sized_by_the_tests_it_holds():
    tests = [{"p": 0.01}, {"p": 0.04}, {"p": None}]
    named = family("gains on X", tests)
    assert named == {"family": "gains on X", "size": 2}
    assert [t["p_holm"] for t in tests] == pytest.approx([0.02, 0.04, None]) and tests[0]["family"] == "gains on X"


def test_a_pair_is_measurable_only_where_both_beat_their_controls():
    gains = {"a": {"estimate": 0.1, "p_holm": 0.01}, "b": {"estimate": 0.2, "p_holm": 0.2},
             "c": {"estimate": -0.1, "p_holm": 0.001}, "d": {"estimate": 0.05, "p_holm": 0.049}}
    assert beats_control(gains["a"]) and not beats_control(gains["b"]) and not beats_control(gains["c"])
    assert measurable(gains, "a", "d") and not measurable(gains, "a", "b") and not measurable(gains, "a", "c")
    assert not measurable(gains, "a", "missing")


def test_an_outcome_comes_from_holms_p_and_the_sign():
    assert outcome({"estimate": 0.1, "p_holm": 0.01}) == AHEAD
    assert outcome({"estimate": -0.1, "p_holm": 0.01}) == BEHIND
    assert outcome({"estimate": 0.3, "p_holm": 0.06}) == NOT_SEPARATED
    assert outcome({"outcome": NOT_MEASURABLE, "estimate": 0.3}) == NOT_MEASURABLE
