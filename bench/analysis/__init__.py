"""The analysis stage: statistics across seeds (stats), compute multipliers and gains over controls (verdict), signal
density (density), results.json (results), and the presets: the paper tables as data (presets) apart from their
judges (judges).
"""
