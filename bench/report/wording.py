"""Every sentence and number format of the reports, in one place: the analysis returns findings, this module words
them (p-values, intervals, multipliers, the answer, each yardstick's outcome)."""

from __future__ import annotations

import math

from bench.analysis.claims import ALPHA, beats_control, holm_interval
from bench.analysis.findings import Answer, Crossover, Family, Multiplier, Unread, YardstickVerdict

# the scale of the smallest published comparison of these objectives (Clark et al. 2020, ELECTRA, Table 1:
# ELECTRA-Small's 1.4e18 FLOPs and 6.25 % of it, 8.9e16; docs/sources.md): below it nothing published says which wins
PUBLISHED_FLOPS = 1e17


def p_text(p: float | None) -> str:
    """A p-value as the reports print it."""
    return "n/a" if p is None else "< 0.0001" if p < 1e-4 else f"{p:.2g}"


def interval_text(low: float | None, high: float | None, signed: bool = False) -> str:
    """"(+0.012 to +0.034)" or "" without an interval (one seed)."""
    if low is None or high is None:
        return ""
    form = "+.3f" if signed else ".3f"
    return f"({low:{form}} to {high:{form}})"


def tested_text(test: object) -> str:
    """A Holm-tested difference (a gain, a comparison, a "beats" claim) with the interval that agrees with its outcome
    (bench.analysis.claims.holm_interval: it excludes 0 exactly when the test rejects). A record without what that
    interval needs (a sweep's written before it) keeps its 95 % interval, labelled unadjusted."""
    low, high = holm_interval(test)
    if low is not None:
        return estimate_text(test.estimate, low, high, signed=True)
    unadjusted = test.ci_low is not None and test.p_holm is not None
    return estimate_text(test.estimate, test.ci_low, test.ci_high, signed=True) + (" (95 %, unadjusted)" if unadjusted
                                                                                    else "")


def estimate_text(estimate: float, ci_low: float | None = None, ci_high: float | None = None, signed: bool = False,
                  digits: int = 3) -> str:
    """"0.812 (0.790 to 0.834)": an estimate and its interval, if it has one."""
    form = f"+.{digits}f" if signed else f".{digits}f"
    interval = interval_text(ci_low, ci_high, signed)
    return f"{estimate:{form}}" + (f" {interval}" if interval else "")


def times(m: float) -> str:
    """A multiplier to read: two significant figures, no exponent notation for the sizes that occur."""
    return f"{m:.0f}" if m >= 100 else f"{m:.1f}" if m >= 10 else f"{m:.2g}"


def estimable(low: float | None, high: float | None) -> bool:
    """Whether a fitted quantity has a finite two-sided interval (too many resamples that never meet or rise leave
    none): only then is its point stated."""
    return low is not None and high is not None and low > 0 and math.isfinite(high)


def inside(low: float, high: float, budgets: list[float]) -> bool:
    """Whether a fitted budget's interval lies within the sweep: a place the runs measured, not an extrapolation."""
    return budgets[0] <= low and high <= budgets[-1]


def sweep_text(budgets: list[float]) -> str:
    return f"[{budgets[0]:.3g}, {budgets[-1]:.3g}] FLOPs"


def placed_text(budget: float, low: float | None, high: float | None, budgets: list[float]) -> str | None:
    """A fitted budget with its interval where both are inside the sweep; None where it is not a finding."""
    if not estimable(low, high) or not inside(low, high, budgets):
        return None
    return f"{budget:.3g} FLOPs (95 % CI {low:.3g}–{high:.3g})"


def meeting_text(found: Crossover, budgets: list[float]) -> str:
    """Where two fits meet inside the sweep, as the frontier and a preset's claims both say it: the point with its
    interval where that interval lies inside the sweep, otherwise not estimable, never a bare point."""
    placed = placed_text(found.budget, found.ci_low, found.ci_high, budgets)
    if placed is not None:
        return f"the fits meet at {placed}"
    reach = ("has no interval" if not estimable(found.ci_low, found.ci_high) else
             f"has a 95 % interval ({found.ci_low:.3g}–{found.ci_high:.3g}) that reaches outside it")
    return f"where the fits meet is not estimable within the sweep {sweep_text(budgets)} (the crossing {reach})"


