"""bench.analysis.verdict on hand-made run records (tests/analysis/records.py): gains over the untrained controls,
the one claim rule, the mirrors, the answer and the signal density, each against arithmetic done here."""

import numpy as np
import pytest

from bench.analysis.findings import Answer, Family, ScoredExamples, Unread, Verdict, YardstickVerdict
from bench.analysis.results import by_control, by_objective
from bench.analysis.verdict import density_ratios, rise_with_compute, verdict
from tests.analysis.records import BUDGET, control, examples, run, score, task

TASKS = [task("states"), task("genre"), task("order", copies=("sentence_order",))]


def comparison(finals: dict[str, dict[str, float]], control_finals: dict[str, float], seeds: int = 5,
               signals: dict[str, tuple] | None = None) -> tuple[Verdict, Answer]:
    rng = np.random.default_rng(0)
    runs = [run(spec, seed, tasks, rng, signals=(signals or {}).get(spec, ())) for spec, tasks in finals.items()
            for seed in range(seeds)]
    controls = [control("untrained, x", "mlm", seed, control_finals, rng) for seed in range(seeds)]
    per_flop = {spec: 1e5 / BUDGET for spec in finals}
    positions = [{"objective": spec, "supervised_positions": 10.0} for spec in finals]
    return verdict(by_objective(runs), next(iter(finals)), {}, positions, per_flop, BUDGET, by_control(controls),
                   None, TASKS)


def item(found: Verdict, name: str) -> YardstickVerdict:
    return found.item(name)


def test_the_gains_are_differences_from_the_control_tested_in_one_family_per_yardstick():
    found, _ = comparison({"mlm": {"states": 0.9, "genre": 0.6, "order": 0.5}, "ar": {"states": 0.5, "genre": 0.5,
                                                                                      "order": 0.5}},
                       {"states": 0.5, "genre": 0.5, "order": 0.5})
    states = item(found, "states (frozen)")
    mine = next(g for g in states.gains if g.objective == "mlm")
    row = next(r for r in states.rows if r.objective == "mlm")
    assert mine.estimate == pytest.approx(row.estimate - states.controls[0].estimate)
    assert states.gain_family == Family("gains over the untrained controls on task states (frozen probe)", 2)
    assert mine.p_holm < 0.05 and states.measures_pretraining is True
    assert states.n_test == ScoredExamples(examples=400, units=400) and mine.test_sampling
    # ar did not beat its control: ar and mlm are not compared
    assert [p.outcome for p in states.comparisons] == ["not measurable"]
    assert found.wins.by_objective["ar"] == [] and "states (frozen)" in found.wins.by_objective["mlm"]


def test_a_yardstick_that_copies_an_objectives_training_ranks_nobody():
    found, _ = comparison({"mlm": {"states": 0.9, "genre": 0.5, "order": 0.5},
                        "mlm:pair=sop": {"states": 0.9, "genre": 0.5, "order": 0.9}},
                       {"states": 0.5, "genre": 0.5, "order": 0.5}, signals={"mlm:pair=sop": ("sentence_order",)})
    order = item(found, "order (frozen)")
    assert order.mirrors == ["mlm:pair=sop"] and order.copies == ["sentence_order"]
    assert all("order" not in name for wins in found.wins.by_objective.values() for name in wins)
    assert all(m.yardstick != "order (frozen)" for m in found.multipliers)
    # the neutral tasks' average leaves the copying task out and is the main yardstick
    assert found.main == "neutral_average_frozen" and "over 2" in item(found, found.main).label
    # where no objective trains on sentence order, the order task mirrors nobody: neutral, and in the average
    without, _ = comparison({"mlm": {"states": 0.9, "genre": 0.5, "order": 0.8},
                             "ar": {"states": 0.9, "genre": 0.5, "order": 0.5}}, {"states": 0.5, "genre": 0.5,
                                                                                  "order": 0.5})
    assert item(without, "order (frozen)").mirrors == [] and "over 3" in item(without, without.main).label
    averaged = next(r for r in item(without, without.main).rows if r.objective == "mlm")
    assert averaged.estimate == pytest.approx(np.mean([next(r for r in item(without, f"{name} (frozen)").rows
                                                            if r.objective == "mlm").estimate
                                                       for name in ("states", "genre", "order")]))


