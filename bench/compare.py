"""Compare pretraining objectives at equal compute.

    python -m bench.compare --objectives mlm,ar,electra

Trains every objective (and seed) on the same windows until its accounted FLOPs reach the budget, evaluates all of
them at the same log-spaced FLOP checkpoints, and writes report.md, PNG plots and results.json to --out. Each finished
evaluation and run is on disk at once: rerun with --resume to continue an interrupted comparison.
"""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from backbone import PRESETS, ConfigError
from bench.cli import Parser, run
from bench.data import TextOptions, load_corpus
from bench.files import read_json, write_json
from bench.positions import build_on_meta, position_row
from bench.report import write_report
from bench.bayes import ceilings, loss_floors
from bench.probes import ProbeConfig
from bench.train import (TrainConfig, check_batch_split, eval_batches, finished_result, make_fabric, run_name,
                         train_run)
from objectives import parse_objective_list

DEFAULT_OBJECTIVES = "mlm,ar,electra"
DEFAULT_BUDGET = 5e12  # about 50 s per objective for the small preset on 2 CPU cores (fp32)
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "64-true")


def parse_args(argv: list[str] | None):
    parser = Parser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0] + " "
                    + __doc__.split("\n\n")[2])
    add = parser.add_argument
    add("--objectives", default=DEFAULT_OBJECTIVES,
        help="comma-separated objective specs: mlm, ar, electra, span, each with options as NAME:KEY=VALUE,... "
             f"(e.g. mlm:rate=0.4,mask=1.0,random=0,keep=0); the first is the baseline of the Welch tests "
             f"(default {DEFAULT_OBJECTIVES})")
    add("--seeds", type=int, default=1, help="runs per objective, seeds 0..N-1; 2 or more give confidence "
                                             "intervals and Welch tests (default 1)")
    add("--budget", type=float, default=DEFAULT_BUDGET,
        help=f"training FLOPs per run, forward + backward, as counted by the suite (default {DEFAULT_BUDGET:g})")
    add("--model", default="small", help=f"backbone size preset: {', '.join(PRESETS)} (default small)")
    add("--seq-len", type=int, default=128, help="window length T in tokens (default 128)")
    add("--batch-size", type=int, default=32, help="global batch size in windows, the same for every objective "
                                                   "(default 32)")
    add("--lr", type=float, default=1e-3, help="peak AdamW learning rate (default 1e-3)")
    add("--eval-points", type=int, default=6, help="log-spaced FLOP checkpoints for held-out evaluation, the "
                                                   "last at the budget (default 6)")
    add("--data", default="synthetic",
        help="data source: synthetic[:key=value,...] is the embedded HMM-mixture language (options: components, "
             "states, words, successors, zipf, seed, train, heldout), with Bayes floors and probes; synthetic:text[,...] "
             "writes it out as text with multi-piece words; text:PATH reads a .txt/.jsonl/.json/.parquet file, folder "
             "or glob; hf:NAME[:CONFIG] loads a Hugging Face hub dataset (needs network) (default synthetic)")
    add("--text-field", default="text", help="text:/hf: corpora: the field of .jsonl/.json/.parquet records that holds "
                                             "the text (default text)")
    add("--vocab-size", type=int, default=8192, help="text:/hf: corpora: WordPiece vocabulary trained on the training "
                                                     "documents, special tokens included (default 8192)")
    add("--tokenizer", default=None, help="text:/hf: corpora: a tokenizers JSON file to use instead of training one; "
                                          "it must hold [PAD] [MASK] [BOS] [EOS] [UNK] as ids 0-4")
    add("--num-proc", type=int, default=None, help="processes for tokenizing large corpora (default: one)")
    add("--out", type=Path, default=None, help="output folder (default reports/<UTC timestamp>)")
    add("--resume", action="store_true", help="continue the comparison in --out: finished runs are kept, an "
                                              "interrupted run restarts from its last checkpoint")
    add("--accelerator", default="cpu", help="Fabric accelerator: cpu, cuda, mps, gpu or auto (default cpu)")
    add("--devices", default="1", help="Fabric devices per node: a count, a list like 0,1, or auto (default 1)")
    add("--num-nodes", type=int, default=1, help="Fabric nodes, for multi-node runs launched with `fabric run` or "
                                                 "torchrun (default 1)")
    add("--strategy", default="auto", help="Fabric strategy: auto or ddp; several processes on one machine are "
                                           "launched by this command, several nodes by torchrun or `fabric run` "
                                           "(default auto)")
    add("--precision", default="32-true", choices=PRECISIONS,
        help="Fabric precision; bf16-mixed trained 1.4-1.6x faster on a 2-core CPU with bf16 units (default 32-true)")
    add("--no-probes", action="store_true", help="skip the representation probes (tagging, component "
                                                 "classification, fine-tuning) that run on each final model")
    add("--probe-every-eval", action="store_true", help="also fit the frozen probes at every FLOP checkpoint, for "
                                                        "probe-accuracy-against-compute curves")
    add("--compile", action="store_true", help="torch.compile the transformer stacks: measured 1.24x faster MLM steps "
                                               "(AR unchanged) on 2 CPU cores after about 40 s of compilation per run, "
                                               "so it pays only for long runs")
    add("--quiet", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def check_args(args) -> None:
    for name, low in (("seeds", 1), ("seq_len", 2), ("batch_size", 1), ("eval_points", 1), ("num_nodes", 1)):
        if getattr(args, name) < low:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")
    if not args.budget > 0 or args.budget == float("inf"):
        raise ConfigError(f"--budget must be a positive number of FLOPs, got {args.budget:g}")
    if not args.lr > 0:
        raise ConfigError(f"--lr must be > 0, got {args.lr:g}")
    if args.model not in PRESETS:
        raise ConfigError(f"unknown --model {args.model!r}; choose one of {', '.join(PRESETS)}")
    if args.accelerator == "cpu" and args.precision == "16-mixed":
        raise ConfigError("--precision 16-mixed needs a GPU; on CPU use bf16-mixed")
    if any(word in args.strategy for word in ("spawn", "fork", "notebook", "fsdp", "deepspeed")):
        raise ConfigError(f"--strategy {args.strategy} is not supported: use auto or ddp (launched by this command, "
                          "torchrun or `fabric run`)")


def probe_config(heldout_windows: int) -> ProbeConfig:
    """The default probe split, shrunk to fit a small held-out set: 3/4 to fit, the rest to score."""
    if heldout_windows < 2:
        raise ConfigError(f"probes need at least 2 held-out windows, got {heldout_windows}; add more or --no-probes")
    default = ProbeConfig()
    train = min(default.train_windows, heldout_windows * 3 // 4)
    return replace(default, train_windows=train, test_windows=min(default.test_windows, heldout_windows - train))


def git_revision() -> str:
    try:
        here = Path(__file__).parent
        revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (revision + (" (with uncommitted changes)" if dirty else "")) if revision else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    check_args(args)
    specs = parse_objective_list(args.objectives)
    config = TrainConfig(budget_flops=args.budget, model=args.model, batch_size=args.batch_size, lr=args.lr,
                         eval_points=args.eval_points, probe_every_eval=args.probe_every_eval, compile=args.compile)
    if args.num_proc is not None and args.num_proc < 1:
        raise ConfigError(f"--num-proc must be >= 1, got {args.num_proc}")
    text = TextOptions(args.text_field, args.vocab_size, args.tokenizer, args.num_proc)
    corpus = load_corpus(args.data, args.seq_len, text)
    probe = None if args.no_probes or corpus.language is None else probe_config(len(corpus.heldout))
    # Everything that can be wrong with the input is found here, before anything is written.
    objectives = [build_on_meta(spec, args.model, args.seq_len, corpus.vocab) for spec in specs]
    canonical = [objective.spec() for objective in objectives]  # "mlm:rate=0.15" is "mlm"
    if len(set(canonical)) != len(canonical):
        raise ConfigError(f"an objective is listed twice in --objectives ({', '.join(canonical)})")
    # rows are named by the spec as the user wrote it, like the runs
    positions = [{**position_row(objective, args.seq_len, 256, 0), "objective": spec}
                 for spec, objective in zip(specs, objectives)]
    bayes = None
    if corpus.language is not None:  # the true distribution is known: the floors and ceilings are too
        test = slice(probe.train_windows, probe.train_windows + probe.test_windows) if probe else slice(None)
        bayes = {"floors": {spec: loss_floors(objective, eval_batches(objective, corpus, config), corpus)
                            for spec, objective in zip(specs, objectives)},
                 "ceilings": ceilings(corpus, test)}
    out = args.out or Path("reports") / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder")
    settings = {"data": args.data, "seq_len": args.seq_len, "text_field": args.text_field,
                "vocab_size": args.vocab_size, "tokenizer": args.tokenizer, "precision": args.precision,
                **asdict(config)}
    if (out / "config.json").exists():
        if not args.resume:
            raise ConfigError(f"{out} already holds a comparison; pass --resume to continue it, or choose "
                              "another --out")
        saved = read_json(out / "config.json")
        if saved != settings:
            changed = ", ".join(k for k in settings if saved.get(k) != settings[k])
            raise ConfigError(f"--resume with different settings than {out} was started with ({changed})")

    fabric = make_fabric(args.accelerator, args.devices, args.num_nodes, args.strategy, args.precision)
    check_batch_split(args.batch_size, fabric.world_size)  # before anything is written
    if fabric.is_global_zero:
        try:
            write_json(out / "config.json", settings)
        except OSError as error:
            raise ConfigError(f"cannot write to --out {out}: {error.strerror}") from None
    runs = []
    for spec in specs:
        for seed in range(args.seeds):
            run_dir = out / "runs" / run_name(spec, seed)
            result = finished_result(run_dir) if args.resume else None
            if result is None:
                result = train_run(fabric, spec, seed, corpus, config, run_dir, probe, progress=not args.quiet)
            runs.append(result)
    if not fabric.is_global_zero:
        return

    setup = {
        "command": "python -m bench.compare " + shlex.join(sys.argv[1:] if argv is None else argv),
        "objectives": ", ".join(specs), "seeds": args.seeds, "budget (FLOPs)": f"{args.budget:.3g}",
        "model": f"{args.model}: {runs[0]['backbone_parameters']:,} backbone parameters",
        "sequence length": args.seq_len, "global batch": args.batch_size, "peak learning rate": args.lr,
        "data": f"{corpus.name}: {corpus.description}",
        "data size": f"{corpus.summary()['train_tokens']:,} training tokens in {len(corpus.train):,} windows, "
                     f"{len(corpus.heldout):,} held-out windows (first {min(config.eval_windows, len(corpus.heldout))}"
                     " evaluated)",
        "tokenizer": corpus.tokenizer,
        "vocabulary": f"{corpus.vocab.size} ids ({corpus.vocab.num_ordinary} ordinary, "
                      f"{corpus.vocab.first_ordinary} special, "
                      f"{corpus.vocab.num_sentinels} sentinels)",
        "environment": f"python {platform.python_version()}, torch {torch.__version__}, "
                       f"{fabric.device.type} x {fabric.world_size}, precision {args.precision}",
        "git revision": git_revision(),
        "written": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if probe is not None:
        setup["probes"] = (f"linear probes fitted on {probe.train_windows} held-out windows, scored on the next "
                           f"{probe.test_windows}; fine-tuning probe: {probe.finetune_steps} steps of "
                           f"{probe.finetune_batch} windows")
    report = write_report(out, setup, positions, runs, args.budget, args.seq_len, bayes)
    print(f"report: {report}")


if __name__ == "__main__":
    run(main)