def multiplier_text(m: Multiplier | Unread | None, reading: str | None = None) -> str:
    """"2.3× (1.8–3.1)", "> 1× (not reached within the run)", "not measurable", ...; `reading` overrides m's own."""
    if m is None:
        return ""
    if isinstance(m, Unread):
        return "not measurable (one of the two does not beat its control)"
    value, kind, reversed_reading = m.multiplier, m.kind, (reading or m.reading) == "reversed"
    if kind == "?":
        return "not measurable (it and the other were both past the other's final value at their first checkpoints)"
    if kind == ">":
        return f"> {times(value)}× (" + ("reached at its first checkpoint)" if reversed_reading else
                                          "not reached within the run)")
    if kind == "<" and m.bound == "baseline":
        return f"< {times(value)}× (the other was already past its own final value at its first checkpoint)"
    if kind == "<":
        return f"< {times(value)}× (" + ("it never reached the other's value)" if reversed_reading else
                                          "already reached at the other's first checkpoint)")
    if m.ci_low_kind is None:  # no interval, so no point either: a bare number would be quoted as a finding
        return "not estimable (one seed: no interval)"
    low_bound, high_bound = m.range
    low = times(m.ci_low) if m.ci_low is not None else f"< {times(low_bound)}"
    high = times(m.ci_high) if m.ci_high is not None else f"> {times(high_bound)}"
    separator = "–" if m.ci_low is not None and m.ci_high is not None else " to "
    return f"{times(value)}× ({low}{separator}{high})" + (", read at the other's final value" if reversed_reading
                                                          else "")


