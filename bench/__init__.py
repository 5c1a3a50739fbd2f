"""The comparison around the objectives: data, training to a FLOP budget, statistics, reports and CLIs."""
