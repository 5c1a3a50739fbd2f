"""bench.perf's parts: how a step is timed, the throughput of the training code, its Hugging Face peers, and whether
the host keeps a GPU fed."""
