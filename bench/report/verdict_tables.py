"""The answer and the verdict of report.md: the answer's sentence first, then per yardstick (the main one first) who
beats its own untrained control, how the objectives compare under the one claim rule, and the compute multipliers."""

from __future__ import annotations

from bench.analysis.findings import Comparison, DensityRatio, Gain, Unjudged, Verdict, YardstickVerdict
from bench.analysis.summaries import Results
from bench.report.tables import READERS, table
from bench.report.wording import (VERDICT_GUIDE, answer_sentence, estimate_text, family_text, measurement_text,
                                  mirrors_text, multiplier_text, p_text, tested_text)


def answer_section(results: Results) -> str:
    """The answer first: which objective buys the most per FLOP on the main yardstick, how sure, and at what scale."""
    plot = "\n\n![gains over the untrained controls](gains_forest.png)" if results.verdict else ""
    return f"## Answer\n\n{answer_sentence(results.answer)}{plot}"


def verdict_section(results: Results) -> str:
    """Per yardstick, the main one first: who beats its own untrained control, how the objectives compare under the
    one claim rule, and the multipliers on the neutral yardsticks."""
    v = results.verdict
    if v is None:
        return ("## Verdict\n\nNo verdict: no cross-objective yardstick ran (probes need the embedded language and "
                "are off with `--no-probes`; on any text, name labelled tasks with `--downstream`), or the baseline "
                f"`{results.baseline}` has no finished run; own losses of different objectives cannot be compared.")
    text = ["## Verdict\n", VERDICT_GUIDE]
    if results.seeds < 2:
        text.append("One seed per objective: nothing below can be tested; run with `--seeds 5`.\n")
    order = sorted(v.yardsticks, key=lambda y: (y.yardstick != v.main, bool(y.mirrors)))
    for y in order:
        text.append(yardstick_block(y, y.yardstick == v.main))
    if v.multipliers:
        text.append(multiplier_table(v))
    return "\n".join(text)


def yardstick_block(y: YardstickVerdict, main: bool) -> str:
    ceilings = ", ".join(f"{READERS.get(s, s)} {c:.3f}" for s, c in y.ceilings.items())
    rows = [[row.objective, estimate_text(row.estimate, row.ci_low, row.ci_high), *gain_cells(y.gain_of(row.objective))]
            for row in y.rows]
    rows += [[f"*{c.control}*", estimate_text(c.estimate, c.ci_low, c.ci_high), "", "", "", ""] for c in y.controls]
    rows += [[f"*input only ({READERS.get(s, s)})*", f"{value:.3f}", "", "", "", ""]
             for s, value in y.input_only.items()]
    about = [f"n test: {y.n_test.examples:,} examples, {y.n_test.units:,} scored positions" if y.n_test else
             "n test: not resampled (the metric is not a mean over examples)"]
    if ceilings:
        about.append(f"Bayes ceiling: {ceilings}")
    head = f"**{'Main yardstick: ' if main else ''}{y.label[:1].upper() + y.label[1:]}** (`{y.yardstick}`)."
    judged = [p for p in y.comparisons if isinstance(p, Comparison)]
    unjudged = [" vs ".join(p.objectives) for p in y.comparisons if isinstance(p, Unjudged)]
    pairs = [[" vs ".join(p.objectives), p.outcome, p.of, tested_text(p), p_text(p.p_holm),
              estimate_text(p.raw.estimate, p.raw.ci_low, p.raw.ci_high, signed=True) if p.raw else ""]
             for p in judged]
    pair_columns = ["comparison", "outcome (first objective)", "of", "difference (Holm-adjusted CI)", "Holm p",
                    "difference of scores (95 % CI)"]
    if not any(p.raw for p in judged):  # every pair shares its control: the scores are what is compared
        pairs, pair_columns = [[*row[:2], *row[3:5]] for row in pairs], [*pair_columns[:2], *pair_columns[3:5]]
    notes = [f"Gains: {family_text(y.gain_family)}."]
    if pairs:
        notes.append(f"Comparisons: {family_text(y.comparison_family)}.")
    if unjudged:
        notes.append(f"Not measurable (one of the two does not beat its control): {', '.join(unjudged)}.")
    return "\n".join([
        " ".join(part for part in (head, mirrors_text(y) if y.mirrors else "", measurement_text(y),
                                   f"({'; '.join(about)})") if part) + "\n",
        table(rows, ["objective", "mean (95 % CI)", "gain over control (Holm-adjusted CI)", "Holm p of gain",
                     "share of gain", "ρ"]),
        *([("\n" + table(pairs, pair_columns))] if pairs else []),
        "\n" + " ".join(notes), ""])


def multiplier_table(v: Verdict) -> str:
    names = list(dict.fromkeys(m.yardstick for m in v.multipliers))
    labels = [v.item(name).label for name in names]
    unknown = DensityRatio(per_sequence=None, per_flop=None)
    # a pair besides the baseline's is the answer's (its leader against the runner-up), named as such
    rows = [[spec if against == v.baseline else f"{spec} against `{against}`"]
            + [multiplier_text(next((m for m in v.multipliers if (m.objective, m.against) == (spec, against)
                                     and m.yardstick == name), None)) for name in names]
            + ([ratio_text(density.per_sequence), ratio_text(density.per_flop)] if against == v.baseline else ["", ""])
            for spec, against in dict.fromkeys((m.objective, m.against) for m in v.multipliers)
            for density in [v.signal_density_ratio.get(spec, unknown)]]
    return (f"**Compute multiplier against `{v.baseline}`** on the neutral yardsticks with curves: the factor of "
            f"compute `{v.baseline}` needs to reach each objective's value at the budget, read off its mean curve "
            "over the FLOP checkpoints (linear in log-FLOPs); where it never gets there, both curves are read at its "
            "own final value (the ELECTRA paper's reading). Intervals: the log-multiplier ± t × the SD of a bootstrap "
            "over seeds and test examples; an end is open where neither reading reached it within the run. Only "
            "pairs where both beat their controls are read; where their untrained controls differ (a bidirectional "
            "and a causal backbone), off their gains over their own controls (each curve less its control's mean, "
            "resampled with it), as their comparison is judged. Beside it, the signal-density ratio: supervised positions "
            "per sequence, and per FLOP (measured over the runs, every FLOP an objective spends counted), over the "
            "baseline's: what the multiplier would be if every supervised position were worth the same.\n\n"
            + table(rows, ["objective", *labels, "density ratio per sequence", "density ratio per FLOP"]))


def ratio_text(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}×"


def gain_cells(gain: Gain | None) -> list[str]:
    if gain is None:
        return ["", "", "", ""]
    share = "" if gain.share_of_gain is None else f"{gain.share_of_gain:.2f}"
    rise = "" if gain.rise is None else f"{gain.rise:.2f}"
    return [tested_text(gain), p_text(gain.p_holm), share, rise]

