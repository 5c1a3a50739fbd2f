"""The table that explains the suite, without training: supervised positions and FLOPs per objective.

    python -m bench.positions --seq-len 512 [--model small] [--json]

For each objective: the analytic supervised positions per sequence beside the count measured by running corrupt()
on random token windows, MLM's expected [MASK] / random / kept split, the ratio to AR, whether KV-cached generation
is possible, and the training-step FLOPs (forward + backward) per sequence and per supervised position, under the
dense convention and under the executed one (backbone.flops), with how many more sequences a budget buys under it.
"""

from __future__ import annotations

from tabulate import tabulate

from backbone import ConfigError, resolve_model
from bench.analysis.density import build_on_meta, position_row
from bench.common.cli import MODEL_HELP, VOCAB_HELP, Parser, run
from bench.common.files import dumps
from bench.report.sections import analytic_count
from bench.training.recipe import single_seq_len
from objectives import Vocab, parse_objective_list

TABLE_OBJECTIVES = "ar,mlm,mlm:rule=bernoulli,electra,span"
DESCRIPTION = "The table that explains the suite, without training: supervised positions and FLOPs per objective."


def position_table(specs: list[str], seq_len: int, model: str = "small", vocab_size: int = 8192,
                   samples: int = 256, seed: int = 0) -> list[dict]:
    vocab = Vocab.for_tokenizer(vocab_size)
    config = resolve_model(model, vocab.size, seq_len)
    return [position_row(build_on_meta(spec, config, vocab), seq_len, samples, seed) for spec in specs]


def format_table(rows: list[dict]) -> str:
    table = [[row["objective"], row["attention"], analytic_count(row),
              f"{row['measured_positions']:.2f}", row["parts"], f"{row['ratio_to_ar']:.3f}",
              "yes" if row["incremental_generation"] else "no", f"{row['flops_per_sequence']:.4g}",
              f"{row['flops_per_supervised_position']:.4g}", f"{row['executed_flops_per_sequence']:.4g}",
              f"{budget_buys(row):.3f}×"] for row in rows]
    headers = ["objective", "attention", "supervised / seq", "measured", "[MASK] / random / kept, or parts",
               "ratio to ar", "KV-cached generation", "FLOPs / seq", "FLOPs / supervised", "executed FLOPs / seq",
               "a budget buys, executed ÷ dense"]
    return tabulate(table, headers=headers, tablefmt="github", disable_numparse=True,
                    colalign=("left", "left", "right", "right", "left", "right", "left", "right", "right", "right",
                              "right"))


def budget_buys(row: dict) -> float:
    """How many more sequences (steps, tokens) a FLOP budget buys when attention is charged as executed."""
    return row["dense_flops_per_sequence"] / row["executed_flops_per_sequence"]


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m bench.positions", description=DESCRIPTION)
    parser.add_argument("--seq-len", type=single_seq_len, default=512, help="window length T in tokens (default 512)")
    parser.add_argument("--model", default="small", help=MODEL_HELP + " (default small)")
    parser.add_argument("--vocab-size", type=int, default=8192, help=VOCAB_HELP + " (default 8192)")
    parser.add_argument("--objectives", default=TABLE_OBJECTIVES,
                        help=f"comma-separated objective specs (default {TABLE_OBJECTIVES})")
    parser.add_argument("--samples", type=int, default=256,
                        help="random windows corrupted for the measured column (default 256)")
    parser.add_argument("--seed", type=int, default=0, help="seed for the measured column (default 0)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of rows instead of the table")
    args = parser.parse_args(argv)
    if args.seq_len < 2:
        raise ConfigError(f"--seq-len must be >= 2, got {args.seq_len}")
    if args.samples < 1:
        raise ConfigError(f"--samples must be >= 1, got {args.samples}")
    rows = position_table(parse_objective_list(args.objectives), args.seq_len, args.model, args.vocab_size,
                          args.samples, args.seed)
    if args.json:
        print(dumps(rows, indent=2))
    else:
        print(f"Supervised positions and training FLOPs per sequence at T = {args.seq_len} "
              f"({args.model} model, vocabulary {args.vocab_size}):\n")
        print(format_table(rows))


if __name__ == "__main__":
    run(main)
