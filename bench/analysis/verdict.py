"""The verdict of a comparison, yardstick by yardstick, and its answer.

Per yardstick: every objective's mean with its interval (seeds and test examples, bench.analysis.uncertainty); its gain
over its own untrained control (one Holm family per yardstick); the comparisons of objectives under the one claim rule
(bench.analysis.claims: judged only where both beat their controls; one Holm family per yardstick); which objectives
the yardstick mirrors; and, on the neutral yardsticks with curves, compute multipliers. The answer comes from the main
yardstick (bench.analysis.measures.main_yardstick). Findings only: the report words them.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

import numpy as np
from scipy import stats

from bench.analysis import uncertainty
from bench.analysis.claims import (AHEAD, BEHIND, NOT_MEASURABLE, beats_control, family, finite_or_none, measurable,
                                   outcome)
from bench.analysis.findings import (Answer, Comparison, ControlMean, DensityRatio, Family, Gain, Mean, Multiplier,
                                     OtherRead, RawDifference, Scale, ScoredExamples, Unjudged, Unread, Verdict, Wins,
                                     YardstickVerdict)
from bench.analysis.measures import Measure, curve_groups, group, main_yardstick, yardsticks
from bench.analysis.multipliers import Curve, inverted, multiplier
from bench.analysis.uncertainty import Group
from bench.training.records import ControlRecord, RunRecord


def signed(estimate: uncertainty.Estimate, sign: float = 1.0) -> dict:
    """An Estimate's fields, turned so that a positive estimate is an improvement whatever the direction."""
    record = estimate.record()
    low, high = record["ci_low"], record["ci_high"]
    record["estimate"] *= sign
    if low is not None:
        record["ci_low"], record["ci_high"] = (low, high) if sign > 0 else (-high, -low)
    return record


def test_size(found: Group | None) -> ScoredExamples | None:
    """How many test examples and scored units a yardstick's score rests on (summed over its tasks)."""
    if found is None or found.parts is None:
        return None
    return ScoredExamples(examples=int(sum(p.units.shape[0] for p in found.parts)),
                    units=int(sum(p.units.sum() for p in found.parts)))


def rise_with_compute(flops: list[float], values: list[float]) -> float | None:
    """Spearman's ρ of a mean curve against its FLOPs (0 for the untrained control): 1 when it only rises; None for
    a flat curve or fewer than three points."""
    if len(values) < 3 or len(set(values)) < 2:
        return None
    return finite_or_none(float(stats.spearmanr(flops, values)[0]))


def gains(yardstick: Measure, groups: dict[str, Group], controls: dict[str, Group], control_of: dict[str, str],
          sees: dict[str, str], curves: dict) -> list[Gain]:
    """Each objective's gain over its own untrained control: the difference (test examples paired), its interval
    and p, the share of the gain available up to the ceiling, and ρ of its curve with compute (before Holm)."""
    sign, found = (1.0 if yardstick.higher_is_better else -1.0), []
    for spec, mine in groups.items():
        control = controls.get(control_of[spec])
        if control is None:
            continue
        difference = signed(uncertainty.difference(mine, control), sign)
        ceiling, base = yardstick.ceiling(sees[spec]), float(control.values.mean())
        available = None if ceiling is None else sign * (ceiling - base)
        rise = None
        if curves.get(spec):
            flops, points = curves[spec]
            rise = rise_with_compute([0.0, *flops], [sign * base, *(sign * g.values.mean() for g in points)])
        found.append(Gain(objective=spec, control=control_of[spec], **difference,
                          share_of_gain=difference["estimate"] / available if available and available > 0 else None,
                          rise=rise))
    return found


def comparisons(label: str, groups: dict[str, Group], gained: dict[str, Gain], sign: float,
                controls: dict[str, Group], control_of: dict[str, str]) -> tuple[list[Comparison | Unjudged], Family]:
    """Every pair of objectives under the one claim rule, and their Holm family. Two objectives with one untrained
    control are compared on their scores (the control would cancel); two with different controls (a bidirectional
    and a causal backbone, whose untrained readings already differ) on their gains over their own controls, what
    pretraining added, the difference of their scores kept beside it."""
    found: list[Comparison | Unjudged] = []
    for first, second in combinations(groups, 2):
        if not measurable(gained, first, second):
            found.append(Unjudged(objectives=[first, second], outcome=NOT_MEASURABLE,
                                  estimate=sign * float(groups[first].values.mean() - groups[second].values.mean())))
            continue
        raw = signed(uncertainty.difference(groups[first], groups[second]), sign)
        if control_of[first] == control_of[second]:
            found.append(Comparison(objectives=[first, second], **raw))
            continue
        of_gains = uncertainty.contrast([groups[first], controls[control_of[first]], groups[second],
                                         controls[control_of[second]]], [1.0, -1.0, -1.0, 1.0])
        found.append(Comparison(objectives=[first, second], **signed(of_gains, sign), of="gains",
                                raw=RawDifference(raw["estimate"], raw["ci_low"], raw["ci_high"])))
    judged, named = family(f"comparisons of objectives on {label}",
                           [pair for pair in found if isinstance(pair, Comparison)],
                           untested=sum(isinstance(pair, Unjudged) for pair in found))
    tested = iter(replace(pair, outcome=outcome(pair)) for pair in judged)
    return [next(tested) if isinstance(pair, Comparison) else pair for pair in found], named


