"""The table that explains the suite, without training: supervised positions and FLOPs per objective.

    python -m bench.positions --seq-len 512 [--model small] [--json]

For each objective: the analytic supervised positions per sequence beside the count measured by running corrupt()
on random token windows, MLM's expected [MASK] / random / kept split, the ratio to AR, whether KV-cached generation
is possible, and the training-step FLOPs (forward + backward) per sequence and per supervised position.
"""

from __future__ import annotations

import json

import torch
from tabulate import tabulate

from backbone import Backbone, ConfigError, preset
from bench.cli import Parser, run
from objectives import Electra, MaskedLM, Objective, SpanCorruption, Vocab, build_objective, parse_objective_list
from objectives.masking import KEPT, MASKED, RANDOM

DEFAULT_OBJECTIVES = "ar,mlm,mlm:rule=bernoulli,electra,span"


def build_on_meta(spec: str, model: str, seq_len: int, vocab: Vocab) -> Objective:
    # FLOPs and counts need the shapes, not the weights: build on the meta device so even `base` costs nothing.
    with torch.device("meta"):
        return build_objective(spec, Backbone(preset(model, vocab.size, max_seq_len=seq_len)), vocab)


def position_row(objective: Objective, seq_len: int, samples: int, seed: int) -> dict:
    objective.check_seq_len(seq_len)
    generator = torch.Generator().manual_seed(seed)
    vocab = objective.vocab
    tokens = torch.randint(vocab.first_ordinary, vocab.end_ordinary, (samples, seq_len), generator=generator)
    corrupted = objective.corrupt(tokens, generator)
    measured = objective.counted_positions(corrupted) / samples
    supervised = objective.expected_supervised_positions(seq_len)
    flops = objective.expected_flops_per_sequence(seq_len)
    row = {
        "objective": objective.spec(),
        "attention": objective.attention,
        "supervised_positions": supervised,
        "measured_positions": measured,
        "ratio_to_ar": supervised / (seq_len - 1),
        "incremental_generation": objective.can_generate,
        "flops_per_sequence": flops,
        "flops_per_supervised_position": flops / supervised,
    }
    if isinstance(objective, MaskedLM):
        row.update(objective.expected_split(seq_len))
        if objective.options.whole_word and objective.vocab.continuation is not None:
            row["upper_bound"] = True  # whole words fill round(rate·T) only when they fit exactly
        kinds = corrupted.info["rewrite"]
        row.update({f"measured_{share}": int((kinds == kind).sum()) / samples
                    for share, kind in (("mask", MASKED), ("random", RANDOM), ("keep", KEPT))})
    if isinstance(objective, Electra):
        row.update(discriminator_positions=seq_len, generator_positions=objective.generator_positions(seq_len))
    if isinstance(objective, SpanCorruption):
        lengths = objective.lengths(seq_len)
        row.update(noise_tokens=lengths.noise, spans=lengths.spans, raw_tokens=lengths.raw,
                   input_positions=lengths.inputs, padding=lengths.padding)
    return row


def position_table(specs: list[str], seq_len: int, model: str = "small", vocab_size: int = 8192,
                   samples: int = 256, seed: int = 0) -> list[dict]:
    vocab = Vocab(vocab_size, num_sentinels=100)
    return [position_row(build_on_meta(spec, model, seq_len, vocab), seq_len, samples, seed) for spec in specs]


def analytic_count(row: dict) -> str:
    """The analytic supervised positions of a row, marked when they are only an upper bound (whole-word masking)."""
    return ("≤ " if row.get("upper_bound") else "") + f"{row['supervised_positions']:g}"


def describe_parts(row: dict) -> str:
    """MLM's expected [MASK] / random / kept split, or what ELECTRA's and span corruption's counts are made of."""
    if "mask" in row:
        return f"{row['mask']:.2f} / {row['random']:.2f} / {row['keep']:.2f}"
    if "generator_positions" in row:
        return f"discriminator {row['discriminator_positions']} + generator {row['generator_positions']:g}"
    if "spans" in row:
        return f"{row['noise_tokens']} noise tokens in {row['spans']} spans of {row['raw_tokens']} raw tokens"
    return ""


def format_table(rows: list[dict]) -> str:
    table = [[row["objective"], row["attention"], analytic_count(row),
              f"{row['measured_positions']:.2f}", describe_parts(row), f"{row['ratio_to_ar']:.3f}",
              "yes" if row["incremental_generation"] else "no", f"{row['flops_per_sequence']:.4g}",
              f"{row['flops_per_supervised_position']:.4g}"] for row in rows]
    headers = ["objective", "attention", "supervised / seq", "measured", "[MASK] / random / kept, or parts",
               "ratio to ar", "KV-cached generation", "FLOPs / seq", "FLOPs / supervised"]
    return tabulate(table, headers=headers, tablefmt="github", disable_numparse=True,
                    colalign=("left", "left", "right", "right", "left", "right", "left", "right", "right"))


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m bench.positions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq-len", type=int, default=512, help="window length T in tokens (default 512)")
    parser.add_argument("--model", default="small", help="model preset for the FLOP columns: tiny, small or base "
                                                          "(default small)")
    parser.add_argument("--vocab-size", type=int, default=8192, help="vocabulary size for the FLOP columns "
                                                                     "(default 8192)")
    parser.add_argument("--objectives", default=DEFAULT_OBJECTIVES,
                        help=f"comma-separated objective specs (default {DEFAULT_OBJECTIVES})")
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
        print(json.dumps(rows, indent=2))
    else:
        print(f"Supervised positions and training FLOPs per sequence at T = {args.seq_len} "
              f"({args.model} model, vocabulary {args.vocab_size}):\n")
        print(format_table(rows))


if __name__ == "__main__":
    run(main)
