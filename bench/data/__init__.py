"""The data stage: --data specs into windows of tokens (corpus), text read and tokenized (text), and the embedded
language (synthetic) with its exact inference (inference).
"""