def test_the_answer_names_the_leader_its_multiplier_and_who_did_not_beat_its_control():
    found, answer = comparison({"mlm": {"states": 0.95, "genre": 0.7, "order": 0.5}, "ar": {"states": 0.8, "genre": 0.6,
                                                                                       "order": 0.5},
                        "electra": {"states": 0.5, "genre": 0.5, "order": 0.5}},
                       {"states": 0.5, "genre": 0.5, "order": 0.5})
    assert answer.yardstick == "neutral_average_frozen" and answer.leader == "mlm"
    assert answer.runner_up == "ar" and answer.separated and answer.did_not_beat_control == ["electra"]
    assert answer.multiplier.reading in ("direct", "reversed") and answer.scale.flops == BUDGET
    multiplier = next(m for m in found.multipliers if m.objective == "electra" and
                      m.yardstick == "neutral_average_frozen")
    assert isinstance(multiplier, Unread) and multiplier.outcome == "not measurable"


def test_the_answer_quotes_the_tables_multiplier_for_its_pair_one_number_one_interval():
    # the leader is the table's baseline: the answer is the table's entry read the other way round, exactly
    found, answer = comparison({"mlm": {"states": 0.95, "genre": 0.7, "order": 0.5},
                                "ar": {"states": 0.8, "genre": 0.6, "order": 0.5}}, {"states": 0.5, "genre": 0.5,
                                                                                     "order": 0.5})
    entry = next(m for m in found.multipliers if (m.objective, m.against, m.yardstick) == ("ar", "mlm", found.main))
    quoted = answer.multiplier
    assert (quoted.objective, quoted.against) == ("mlm", "ar") and quoted.multiplier == 1 / entry.multiplier
    assert (quoted.ci_low, quoted.ci_high) == (1 / entry.ci_high, 1 / entry.ci_low) and quoted.log_se == entry.log_se
    # neither is the baseline: the answer's pair is read once and the table holds it, the same object
    found, answer = comparison({"electra": {"states": 0.5, "genre": 0.5, "order": 0.5},
                                "mlm": {"states": 0.95, "genre": 0.7, "order": 0.5},
                                "ar": {"states": 0.8, "genre": 0.6, "order": 0.5}}, {"states": 0.5, "genre": 0.5,
                                                                                     "order": 0.5})
    assert found.baseline == "electra" and (answer.leader, answer.runner_up) == ("mlm", "ar")
    assert answer.multiplier in found.multipliers and answer.multiplier.against == "ar"


def test_a_multiplier_read_the_other_way_round_is_its_inverse_with_its_bounds_flipped():
    from bench.analysis.findings import Multiplier
    from bench.analysis.multipliers import inverted
    m = Multiplier(objective="ar", against="mlm", yardstick="y", multiplier=0.25, kind="=", reading="direct",
                   seeds=[5, 4], ci_low=None, ci_high=0.5, ci_low_kind="<", ci_high_kind="=", resamples=10,
                   range=[0.05, 1.0])
    back = inverted(m)
    assert (back.objective, back.against, back.multiplier, back.reading) == ("mlm", "ar", 4.0, "reversed")
    assert (back.ci_low, back.ci_high, back.ci_low_kind, back.ci_high_kind) == (2.0, None, "=", ">")
    assert back.seeds == [4, 5] and back.range == [1.0, 20.0] and inverted(back) == m


def test_signal_density_is_per_sequence_and_per_flop():
    # ar: 63 positions per sequence against mlm's 9.45, but 1.1× mlm's FLOPs per supervised position
    positions = [{"objective": "mlm", "supervised_positions": 9.45}, {"objective": "ar", "supervised_positions": 63.0}]
    ratios = density_ratios(positions, {"mlm": 9.45e5 / 1e12, "ar": 5.727e6 / 1e12}, "mlm")
    assert ratios["ar"].per_sequence == pytest.approx(63 / 9.45)
    assert ratios["ar"].per_flop == pytest.approx(5.727e6 / 9.45e5) and ratios["mlm"].per_flop == 1.0