def yardstick_verdict(yardstick: Measure, grouped: dict[str, list[RunRecord]], controls: dict[str, list[ControlRecord]],
                      signals: dict[str, list[str]]) -> YardstickVerdict | None:
    """One yardstick's findings; None where some objective has no reading on it."""
    groups = {spec: group(runs, yardstick.final) for spec, runs in grouped.items()}
    if any(g is None for g in groups.values()):
        return None
    control_groups = {name: found for name, runs in controls.items() for found in [group(runs, yardstick.final)]
                      if found is not None}
    control_of = {spec: runs[0].control for spec, runs in grouped.items()}
    sees = {spec: runs[0].sees for spec, runs in grouped.items()}
    curves = {spec: curve_groups(runs, yardstick) for spec, runs in grouped.items()}
    sign = 1.0 if yardstick.higher_is_better else -1.0
    found_gains, gain_family = family(f"gains over the untrained controls on {yardstick.label}",
                                      gains(yardstick, groups, control_groups, control_of, sees, curves))
    pairs, pair_family = comparisons(yardstick.label, groups, {g.objective: g for g in found_gains}, sign,
                                     control_groups, control_of)
    rows = sorted((Mean(objective=spec, **uncertainty.mean(g).record(), seeds=g.seeds) for spec, g in groups.items()),
                  key=lambda row: -sign * row.estimate)
    return YardstickVerdict(
        yardstick=yardstick.name, label=yardstick.label, higher_is_better=yardstick.higher_is_better,
        mirrors=yardstick.mirrors(signals), copies=list(yardstick.copies),
        n_test=test_size(next(iter(groups.values()))), rows=rows,
        controls=[ControlMean(control=name, **uncertainty.mean(g).record(), seeds=g.seeds)
                  for name, g in control_groups.items()],
        input_only={s: v for s in dict.fromkeys(sees.values()) for v in [yardstick.input_only(s)] if v is not None},
        ceilings={s: v for s in dict.fromkeys(sees.values()) for v in [yardstick.ceiling(s)] if v is not None},
        gains=found_gains, gain_family=gain_family,
        measures_pretraining=True if any(beats_control(g) for g in found_gains) else
        (False if found_gains and all(g.p is not None for g in found_gains) else None),
        comparisons=pairs, comparison_family=pair_family)


def curve_of(runs: list[RunRecord], yardstick: Measure, control: list[ControlRecord] | None = None) -> Curve | None:
    """The runs' curve on the yardstick; given their untrained control's records, their gain over it."""
    found, final = curve_groups(runs, yardstick), group(runs, yardstick.final)
    start = group(control, yardstick.final) if control else None
    if found is None or final is None or (control and start is None):
        return None
    return Curve(np.array(found[0], dtype=float), tuple(found[1]), final, start)


def pair_curves(yardstick: Measure, grouped: dict[str, list[RunRecord]], controls: dict[str, list[ControlRecord]],
                base: str, other: str) -> tuple[Curve | None, Curve | None]:
    """Two objectives' curves for a multiplier: their scores where they share an untrained control, else their gains
    over their own controls (as their comparison is judged), so that where a bidirectional and a causal backbone
    start does not enter a multiplier of pretraining."""
    starts = {spec: grouped[spec][0].control for spec in (base, other)}
    on_gains = starts[base] != starts[other]
    return tuple(curve_of(grouped[spec], yardstick, controls.get(starts[spec]) if on_gains else None)
                 for spec in (base, other))


