"""The analysis stage: statistics across seeds (stats), compute multipliers and gains over controls (verdict), signal
density (density), the yardsticks as read from run records (measures), the typed findings and summaries it returns
(findings, summaries), results.json from what a comparison measured (results), fits across a sweep of budgets
(frontier), and the presets: the paper tables as data (presets) apart from their judges (judges).
"""