def listing(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def answer_sentence(answer: Answer | None) -> str:
    """The report's first lines: who leads on the main yardstick, by what multiplier, who is not separated, who did
    not beat its control, and the scale this speaks for."""
    if answer is None or answer.yardstick is None:
        return ("No neutral yardstick ran (a labelled task that copies no objective's training input or task), so "
                "this comparison gives no answer: its yardsticks only diagnose each objective's own homework.")
    where = f"On the main yardstick, {answer.label}"
    beat_unlearned = answer.unlearned_beat_control
    if answer.leader is None and beat_unlearned:
        one = len(beat_unlearned) == 1
        text = (f"{where}, {listing(beat_unlearned)} beat{'s' if one else ''} {'its' if one else 'their'} untrained "
                f"control (Holm p < {ALPHA}) but no objective that learned its own task does, so it names no leader")
    elif answer.leader is None:
        text = (f"{where}, no objective beats its untrained control (Holm p < {ALPHA}): at this scale pretraining has "
                "not paid on it, so it names no leader")
    elif not answer.runner_up:
        text = (f"{where}, only {answer.leader} beats its untrained control; no other objective's gain can be "
                "compared with it")
    elif answer.separated:
        text = (f"{where}, **{answer.leader} leads**, separated from {listing(answer.beat_control[1:])} (Holm, "
                f"{family_text(answer.family)})" + lead_text(answer))
    else:  # "leads" only where the leader is separated from every other objective that beat its control
        # a pointer only at rows the table holds (a record from before `tabled` was kept: where it quotes a multiplier)
        tabled = answer.tabled if answer.tabled is not None else answer.multiplier is not None
        text = (f"{where}, no objective leads: {answer.leader}, first by its gain over its control, is not separated "
                f"from {listing(answer.not_separated_from)} (Holm, {family_text(answer.family)}), so no compute "
                "multiplier is stated" + (" (the table below has each one's)" if tabled else
                                         f" ({NO_CURVE})" if answer.curves is False else ""))
    late = answer.did_not_beat_control
    if late and answer.leader is not None:
        text += f"; {listing(late)} did not beat {'its' if len(late) == 1 else 'their'} untrained control"
    if answer.did_not_learn_task:
        unlearned = answer.did_not_learn_task
        text += (f"; {listing(unlearned)} did not learn {'its' if len(unlearned) == 1 else 'their'} own task "
                 f"({'it' if len(unlearned) == 1 else 'each'} closed less than half of the range from its task's "
                 f"trivial answer to its Bayes reference on at least one seed, §4), so "
                 f"{'it is' if len(unlearned) == 1 else 'they are'} ranked nowhere")
    other = answer.other_read
    if other is not None and not other.agrees:
        them = (f"there {'only ' if len(other.beat_control) == 1 else ''}{listing(other.beat_control)} "
                f"beat{'s' if len(other.beat_control) == 1 else ''} "
                f"{'its' if len(other.beat_control) == 1 else 'their'} untrained control"
                + (f" and {other.leader} leads, separated from the others (Holm)" if other.separated else
                   " and none is separated from the others (Holm)" if len(other.beat_control) > 1 else "")
                if other.beat_control else "there no objective beats its untrained control")
        text = (f"The two reads of the neutral tasks disagree: read fine-tuned ({other.label}), {them}. {text}"
                if "frozen" in (answer.label or "") else
                f"The two reads of the neutral tasks disagree: {other.label}: {them}. {text}")
    elif other is not None:
        text += f"; read {'fine-tuned' if 'fine-tuned' in other.label else 'the other way'} ({other.label}) agrees"
    scale = answer.scale
    size = (f"{scale.parameters:,}-parameter backbones trained on {scale.tokens:,.0f} tokens "
            f"({scale.flops:.2g} FLOPs) each" if scale.parameters else f"runs of {scale.flops:.2g} FLOPs")
    return (f"{text}. This speaks for {size}; the published comparisons of these objectives sit at "
            f"{PUBLISHED_FLOPS:.0e} FLOPs and beyond, which a run of this size cannot tell.")


# why an answer states no multiplier where the tasks were read only at the budget
NO_CURVE = "the tasks were read only at the budget, --no-probe-curves: there is no curve to read one off"


def lead_text(answer: Answer) -> str:
    """By how much the leader leads the runner-up, in compute, or that no multiplier was read, and why."""
    m = answer.multiplier
    if m is None:
        return (f"; no compute multiplier against {answer.runner_up} can be read ({NO_CURVE})" if answer.curves is False
                else f"; no compute multiplier against {answer.runner_up} could be read")
    leader, runner_up, times_text = answer.leader, answer.runner_up, multiplier_text(m, reading="direct")
    if m.kind == "?":
        return f"; its lead in compute is {times_text}"
    # "less compute" only of an interval above 1 (or a lower bound at 1 or more), never of one that holds or is below it
    if not ((m.kind == "=" and m.ci_low is not None and m.ci_low > 1) or (m.kind == ">" and m.multiplier >= 1)):
        return (f"; its compute multiplier against {runner_up} is {times_text}, an interval that does not lie above "
                "1: no saving in compute is established")
    if m.reading == "reversed" and m.kind not in (">", "<"):
        # read inside both runs: where the runner-up got to by the budget, and when the leader got there
        return (f": it reaches {runner_up}'s final value with {times_text} less compute than {runner_up} "
                f"({runner_up} does not reach {leader}'s within its run)")
    return f": {runner_up} would need {times_text} of its compute to match it"


def family_text(named: Family) -> str:
    return f"family \"{named.family}\", {named.size} test{'s' if named.size != 1 else ''}"


def mirrors_text(item: YardstickVerdict) -> str:
    """Why a yardstick ranks nobody: the objectives whose training input or task it copies."""
    return (f"Diagnostic: its question copies the training input or task of {listing(item.mirrors)}, so no answer, "
            "win or multiplier is drawn from it.")


def measurement_text(item: YardstickVerdict) -> str:
    """Whether a yardstick measured pretraining at this setup."""
    if item.measures_pretraining is None:
        return "With one seed (or no untrained control) no gain over a control can be tested."
    if item.measures_pretraining:
        beat = [g.objective for g in item.gains if beats_control(g)]
        return f"Beats its untrained control: {listing(beat)} ({family_text(item.gain_family)})."
    best = max(item.gains, key=lambda g: g.estimate)
    return (f"No objective beats its untrained control (the largest gain, {best.objective}'s, is "
            f"{best.estimate:+.3g}, Holm p = {p_text(best.p_holm)}): at this setup it does not measure "
            "pretraining, and nothing is ranked on it.")


VERDICT_GUIDE = (
    "Every objective is set beside its own untrained control, the backbones its runs start from, read the same way "
    "through the same yardstick. Intervals include the test set's sampling where the score is a mean over test "
    "examples (a bootstrap over seeds and test examples; *n test* says on how many). A mean's interval is 95 %; "
    "*gain* is the difference from the control, tested with Holm's correction within the family named under each "
    "table, and its interval, like a comparison's, is Holm-adjusted: at the level Holm's step-down applied to its "
    "test (95 % and up, Bonferroni's for the smallest p), so it excludes 0 exactly when the test is significant. Two "
    "objectives are compared only where both beat their controls (otherwise *not measurable*, counted in the family "
    "as tested with p = 1, so that its size is fixed by the objectives compared), again with Holm "
    "(two with different untrained controls, a bidirectional and a causal backbone, on their gains over their own "
    "controls, what pretraining added, with the difference of their scores beside it, untested, with its 95 % "
    "interval) within a named family. A yardstick whose question copies an objective's training input or task "
    "(*mirrors*) diagnoses that objective's own homework and ranks nobody; the answer comes from the main yardstick, "
    "the neutral tasks read frozen at every FLOP checkpoint. *ρ* is Spearman's correlation of the mean curve with "
    "compute, the control at 0 FLOPs first.\n")