def multipliers_on(item: YardstickVerdict, yardstick: Measure, grouped: dict[str, list[RunRecord]], baseline: str,
                   budget: float, controls: dict[str, list[ControlRecord]]) -> list[Multiplier | Unread]:
    """Against the baseline, every objective's multiplier on a neutral yardstick with curves, where the pair is
    measurable (both beat their controls); the rest are recorded as not measurable."""
    gained = {g.objective: g for g in item.gains}
    found: list[Multiplier | Unread] = []
    for spec in grouped:
        if spec == baseline:
            continue
        if not measurable(gained, spec, baseline):
            found.append(Unread(objective=spec, against=baseline, yardstick=item.yardstick))
            continue
        base, other = pair_curves(yardstick, grouped, controls, baseline, spec)
        if base is not None and other is not None:
            found.append(replace(multiplier(base, other, budget, yardstick.higher_is_better), objective=spec,
                                 against=baseline, yardstick=item.yardstick))
    return found


def density_ratios(positions: list[dict], per_flop: dict[str, float], baseline: str) -> dict[str, DensityRatio]:
    """Per objective against the baseline: supervised positions per sequence (analytic, at the final length) and per
    FLOP (`per_flop`, measured over the runs: a schedule's pieces and ELECTRA's generator all counted) over the
    baseline's."""
    per_sequence = {row["objective"]: row["supervised_positions"] for row in positions}
    return {spec: DensityRatio(per_sequence=per_sequence[spec] / per_sequence[baseline] if spec in per_sequence and
                               per_sequence.get(baseline) else None,
                               per_flop=per_flop[spec] / per_flop[baseline] if per_flop.get(baseline) else None)
            for spec in per_flop if baseline in per_flop}


def verdict(grouped: dict[str, list[RunRecord]], baseline: str, ceilings: dict, positions: list[dict],
            per_flop: dict[str, float], budget: float, controls: dict[str, list[ControlRecord]] | None = None,
            input_only: dict | None = None, tasks: list[dict] | None = None,
            did_not_learn: tuple[str, ...] = ()) -> tuple[Verdict, Answer]:
    """Every yardstick's findings, the main one named, the multipliers on the neutral yardsticks with curves, the
    signal density per sequence and per FLOP, and per objective its wins over its control on neutral yardsticks;
    and the answer."""
    signals = {spec: runs[0].signals for spec, runs in grouped.items()}
    found, measured = [], {}
    for yardstick in yardsticks([r for runs in grouped.values() for r in runs], ceilings, input_only, tasks):
        item = yardstick_verdict(yardstick, grouped, controls or {}, signals)
        if item is not None:
            found.append(item)
            measured[yardstick.name] = yardstick
    main = main_yardstick(list(measured.values()), {item.yardstick: item.mirrors for item in found})
    multipliers = [m for item in found if not item.mirrors and measured[item.yardstick].point is not None
                   for m in multipliers_on(item, measured[item.yardstick], grouped, baseline, budget, controls or {})]
    neutral = [item for item in found if not item.mirrors and item.measures_pretraining is not None]
    wins = {spec: [item.yardstick for item in neutral if beats_control(item.gain_of(spec))] for spec in grouped}
    found_verdict = Verdict(baseline=baseline, main=main, yardsticks=found, multipliers=multipliers,
                            wins=Wins(neutral_yardsticks=len(neutral), by_objective=wins),
                            signal_density_ratio=density_ratios(positions, per_flop, baseline))
    found_answer = answer(found_verdict, measured, grouped, budget, did_not_learn, controls or {})
    quoted = found_answer.multiplier
    if quoted is not None and not any(isinstance(m, Multiplier) and m.yardstick == quoted.yardstick and
                                      {m.objective, m.against} == {quoted.objective, quoted.against}
                                      for m in multipliers):
        found_verdict = replace(found_verdict, multipliers=[*multipliers, quoted])  # the table holds what it quotes
    return found_verdict, found_answer


# the main yardstick's neutral tasks read the other way: the answer says whether that read agrees
OTHER_READ = {"neutral_average_frozen": "neutral_average_finetuned"}