def test_rise_with_compute_is_spearmans_rho():
    assert rise_with_compute([0, 1, 2, 3], [0.1, 0.2, 0.3, 0.4]) == pytest.approx(1.0)
    assert rise_with_compute([0, 1, 2, 3], [0.4, 0.3, 0.2, 0.1]) == pytest.approx(-1.0)
    assert rise_with_compute([0, 1], [0.1, 0.2]) is None and rise_with_compute([0, 1, 2], [0.3] * 3) is None


def test_objectives_with_different_controls_are_compared_on_what_pretraining_added():
    """mlm 0.80 over a bidirectional control at 0.60, ar 0.75 over a causal one at 0.45: the scores differ by +0.05,
    the gains by −0.10. The comparison is of the gains (its interval from all four groups), the scores beside it;
    two objectives with one control are compared on their scores."""
    rng = np.random.default_rng(1)
    finals = {"mlm": 0.80, "ar": 0.75, "electra": 0.70}
    controls_of = {"mlm": "untrained, bidirectional", "ar": "untrained, causal", "electra": "untrained, bidirectional"}
    runs = [run(spec, seed, {"states": value}, rng, control=controls_of[spec], count=4000)
            for spec, value in finals.items() for seed in range(5)]
    controls = [control(name, read_as, seed, {"states": value}, rng, count=4000) for seed in range(5)
                for name, read_as, value in (("untrained, bidirectional", "mlm", 0.60), ("untrained, causal", "ar", 0.45))]
    found, _ = verdict(by_objective(runs), "mlm", {}, [{"objective": s, "supervised_positions": 10.0} for s in finals],
                       {s: 1e5 / BUDGET for s in finals}, BUDGET, by_control(controls), None, [task("states")])
    states = item(found, "states (frozen)")
    pairs = {tuple(p.objectives): p for p in states.comparisons}
    mean = {r.objective: r.estimate for r in states.rows} | {c.control: c.estimate for c in states.controls}
    mlm_ar = pairs[("mlm", "ar")]
    assert mlm_ar.of == "gains" and mlm_ar.outcome == "behind"
    assert mlm_ar.estimate == pytest.approx((mean["mlm"] - mean["untrained, bidirectional"])
                                            - (mean["ar"] - mean["untrained, causal"]))
    assert mlm_ar.raw.estimate == pytest.approx(mean["mlm"] - mean["ar"]) and mlm_ar.raw.estimate > 0
    gains = {g.objective: g for g in states.gains}
    assert mlm_ar.se > max(gains["mlm"].se, gains["ar"].se)  # four groups' spread, not two
    mlm_electra = pairs[("mlm", "electra")]
    assert mlm_electra.of == "scores" and mlm_electra.raw is None
    assert mlm_electra.estimate == pytest.approx(mean["mlm"] - mean["electra"])
    assert states.comparison_family.size == 3


def test_an_objective_that_did_not_learn_its_own_task_is_ranked_nowhere():
    finals = {"mlm": {"states": 0.95, "genre": 0.7, "order": 0.5}, "ar": {"states": 0.8, "genre": 0.6, "order": 0.5}}
    rng = np.random.default_rng(0)
    runs = [run(spec, seed, tasks, rng) for spec, tasks in finals.items() for seed in range(5)]
    controls = [control("untrained, x", "mlm", seed, {"states": 0.5, "genre": 0.5, "order": 0.5}, rng)
                for seed in range(5)]
    args = (by_objective(runs), "mlm", {}, [{"objective": s, "supervised_positions": 10.0} for s in finals],
            {s: 1e5 / BUDGET for s in finals}, BUDGET, by_control(controls), None, TASKS)
    _, ranked = verdict(*args)
    assert ranked.leader == "mlm" and ranked.did_not_learn_task == []
    _, answer = verdict(*args, did_not_learn=("mlm",))
    assert answer.leader == "ar" and answer.did_not_learn_task == ["mlm"]
    assert "mlm" not in answer.beat_control + answer.did_not_beat_control and answer.runner_up is None
    from bench.report.wording import answer_sentence
    assert "mlm did not learn its own task" in answer_sentence(answer) and "ranked nowhere" in answer_sentence(answer)
    assert answer.unlearned_beat_control == ["mlm"]
    # neither learned its task, both beat their controls: the answer names no leader, and says they beat them
    _, neither = verdict(*args, did_not_learn=("mlm", "ar"))
    assert neither.leader is None and neither.unlearned_beat_control == ["mlm", "ar"]
    sentence = answer_sentence(neither)
    assert "mlm and ar beat their untrained control" in sentence and "no objective beats" not in sentence
    assert "no objective that learned its own task does" in sentence


