"""The comparison report: report.md (tabulate) with PNG plots (seaborn) beside it, and results.json for machines.

Every number comes from the runs' results; nothing here is typed in by hand. Files are written atomically.
"""