def answer(v: Verdict, measured: dict[str, Measure], grouped: dict[str, list[RunRecord]], budget: float,
           did_not_learn: tuple[str, ...] = (), controls: dict[str, list[ControlRecord]] | None = None) -> Answer:
    """Which objective leads on the main yardstick, by what multiplier against the runner-up, which are not separated
    from it, which did not beat their control, and the scale the answer speaks for. An objective whose runs did not
    learn their own task is ranked nowhere, whatever it scored."""
    runs = [run for spec_runs in grouped.values() for run in spec_runs]
    scale = Scale(parameters=runs[0].backbone_parameters, tokens=sum(r.tokens for r in runs) / len(runs),
                  flops=budget)
    item = v.item(v.main) if v.main else None
    if item is None:
        return Answer(yardstick=None, label=None, leader=None, did_not_beat_control=[], beat_control=[], scale=scale,
                      separated=False, not_separated_from=[], runner_up=None, multiplier=None, family=None,
                      did_not_learn_task=list(did_not_learn))
    ranked = by_gain(item, [row.objective for row in item.rows if row.objective not in did_not_learn])
    beat = [spec for spec in ranked if beats_control(item.gain_of(spec))]
    unlearned_beat = [spec for spec in by_gain(item, [row.objective for row in item.rows
                                                      if row.objective in did_not_learn])
                      if beats_control(item.gain_of(spec))]
    other = v.item(OTHER_READ[item.yardstick]) if item.yardstick in OTHER_READ else None
    other_read = None
    if other is not None:
        other_beat = [spec for spec in by_gain(other, [row.objective for row in other.rows])
                      if spec not in did_not_learn and beats_control(other.gain_of(spec))]
        leader = other_beat[0] if other_beat else None
        separated = len(other_beat) > 1 and ahead_of(other, leader, other_beat[1:]) == other_beat[1:]
        other_read = OtherRead(yardstick=other.yardstick, label=other.label, leader=leader, beat_control=other_beat,
                               agrees=leader == (beat[0] if beat else None) and set(other_beat) == set(beat),
                               separated=separated)
    found = Answer(yardstick=item.yardstick, label=item.label, leader=beat[0] if beat else None,
                   did_not_beat_control=[spec for spec in ranked if spec not in beat],
                   beat_control=beat, scale=scale, separated=False, not_separated_from=[], runner_up=None,
                   multiplier=None, family=item.comparison_family, did_not_learn_task=list(did_not_learn),
                   other_read=other_read, unlearned_beat_control=unlearned_beat or None)
    if len(beat) < 2:
        return found
    leader, others = beat[0], beat[1:]
    behind = ahead_of(item, leader, others)
    tied = [spec for spec in others if spec not in behind]
    # what the answer may point at: a row the multiplier table holds, and why it holds none
    tabled = all(spec == v.baseline or any(isinstance(m, Multiplier) and (m.objective, m.against, m.yardstick) ==
                                           (spec, v.baseline, item.yardstick) for m in v.multipliers)
                 for spec in [leader, *tied])
    return replace(found, runner_up=others[0], separated=len(behind) == len(others), not_separated_from=tied,
                   multiplier=pair_multiplier(v, measured[item.yardstick], grouped, leader, others[0], budget,
                                              controls or {}),
                   curves=all(curve_groups(grouped[spec], measured[item.yardstick]) is not None for spec in beat),
                   tabled=tabled if tied else None)


def pair_multiplier(v: Verdict, yardstick: Measure, grouped: dict[str, list[RunRecord]], leader: str,
                    runner_up: str, budget: float, controls: dict[str, list[ControlRecord]]) -> Multiplier | None:
    """The leader's multiplier against the runner-up: the verdict's table entry for the pair (inverted where the
    leader is the table's baseline), so the answer, the table and results.json quote one number with one interval;
    read afresh only for a pair the table does not hold (the answer's pair is then added to the table)."""
    for found in v.multipliers:
        if isinstance(found, Multiplier) and found.yardstick == yardstick.name:
            if (found.objective, found.against) == (leader, runner_up):
                return found
            if (found.objective, found.against) == (runner_up, leader):
                return inverted(found)
    base, other = pair_curves(yardstick, grouped, controls, runner_up, leader)
    if base is None or other is None:
        return None
    return replace(multiplier(base, other, budget, yardstick.higher_is_better), objective=leader, against=runner_up,
                   yardstick=yardstick.name)


def by_gain(item: YardstickVerdict, specs: list[str]) -> list[str]:
    """The objectives in the order of what pretraining added, their gains over their own controls (the order of
    their scores where they share a control), as the comparisons judge them."""
    gained = {spec: item.gain_of(spec) for spec in specs}
    return sorted(specs, key=lambda spec: -(gained[spec].estimate if gained[spec] is not None else float("-inf")))


def ahead_of(item: YardstickVerdict, leader: str, others: list[str]) -> list[str]:
    """The others the leader is separated from and ahead of on the item's yardstick (Holm within its family)."""
    tests = {tuple(p.objectives): p for p in item.comparisons}
    return [spec for spec in others if outcome_for(tests, leader, spec) == AHEAD]


def outcome_for(tests: dict[tuple[str, ...], Comparison | Unjudged], first: str, second: str) -> str:
    """A pair's outcome read for `first` (a pair is stored in one order)."""
    if (first, second) in tests:
        return tests[(first, second)].outcome
    found = tests[(second, first)].outcome
    return {AHEAD: BEHIND, BEHIND: AHEAD}.get(found, found)