def test_the_answer_says_first_when_the_frozen_and_fine_tuned_reads_disagree():
    from bench.report.wording import answer_sentence

    agreeing, disagreeing = ({"mlm": {"states": 0.95, "genre": 0.7}, "ar": {"states": ar, "genre": ar}}
                             for ar in (0.8, 0.5))
    rng = np.random.default_rng(0)
    tasks = [task("states"), task("genre")]

    def answer_of(finals, finetuned):
        runs = [run(spec, seed, scores, rng) for spec, scores in finals.items() for seed in range(5)]
        # the fine-tuned scores as `finetuned` gives them (run() draws both reads around one value)
        for r in runs:
            for name, record in r.downstream.items():
                record["finetuned"].update(score(examples(finetuned[r.objective][name], 400, rng)))
        controls = [control("untrained, x", "mlm", seed, {"states": 0.5, "genre": 0.5}, rng) for seed in range(5)]
        return verdict(by_objective(runs), "mlm", {}, [{"objective": s, "supervised_positions": 10.0} for s in finals],
                       {s: 1e5 / BUDGET for s in finals}, BUDGET, by_control(controls), None, tasks)[1]

    same = answer_of(agreeing, agreeing)
    assert same.other_read.agrees and same.other_read.leader == "mlm"
    assert not answer_sentence(same).startswith("The two reads") and "(fine-tuned)) agrees" in answer_sentence(same)
    split = answer_of(agreeing, disagreeing)  # frozen: both beat their controls; fine-tuned: only mlm
    assert not split.other_read.agrees and split.other_read.beat_control == ["mlm"]
    assert answer_sentence(split).startswith("The two reads of the neutral tasks disagree: read fine-tuned "
                                            "(neutral tasks' average over 2 (fine-tuned)), there only mlm beats")
    # the other read names a leader only where it is separated there, as the main read does
    only_mlm = {"mlm": {"states": 0.9, "genre": 0.9}, "ar": {"states": 0.5, "genre": 0.5}}
    tied = answer_of(only_mlm, {"mlm": {"states": 0.8, "genre": 0.8}, "ar": {"states": 0.8, "genre": 0.8}})
    assert tied.other_read.beat_control in (["mlm", "ar"], ["ar", "mlm"]) and not tied.other_read.separated
    assert " leads" not in answer_sentence(tied).split(". ")[0]
    assert "none is separated from the others (Holm)" in answer_sentence(tied)
    apart = answer_of(only_mlm, {"mlm": {"states": 0.95, "genre": 0.95}, "ar": {"states": 0.7, "genre": 0.7}})
    assert apart.other_read.separated and "mlm leads, separated from the others (Holm)" in answer_sentence(apart)


def test_leads_is_said_only_of_a_leader_separated_from_the_others_and_ranks_follow_the_gains():
    from bench.report.wording import answer_sentence

    rng = np.random.default_rng(3)
    # ar scores higher than mlm, but its causal control is far higher: mlm's gain is the larger
    finals = {"mlm": {"states": 0.80, "genre": 0.80}, "ar": {"states": 0.82, "genre": 0.82}}
    controls_of = {"mlm": "untrained, bidirectional", "ar": "untrained, causal"}
    runs = [run(spec, seed, scores, rng, control=controls_of[spec], count=2000) for spec, scores in finals.items()
            for seed in range(5)]
    controls = [control(name, read_as, seed, {"states": value, "genre": value}, rng, count=2000) for seed in range(5)
                for name, read_as, value in (("untrained, bidirectional", "mlm", 0.5),
                                             ("untrained, causal", "ar", 0.7))]
    tasks = [task("states"), task("genre")]
    _, answer = verdict(by_objective(runs), "mlm", {}, [{"objective": s, "supervised_positions": 10.0} for s in finals],
                        {s: 1e5 / BUDGET for s in finals}, BUDGET, by_control(controls), None, tasks)
    assert answer.leader == "mlm" and answer.runner_up == "ar" and answer.separated
    assert "**mlm leads**" in answer_sentence(answer)
    close = {"mlm": {"states": 0.80, "genre": 0.80}, "ar": {"states": 0.80, "genre": 0.80}}
    runs = [run(spec, seed, scores, rng, count=400) for spec, scores in close.items() for seed in range(5)]
    controls = [control("untrained, x", "mlm", seed, {"states": 0.5, "genre": 0.5}, rng) for seed in range(5)]
    _, tied = verdict(by_objective(runs), "mlm", {}, [{"objective": s, "supervised_positions": 10.0} for s in close],
                      {s: 1e5 / BUDGET for s in close}, BUDGET, by_control(controls), None, tasks)
    sentence = answer_sentence(tied)
    assert not tied.separated and "leads**" not in sentence and "no objective leads" in sentence
    assert "less compute" not in sentence


