"""python -m bench.export RUN_FOLDER --out DIR: a finished run's backbone as a folder `transformers` loads.

    python -m bench.export reports/X/runs/mlm-seed0 --out exported/mlm       # one run
    python -m bench.export reports/X --all --out exported                   # every run: exported/NAME-seedN
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.common.cli import Parser, run
from bench.export import export_comparison, export_run


def build_parser() -> Parser:
    parser = Parser(prog="python -m bench.export",
                    description="Write a finished run's trained backbone as a folder that transformers loads (with "
                                "the run's tokenizer and sentence-transformers' files), whose outputs equal the "
                                "suite's own: ar as GPT-NeoX (GPT-2 for learned positions), the others as the model "
                                "code shipped in the folder (trust_remote_code=True). See docs/export.md.",
                    epilog="exit status: 0 done; 2 a mistake in the input (one line on stderr, nothing written)")
    parser.add_argument("run", type=Path, metavar="RUN_FOLDER",
                        help="a finished run (COMPARISON/runs/NAME-seedN), or with --all the comparison's folder")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write (new or empty); with --all, "
                                                                "one subfolder per run")
    parser.add_argument("--all", action="store_true", help="export every finished run of the comparison RUN_FOLDER")
    return parser


def describe(folder: Path) -> str:
    config = json.loads((folder / "config.json").read_text())
    remote = ", trust_remote_code=True" if "auto_map" in config else ""
    return f"{folder}: {config['architectures'][0]} (from_pretrained({str(folder)!r}{remote}))"


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    written = export_comparison(args.run, args.out) if args.all else [export_run(args.run, args.out)]
    for folder in written:
        print(describe(folder))
        if (folder / "generator").is_dir():
            print(describe(folder / "generator"))


if __name__ == "__main__":
    run(main)
