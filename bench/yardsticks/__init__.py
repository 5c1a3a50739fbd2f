"""The yardsticks: what a backbone is read with besides its own loss. One readout (readout) for the embedded
probes (probes) and the labelled tasks (tasks: the grammar; examples, text_tasks, embedded_tasks: the sources;
metrics: scored with their direction; downstream: the recipe), and the Bayes references (bayes).
"""