def test_the_comparison_family_is_every_pair_of_objectives_whatever_the_gate_lets_through():
    found, _ = comparison({"mlm": {"states": 0.9, "genre": 0.9}, "ar": {"states": 0.85, "genre": 0.85},
                           "electra": {"states": 0.5, "genre": 0.5}},
                          {"states": 0.5, "genre": 0.5})
    states = item(found, "states (frozen)")
    assert [p.outcome for p in states.comparisons].count("not measurable") == 2  # electra beat nothing
    assert states.comparison_family.size == 3  # three objectives, three pairs
    judged = next(p for p in states.comparisons if p.outcome != "not measurable")
    assert judged.p_holm == pytest.approx(min(1.0, 3 * judged.p))


def test_an_answer_points_only_at_multiplier_rows_the_table_holds_and_says_why_none_was_read():
    """Issue 59 item 2: comparisons run with --no-probe-curves read the tasks only at the budget, so no multiplier is
    read on the main yardstick; their answers said "the table below has each one's" of rows the table lacked, and a
    separated leader's missing multiplier went unmentioned (frontier 4e11: ar>mlm@0.25, multiplier None)."""
    from dataclasses import replace

    from bench.analysis.findings import Multiplier
    from bench.report.wording import NO_CURVE, answer_sentence

    def answered(finals: dict, curves: bool) -> tuple[Verdict, Answer]:
        rng = np.random.default_rng(0)
        runs = [run(spec, seed, tasks, rng) for spec, tasks in finals.items() for seed in range(5)]
        if not curves:  # as --no-probe-curves writes them: the held-out loss at every checkpoint, no task read
            runs = [replace(r, curve=tuple(replace(row, downstream={}) for row in r.curve)) for r in runs]
        controls = [control("untrained, x", "mlm", seed, {"states": 0.5, "genre": 0.5}, rng) for seed in range(5)]
        return verdict(by_objective(runs), "mlm", {}, [{"objective": s, "supervised_positions": 10.0} for s in finals],
                       {s: 1e5 / BUDGET for s in finals}, BUDGET, by_control(controls), None,
                       [task("states"), task("genre")])

    apart = {"mlm": {"states": 0.95, "genre": 0.95}, "ar": {"states": 0.75, "genre": 0.75}}
    found, answer = answered(apart, curves=False)
    assert answer.separated and answer.multiplier is None and answer.curves is False
    assert f"; no compute multiplier against ar can be read ({NO_CURVE})" in answer_sentence(answer)
    assert not any(isinstance(m, Multiplier) for m in found.multipliers)
    _, answer = answered(apart, curves=True)
    assert answer.curves is True and answer.multiplier is not None and "can be read" not in answer_sentence(answer)

    close = {"mlm": {"states": 0.80, "genre": 0.80}, "ar": {"states": 0.80, "genre": 0.80}}
    found, tied = answered(close, curves=False)
    assert not tied.separated and tied.tabled is False
    assert "table below" not in answer_sentence(tied) and NO_CURVE in answer_sentence(tied)
    found, tied = answered(close, curves=True)
    assert tied.tabled is True and "(the table below has each one's)" in answer_sentence(tied)
    assert any(isinstance(m, Multiplier) and (m.objective, m.against) == ("ar", "mlm") for m in found.multipliers)
    # a results.json from before: the pointer only beside a multiplier it quotes
    legacy = replace(tied, tabled=None, curves=None)
    assert "(the table below has each one's)" in answer_sentence(legacy)
    assert "table below" not in answer_sentence(replace(legacy, multiplier=None))
