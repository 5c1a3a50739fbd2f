"""bench.analysis.claims: Holm within a named family, and the one rule of every comparison."""

import pytest

from bench.analysis.claims import AHEAD, BEHIND, NOT_SEPARATED, beats_control, family, holm, measurable, outcome
from bench.analysis.findings import Comparison, Family, Gain


def test_holm_by_hand():
    # sorted 0.01, 0.03, 0.04 → 3·0.01 = 0.03, 2·0.03 = 0.06, max(0.06, 1·0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    adjusted = holm([None, 0.01, float("nan"), 0.04, 0.03])
    assert adjusted[0] is None and adjusted[2] is None  # no test: not counted (m = 3, not 5)
    assert adjusted[1:2] + adjusted[3:] == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.6]) == [1.0, 1.0] and holm([]) == []


def gain(objective: str, estimate: float, p: float | None, p_holm: float | None = None) -> Gain:
    return Gain(objective=objective, control="untrained", estimate=estimate, ci_low=None, ci_high=None, p=p, se=0.1,
                df=4.0, test_sampling=True, share_of_gain=None, p_holm=p_holm)


def test_a_family_is_named_and_sized_by_the_tests_it_holds():
    tests = [gain("a", 0.1, 0.01), gain("b", 0.1, 0.04), gain("c", 0.1, None)]
    adjusted, named = family("gains on X", tests)
    assert named == Family("gains on X", 2)
    assert [t.p_holm for t in adjusted] == pytest.approx([0.02, 0.04, None])
    assert adjusted[0].family == "gains on X" and tests[0].p_holm is None  # new records; the tests are unchanged


def test_a_pair_is_measurable_only_where_both_beat_their_controls():
    gains = {"a": gain("a", 0.1, 0.01, 0.01), "b": gain("b", 0.2, 0.2, 0.2), "c": gain("c", -0.1, 0.001, 0.001),
             "d": gain("d", 0.05, 0.049, 0.049)}
    assert beats_control(gains["a"]) and not beats_control(gains["b"]) and not beats_control(gains["c"])
    assert measurable(gains, "a", "d") and not measurable(gains, "a", "b") and not measurable(gains, "a", "c")
    assert not measurable(gains, "a", "missing")


def test_an_outcome_comes_from_holms_p_and_the_sign():
    pair = lambda estimate, p_holm: Comparison(objectives=["a", "b"], estimate=estimate, ci_low=None,  # noqa: E731
                                               ci_high=None, p=p_holm, se=0.1, df=4.0, test_sampling=True,
                                               p_holm=p_holm)
    assert outcome(pair(0.1, 0.01)) == AHEAD
    assert outcome(pair(-0.1, 0.01)) == BEHIND
    assert outcome(pair(0.3, 0.06)) == NOT_SEPARATED
    assert outcome(pair(0.3, None)) == NOT_SEPARATED


def test_a_family_counts_the_pairs_the_gate_left_untested_as_p_one():
    """Holm's family is fixed by what was compared: two pairs not measurable still count, so one judged pair with
    p = 0.02 is adjusted by 3, not by 1."""
    pair = Comparison(objectives=["a", "b"], estimate=0.1, ci_low=None, ci_high=None, p=0.02, se=0.01, df=10.0,
                      test_sampling=True)
    (alone,), size_alone = family("f", [pair])
    (fixed,), size_fixed = family("f", [pair], untested=2)
    assert alone.p_holm == pytest.approx(0.02) and size_alone.size == 1
    assert fixed.p_holm == pytest.approx(0.06) and size_fixed.size == 3
