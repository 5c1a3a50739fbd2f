"""What every command-line entry point shares: one-line errors and exit status 2 for user mistakes."""

from __future__ import annotations

import argparse
import sys
from typing import Callable, NoReturn

from backbone import MODEL_SIZES, ConfigError

# One meaning per flag, in every command.
VOCAB_HELP = ("tokenizer vocabulary size: the 5 special tokens ([PAD] [MASK] [BOS] [EOS] [UNK]) and the ordinary "
              "tokens; T5's 100 sentinels are added on top")
MODEL_HELP = (f"backbone size: a preset ({', '.join(MODEL_SIZES)}) with optional shape overrides, e.g. "
              "small:d_model=128,n_layer=2 (keys n_layer, n_head, d_model, d_ff, positions, dropout)")


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (and exit 2), like every other user error here."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def run(main: Callable[[list[str] | None], None], argv: list[str] | None = None) -> None:
    """Call main(argv); a ConfigError becomes one line on stderr and exit status 2, never a traceback."""
    try:
        main(argv)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # `... | head` closed the pipe: not an error worth a traceback
        sys.stderr.close()
