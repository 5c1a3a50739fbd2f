"""What every stage of bench/ shares: one-line errors, atomic files, seeds, stop signals, the recorded environment
and the default comparison's tuned settings."""
