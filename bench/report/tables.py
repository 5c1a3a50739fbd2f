"""What every table of report.md is made with: a GitHub table, a statistic as "mean ± ci95", and the names of the
two readers of the embedded language's questions."""

from __future__ import annotations

from tabulate import tabulate

from bench.analysis.findings import Stat


def table(rows: list[list], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def fmt(summary: Stat | None, digits: int = 3) -> str:
    """A Stat as "mean ± ci95", or the mean alone with one seed."""
    if summary is None:
        return ""
    if summary.ci95 is None:
        return f"{summary.mean:.{digits}f}"
    return f"{summary.mean:.{digits}f} ± {summary.ci95:.{digits}f}"


# a Bayes ceiling's reader, as the tables name it: one that sees the whole window, or the left context only
READERS = {"smoothing": "whole window", "filtering": "left context"}

