"""The comparison report: report.md (tabulate) with PNG plots (seaborn) beside it, and results.json for machines.
The pipeline calls the three writers by name (bench.orchestration.pipeline.Reports); the report stage alone words facts.

Every number comes from the runs' results; nothing here is typed in by hand. Files are written atomically.
"""

from bench.report.frontier import write_frontier_report
from bench.report.markdown import write_preset_report, write_report

__all__ = ["write_frontier_report", "write_preset_report", "write_report"]
