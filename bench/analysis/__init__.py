"""The analysis stage: statistics across seeds (stats), compute multipliers and gains over controls (verdict), signal
density (density), the yardsticks as read from run records (measures), results.json from what a comparison measured
(results), fits across a sweep of budgets (frontier, budgets), and the presets: the paper tables as data (presets)
apart from their judges (judges). What it returns is typed, and is what results.json stores: the verdict and its
answer (findings), the summaries, Results and a sweep's frontier (summaries), a preset's paper section
(paper_findings).
"""
