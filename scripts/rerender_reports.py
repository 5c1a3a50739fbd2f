"""Render every committed report.md again from its results.json with this checkout's code and say which differ: the
check that a change of the analysis or of the wording leaves the committed reports as they are, or shows where it
does not. The plots are not drawn again (a page's plot lines are read from it). A report whose results.json has
another schema (or a sweep's, of an older layout) is refused: regenerate it (scripts/regenerate_reports.py).

    python scripts/rerender_reports.py [FOLDER]     FOLDER: a reports/ tree (default: this checkout's)

Exit status 0 when every page renders identical, 1 otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backbone import ConfigError  # noqa: E402
from bench.analysis.findings import from_json  # noqa: E402
from bench.analysis.paper_findings import Paper  # noqa: E402
from bench.analysis.results import load_results  # noqa: E402
from bench.analysis.summaries import Sweep  # noqa: E402
from bench.report import frontier  # noqa: E402
from bench.report.markdown import preset_page, render  # noqa: E402
from bench.report.tuning import tuning_report  # noqa: E402
from bench.tune import BARELY_MOVES  # noqa: E402


def plot_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("![")]


def rendered(page: Path) -> str:
    """The page as this code writes it from the results.json beside it."""
    data, text = json.loads(page.with_name("results.json").read_text()), page.read_text()
    if "finetune_rates" in data:  # bench.tune's
        return tuning_report(data, BARELY_MOVES)
    if "frontier" in data:
        return frontier.render(from_json(Sweep, data["frontier"]), plot_lines(text))
    if "paper" in data and "schema" not in data:  # a preset with variants: its own page
        return preset_page(from_json(Paper, data["paper"]))
    # the plots are the last section; the answer's forest plot above them is part of the answer section
    return render(load_results(data), plot_lines(text.split("## 5. Plots", 1)[1] if "## 5. Plots" in text else ""))


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else ROOT / "reports"
    differ = 0
    for page in sorted(folder.rglob("report.md")):
        if not page.with_name("results.json").exists():
            print(f"{page.relative_to(folder)}: no results.json")
            continue
        try:
            verdict = "same" if rendered(page) == page.read_text() else "DIFFERS"
        except ConfigError as error:
            verdict = f"refused ({error})"
        except (KeyError, TypeError) as error:  # a sweep's results.json names no schema: an older one misses fields
            verdict = f"refused (an older layout, without {error}: regenerate it)"
        differ += verdict != "same"
        print(f"{page.relative_to(folder)}: {verdict}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
