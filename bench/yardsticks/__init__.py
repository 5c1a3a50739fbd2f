"""The yardsticks: what a backbone is read with besides its own loss. One readout (readout) for the embedded
probes (probes) and the labelled tasks (tasks, downstream), and the Bayes references (bayes).
"""
