"""The "Paper versus this run" section of a preset's report: the paper's rows beside ours and each claim's outcome."""

from __future__ import annotations

from bench.analysis.findings import NOT_MEASURABLE
from bench.analysis.paper_findings import CrossoverFinding, MultiplierTest, Paper, PaperFinding, Setting, Unmeasured
from bench.report.tables import fmt, table
from bench.report.wording import (estimate_text, family_text, listing, meeting_text, multiplier_text, p_text,
                                  tested_text)


def paper_value(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3g}" if abs(value) >= 1e4 else f"{value:g}"


def paper_text(paper: Paper) -> str:
    """"Paper versus this run": the paper's rows beside ours (matched by row), its claim, and per claim whether this
    run reproduces it, judged by the one claim rule."""
    ours = {row.row: row for row in paper.ours}
    labels = list(dict.fromkeys([row.row for row in paper.paper_rows] + list(ours)))
    published = {row.row: row.values for row in paper.paper_rows}
    rows = [[label, *[paper_value(v) for v in published.get(label, [None] * len(paper.paper_columns))],
             f"`{ours[label].spec}`" + (f" ({ours[label].variant})" if ours[label].variant else "")
             if label in ours else "",
             *[fmt(ours[label].values.get(name)) if label in ours else "" for name in paper.yardsticks]]
            for label in labels]
    findings = [[f.claim, f"**{f.outcome}**", finding_text(f, sorted(paper.comparison_budgets.values()))]
                for f in paper.findings]
    text = [f"## Paper versus this run\n\n**{paper.citation}.** {paper.claim}\n",
            table(rows, ["setting", *[f"paper: {c}" for c in paper.paper_columns], "ours",
                         *[f"ours: {name} (mean ± 95 % t-interval)" for name in paper.yardsticks]]),
            "\nDoes this run reproduce each claim? One rule for every claim: two settings are compared only where "
            "both beat their own untrained controls on that yardstick (otherwise *not measurable*); a difference's "
            "interval and p include the test set's sampling; the p-values are Holm-corrected within "
            f"{family_text(paper.family)}. *A beats B*: reproduced when A is ahead, not reproduced when B is, "
            "otherwise not separated; its interval is Holm-adjusted (at the level Holm applied to its test), so it "
            "excludes 0 exactly when the claim is separated. *A is comparable to B*: reproduced when a shortfall of "
            "more than the margin (5 % of B) is ruled out (one-sided), not reproduced when the whole interval lies "
            "beyond it, otherwise inconclusive. *A's multiplier is at least k*: reproduced when it is shown above k "
            "(one-sided), not reproduced when its whole interval lies below k, otherwise inconclusive. The intervals "
            "of these two kinds are 95 % and unadjusted, as their rules read them. A claim about an objective's own "
            "task is marked as a diagnostic.\n",
            table(findings, ["claim", "outcome", "evidence"]),
            f"\n**What differs.** The paper: {paper.paper_setting}. This run: {this_run(paper)}. The yardsticks "
            "are this suite's tasks on its own data, not the paper's benchmarks: a direction can carry over, the "
            "numbers cannot."
            + (f" The runs took {paper.runs_seconds / 60:.1f} min (training with its evaluations, probes and "
               "downstream tasks, summed over runs; a --resume keeps finished runs)." if paper.runs_seconds else "")]
    return "\n".join(text)


def this_run(paper: Paper) -> str:
    """This run's setting, as the paper's is given."""
    per_comparison = ", ".join(f"{name} {budget:.3g}" for name, budget in paper.comparison_budgets.items())
    return (f"{paper.model}; budget {paper.budget_flops:.3g} FLOPs per run"
            + (f" (per comparison: {per_comparison})" if per_comparison else "")
            + f"; {paper.corpus}: {paper.corpus_description}; {paper.seeds} seeds")


def setting_text(found: Setting) -> str:
    """What the run measured about the paper's setting, per side."""
    values = found.values
    if found.measured == "passes":
        return (f"this run: {values[''][0]:.1f} passes over the training windows per run (mean)" if values else
                "this run: no finished run")
    if found.measured == "pair_accuracy":
        heads = "; ".join(f"{side} {accuracy:.3f}" for side, (accuracy,) in values.items())
        return heads or "no pair objective finished"
    return "per run, mean over seeds: " + "; ".join(f"{side} {tokens:,.0f} token positions ({supervised:,.0f} "
                                                   "supervised)" for side, (tokens, supervised) in values.items())


def finding_text(found: PaperFinding, budgets: list[float]) -> str:
    """The numbers behind a preset's finding; `budgets`: the sweep's, where the preset runs one."""
    if isinstance(found, Setting):
        return setting_text(found)
    if isinstance(found, CrossoverFinding):
        meet = found.crossover
        if meet is None or meet.budget is None or meet.where != "within":
            return "the fits do not meet within the sweep"
        return meeting_text(meet, budgets)
    if found.kind == "multiplier":
        m = found.multiplier if isinstance(found, MultiplierTest) else None
        interval = " (95 %, unadjusted)" if m is not None and m.kind == "=" and m.ci_low_kind is not None else ""
        return "" if m is None else (f"{found.objectives[0]} against {found.objectives[1]} on {found.yardstick}:"
                                     f" {multiplier_text(m)}{interval}; Holm p (≥ {found.factor:g}×) = "
                                     f"{p_text(found.p_holm)}")
    if isinstance(found, Unmeasured):
        return f"no finished runs on `{found.yardstick}`"
    first, second = found.objectives
    # a "beats" claim is two-sided: its interval agrees with its Holm outcome; a "comparable" claim's test is one-sided
    # against a margin, and its rule reads the 95 % interval itself
    difference = (tested_text(found) if found.kind == "beats" else
                  estimate_text(found.estimate, found.ci_low, found.ci_high, signed=True)
                  + (" (95 %, unadjusted)" if found.ci_low is not None and found.p_holm is not None else ""))
    text = (f"{first} {found.means[0]:.3f} vs {second} {found.means[1]:.3f} on `{found.yardstick}`: "
            f"difference {difference}")
    if found.margin is not None:
        text += f", margin −{found.margin:.3f}"
    text += "" if found.p_holm is None else f", Holm p = {p_text(found.p_holm)}"
    if found.outcome == NOT_MEASURABLE:
        text += "; one of the two does not beat its untrained control here"
    if found.mirrors:
        text += f" (diagnostic: the task is {listing(found.mirrors)}'s own)"
    return text
