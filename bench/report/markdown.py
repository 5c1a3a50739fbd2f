"""report.md, results.json and the plots written into a comparison's folder (atomically); a multi-comparison
preset's own report.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench.analysis.findings import to_json
from bench.analysis.paper_findings import Paper
from bench.analysis.summaries import Results

from bench.common.files import write_atomic, write_json
from bench.report.paper import paper_text
from bench.report.plots import write_plots
from bench.report.wording import answer_sentence
from bench.report.sections import (compute_section, density_section, diverged_section, floor_table, loss_table,
                                   objective_schedule_section, own_task_table, schedule_section, setup_section)
from bench.report.verdict_tables import answer_section, verdict_section
from bench.report.yardstick_tables import downstream_table, probe_table


def render(results: Results, plots: list[str]) -> str:
    """report.md from the Results (bench.analysis.results.build_results)."""
    sections = [
        f"# Pretraining objectives at equal compute\n\nBudget: **{results.budget_flops:.3g} FLOPs** per run; "
        "objectives: " + ", ".join(f"`{o.objective}`" for o in results.objectives) + ".",
        answer_section(results),
        *([paper_text(results.paper)] if results.paper else []),
        verdict_section(results),
        setup_section(results) + schedule_section(results) + objective_schedule_section(results),
        density_section(results),
        compute_section(results) + diverged_section(results),
        loss_table(results) + floor_table(results) + own_task_table(results) + probe_table(results) + downstream_table(results),
        "## 5. Plots\n\n" + ("\n\n".join(plots) or "No finished run to plot."),
    ]
    return "\n\n".join(sections) + "\n"


def worded(results: Results) -> Results:
    """The results with their answer's sentence, as results.json carries it (and a sweep's frontier, each budget's)."""
    if results.answer is None:
        return results
    return replace(results, answer=replace(results.answer, sentence=answer_sentence(results.answer)))


def write_report(out: Path, results: Results) -> Path:
    """Write results.json (the answer's sentence in it), the PNG plots and report.md into `out`; return report.md's
    path."""
    results = worded(results)
    write_json(out / "results.json", to_json(results))
    plots = write_plots(results, out)
    report = out / "report.md"
    write_atomic(report, render(results, plots))
    return report


def write_preset_report(out: Path, paper: Paper) -> Path:
    """A multi-comparison preset's own results.json and report.md: the paper section and a link to each
    comparison's full report."""
    write_json(out / "results.json", {"paper": to_json(paper)})
    report = out / "report.md"
    write_atomic(report, preset_page(paper))
    return report


def preset_page(paper: Paper) -> str:
    """A multi-comparison preset's report.md: its paper section, then a link to each comparison's report."""
    variants = list(dict.fromkeys(row.variant for row in paper.ours))
    links = "\n".join(f"- [{name}]({name}/report.md)" for name in variants)
    return (f"# Preset {paper.preset}\n\n{paper_text(paper)}\n\n## The comparisons\n\n"
            f"Each has its full report (verdict, setup, compute, plots):\n\n{links}\n")
