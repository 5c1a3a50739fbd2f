"""Compare pretraining objectives at equal compute: the command-line half (parse, check, call, print).

    python -m bench.compare --objectives mlm,ar,electra

The plan and the run loop are bench.comparison, training bench.training, the numbers bench.analysis, the
markdown bench.report.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
from argparse import ArgumentTypeError, Namespace
from pathlib import Path
from typing import Callable, Mapping

import torch

from backbone import ConfigError
from backbone.flops import CONVENTIONS
from bench.analysis.budgets import frontier_results
from bench.analysis.density import position_row
from bench.analysis.presets import describe_presets, flag_text, get_preset, paper_section
from bench.analysis.results import Measured, build_results
from bench.cli import MODEL_HELP, VOCAB_HELP, Parser, run
from bench.comparison import (DEFAULT_LR, bayes_references, describe_setup, output_folder, plan, run_all, run_controls,
                              warn_small_steps)
from bench.files import read_json, write_atomic, write_json
from bench.report.frontier import budget_folder, write_frontier_report
from bench.report.markdown import write_preset_report, write_report
from bench.training import config_file
from bench.training.config import TrainConfig
from bench.training.distributed import (TORCHRUN_FORWARDS, agree_on_folder, launch_processes, make_fabric,
                                        unforwarded_stop_signals)
from bench.training.schedule import parse_seq_len
from bench.training.stopping import EXIT_STOPPED, stop_on_signals
from bench.training.sweep import sweep, sweep_rates
from bench.yardsticks.downstream import add_finetune_flags

DEFAULT_OBJECTIVES = "mlm,ar,electra"
# The default setup: its main yardstick, the embedded language's neutral tasks, measures pretraining (most objectives
# beat their untrained controls on it, and it rises with compute), on 2 CPU cores in minutes (docs/default.md).
DEFAULT_BUDGET = 8e11
DEFAULT_MODEL = "mini"
DEFAULT_SEQ_LEN = 64
DEFAULT_SEEDS = 5  # the fewest whose intervals a reviewer accepts: over 3 seeds a percentile interval under-covers
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "64-true")

DESCRIPTION = ("Compare pretraining objectives at equal compute: train every objective (and seed) on the same windows "
               "until its accounted FLOPs reach the budget, evaluate all of them at the same log-spaced FLOP "
               "checkpoints, and write report.md, PNG plots and results.json to --out. Each finished evaluation and "
               "run is on disk at once: rerun with --resume to continue an interrupted comparison.")

EXIT_CODES = ("exit status: 0 the report was written; 2 a mistake in the input (one line on stderr, nothing written); "
              "3 the report was written but at least one run diverged (its loss became NaN or infinite; the report "
              f"lists it); {EXIT_STOPPED} stopped by SIGTERM or SIGUSR1 (e.g. a scheduler's warning before the end of "
              "a job): the running run's state was saved at the end of its current step, rerun the same command with "
              "--resume to continue exactly where it stopped")


def build_parser() -> Parser:
    parser = Parser(prog="python -m bench.compare", description=DESCRIPTION, epilog=EXIT_CODES)
    add = parser.add_argument
    add("--objectives", default=DEFAULT_OBJECTIVES,
        help="comma-separated objective specs: mlm, ar, electra, span, each with options as NAME:KEY=VALUE,... "
             "(e.g. mlm:rate=0.4,mask=1.0,random=0,keep=0), or a schedule of them on one backbone, A>B@SHARE "
             "(ar>mlm@0.25: AR for the first 25 %% of the FLOP budget, then MLM on the same weights, optimizer and "
             "learning-rate schedule); the first is the baseline of the tests and compute multipliers "
             f"(default {DEFAULT_OBJECTIVES})")
    add("--seeds", type=int, default=DEFAULT_SEEDS, help="runs per objective, seeds 0..N-1; 2 or more give "
                                                         f"confidence intervals and tests (default {DEFAULT_SEEDS})")
    add("--budget", type=float, default=DEFAULT_BUDGET,
        help=f"training FLOPs per run, forward + backward, as counted by the suite (default {DEFAULT_BUDGET:g})")
    add("--budgets", type=budget_list, default=None, metavar="B,B,...",
        help="a budget sweep, e.g. 1e11,4e11,1.6e12, in place of --budget: one complete comparison per budget in "
             "--out/budget-B (every run's learning-rate schedule ends at its own budget: a point is a finished run, "
             "not a checkpoint of a longer one), each with its own report, then the efficiency frontier in --out's "
             "report.md: per yardstick, a fit of score against log-FLOPs, each objective's compute multiplier "
             "against the baseline at every budget and where two objectives' curves cross, with 95 %% CIs from a "
             "bootstrap over seeds; --resume continues it (default: one comparison at --budget)")
    add("--model", default=DEFAULT_MODEL, help=MODEL_HELP + f" (default {DEFAULT_MODEL})")
    add("--seq-len", default=DEFAULT_SEQ_LEN, metavar="T|T:SHARE,...",
        help="window length T in tokens, or a schedule of LENGTH:SHARE phases, SHARE the fraction of the FLOP budget "
             "spent at that length (shares sum to 1), e.g. 128:0.9,512:0.1 (BERT's 90 %% of steps at 128 is about "
             "128:0.67,512:0.33 in FLOPs for BERT-base MLM): the corpus and the model's max_seq_len are at the "
             "longest length, a shorter phase reads each long window cut into consecutive windows of its length, "
             "the phase switches when the FLOPs spent cross its share, and held-out evaluation is at the last "
             f"phase's length (default {DEFAULT_SEQ_LEN})")
    add("--flops", default="dense", choices=CONVENTIONS,
        help="how attention FLOPs are charged against --budget: dense, the full T × T score matrix whatever the "
             "mask (what torch's FlopCounterMode measures); executed, only the 128 × 128 blocks a tiled "
             "(flash-style) kernel computes, so causal and prefix attention cost about half at long T, and a window "
             "of 128 tokens or fewer costs the same either way (default dense)")
    add("--batch-size", type=int, default=32, help="global batch size in windows, the same for every objective "
                                                   "(default 32)")
    add("--lr", default=DEFAULT_LR, help="peak AdamW learning rate: one number for every objective, then optional "
                                         "per-objective peaks as SPEC=LR, matched on the spec as written, then on its "
                                         f"name; one rate for all favours whichever objective it suits (default "
                                         f"{DEFAULT_LR})")
    add("--lr-sweep", default=None, help="comma-separated peak rates, e.g. 3e-4,1e-3,3e-3: first train every "
                                         "objective (seed 0) at each rate on --sweep-fraction of the budget, pick "
                                         "per objective the rate with the lowest own held-out loss, then run the "
                                         "comparison with those rates; sweep FLOPs are reported apart, never taken "
                                         "from the budget (default: no sweep, use --lr)")
    add("--sweep-fraction", type=float, default=0.25, help="share of the budget each sweep run trains for "
                                                           "(default 0.25)")
    add("--eval-points", type=int, default=6, help="log-spaced FLOP checkpoints for held-out evaluation, the "
                                                   "last at the budget (default 6)")
    add("--data", default="synthetic",
        help="data source: synthetic[:key=value,...] is the embedded HMM-mixture language (options: components, "
             "states, words, successors, zipf, seed, train, heldout), with Bayes floors and probes; synthetic:text[,...] "
             "writes it out as text with multi-piece words; text:PATH reads a .txt/.jsonl/.json/.parquet file, folder "
             "or glob; hf:NAME[:CONFIG] loads a Hugging Face hub dataset (needs network) (default synthetic)")
    add_text_flags(add)
    add_folder_flags(add)
    add_hardware_flags(add)
    add_yardstick_flags(add)
    add("--compile", action="store_true", help="torch.compile the transformer stacks: faster steps after a "
                                               "compilation of tens of seconds per run, so it pays only for long "
                                               "runs (README: Speed)")
    add("--quiet", action="store_true", help="no progress bars")
    return parser


def add_folder_flags(add) -> None:
    """Where a comparison is written, and what it reruns or resumes."""
    add("--out", type=Path, default=None, help="output folder (default reports/<UTC timestamp>)")
    add("--preset", default=None, metavar="NAME",
        help="run a classic published ablation (bert-table8, corruption-rate, static-vs-dynamic, masking-units, "
             "nsp-sop, electra-efficiency, mlm-vs-clm, seq-len-schedule): it sets the objectives, data, budget (or "
             "budgets) and seeds (flags given explicitly still override them) and its report gains a section "
             "\"Paper versus this run\" with the paper's numbers beside ours; `--preset list` shows what each runs "
             "(README: Presets)")
    add("--config", type=Path, default=None,
        help="rerun a comparison: the settings its config.json (or folder) recorded, and its number of seeds, "
             "become the defaults; flags given explicitly override them (default: none)")
    add("--resume", action="store_true", help="continue the comparison in --out: finished runs are kept, an "
                                              "interrupted run restarts from its last checkpoint; runs trained by "
                                              "other code are refused (see --allow-stale)")
    add("--allow-stale", action="store_true", help="with --resume: keep runs that another revision of the code "
                                                   "trained, instead of refusing them; the report names them")


def add_yardstick_flags(add) -> None:
    """What every run and control is read with besides its loss: the embedded probes and labelled tasks."""
    add("--no-probes", action="store_true", help="skip the diagnostic probes on the embedded language (hidden state "
                                                 "from context, replaced word, frozen and fine-tuned), which copy "
                                                 "objectives' own training and rank nobody")
    add("--no-probe-curves", action="store_true", help="fit the frozen probes only at the budget, not at every FLOP "
                                                       "checkpoint; faster, but without the curves the compute "
                                                       "multipliers are read from")
    add("--downstream", default=None,
        help="labelled tasks every final backbone and untrained control is evaluated on, frozen and fine-tuned: the "
             "neutral ones (copying no objective's training) give the answer. Comma-separated specs PATH[,text=F,"
             "text_pair=F,label=F,dev=SHARE|FILE,test=SHARE|FILE,metric=M,copies=SIGNAL] for .csv/.tsv/.jsonl/.json/"
             ".parquet files or folders, hf:NAME[:CONFIG] (needs network), conll:PATH for token tagging, "
             "synthetic:states|component|order|same-source on the embedded language; none for no task (default: "
             "synthetic:states,synthetic:component on the embedded language, none on text; README: Downstream tasks)")
    add_finetune_flags(add)


def add_text_flags(add) -> None:
    """Flags that matter only for text corpora (text:, hf:)."""
    add("--text-field", default="text", help="text:/hf: corpora: the field of .jsonl/.json/.parquet records that holds "
                                             "the text (default text)")
    add("--vocab-size", type=int, default=8192, help="text:/hf: corpora: the WordPiece vocabulary trained on the "
                                                     "training documents; " + VOCAB_HELP + " (default 8192)")
    add("--tokenizer", default=None, help="text:/hf: corpora: a tokenizers JSON file to use instead of training one; "
                                          "it must hold [PAD] [MASK] [BOS] [EOS] [UNK] as ids 0-4")
    add("--num-proc", type=int, default=None, help="processes for tokenizing large corpora (default: one)")


def add_hardware_flags(add) -> None:
    """Where and how the runs execute: Fabric's accelerator, devices, nodes, strategy and precision, and how a step
    fits in memory and how often a long run saves its state; none of them changes what a run computes except the
    precision."""
    add("--accelerator", default="auto", help="Fabric accelerator: auto (a GPU when there is one), cpu, cuda, mps "
                                              "or gpu (default auto)")
    add("--devices", default="1", help="Fabric devices per node: a count, a list like 0,1, or auto (default 1)")
    add("--num-nodes", type=int, default=1, help="Fabric nodes, for multi-node runs launched with `fabric run` or "
                                                 "torchrun (default 1)")
    add("--strategy", default="auto", help="Fabric strategy: auto or ddp; several processes on one machine are "
                                           "launched by this command, several nodes by torchrun or `fabric run` "
                                           "(default auto)")
    add("--precision", default="32-true", choices=PRECISIONS,
        help="Fabric precision: 32-true (fp32; on CUDA the matmuls run in TF32, recorded as tf32 in config.json), "
             "bf16-mixed (bf16 autocast, fp32 weights; faster where the processor has bf16 units, see the README), "
             "16-mixed (GPU only), 64-true. There is no bf16-true: bf16 weights round away AdamW's small late "
             "updates, and how many depends on each objective's update sizes, which would bias the comparison "
             "(default 32-true)")
    add("--micro-batch", type=int, default=None,
        help="windows per forward/backward on each process; the gradients of a step's micro-batches add up to the "
             "whole batch's, so counts, FLOPs and results do not change, only the memory a step needs; it must "
             "divide --batch-size / processes (default: a process's whole share at once)")
    add("--activation-checkpointing", action="store_true",
        help="keep only each transformer block's input and recompute the rest in the backward pass: less "
             "activation memory for about a third more compute per step; the FLOPs counted stay the model's, so "
             "results do not change")
    add("--log-every", type=int, default=10, metavar="STEPS",
        help="write live metrics (loss, learning rate, gradient norm, tokens/s and MFU per device, peak memory, loss "
             "scale) every this many steps to runs/NAME/logs/ as CSV, and as TensorBoard where it is installed; 0 "
             "turns them off (default 10)")
    add("--checkpoint-every", type=float, default=None, metavar="MINUTES",
        help="also save the running run's state between evaluations once this many minutes have passed since the "
             "last save, so a killed job loses at most that much (default: save at the evaluations only)")


def parse_args(argv: list[str] | None):
    """The flags; with --config, a finished comparison's settings are the defaults and explicit flags override
    them."""
    parser = build_parser()
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    if args.preset is not None:
        return preset_args(parser, args, argv, given)
    if args.config is None:
        return args
    defaults, rates, seeds, versions = config_defaults(args.config)
    if not given_flag(given, "seeds") and seeds is not None:
        defaults["seeds"] = seeds
    parser.set_defaults(**defaults)
    args = parser.parse_args(argv)
    if not given_flag(given, "lr") and args.objectives == \
            defaults["objectives"]:
        args.config_learning_rates = rates  # one rate per spec; specs with options cannot be written back as --lr
    args.config_versions = versions
    # The tokenizer is part of what a comparison was: WordPiece training differs between library versions, so the
    # rerun reads the folder's own file rather than training another, as long as it tokenizes the same text.
    tokenizer = (args.config if args.config.is_dir() else args.config.parent) / "tokenizer.json"
    if tokenizer.is_file() and not given_flag(given, "tokenizer") and all(
            getattr(args, name) == defaults[name] for name in ("data", "text_field", "vocab_size")):
        args.reused_tokenizer = (tokenizer, "--config")
    return args


def given_flag(given: list[str], dest: str) -> bool:
    flag = "--" + dest.replace("_", "-")
    return any(word == flag or word.startswith(flag + "=") for word in given)


def preset_args(parser: Parser, args: Namespace, argv: list[str] | None, given: list[str]) -> Namespace:
    """The flags with a preset's settings as the defaults; `--preset list` prints the presets and exits."""
    if args.preset == "list":
        print(describe_presets())
        sys.exit(0)
    if args.config is not None:
        raise ConfigError("--preset and --config both set the defaults; give one of them")
    preset = get_preset(args.preset)
    parser.set_defaults(**preset.flags)
    args = parser.parse_args(argv)
    for variant in preset.variants:
        for dest in variant.flags:
            if given_flag(given, dest):
                raise ConfigError(f"--preset {preset.name} runs one comparison per --{dest.replace('_', '-')} "
                                  f"({', '.join(str(v.flags[dest]) for v in preset.variants)}); drop the flag")
    return args


def config_defaults(path: Path) -> tuple[dict, dict[str, float], int | None, dict[str, str] | None]:
    """(flag defaults, peak rate per spec, seeds, package versions) that rerun the comparison `path` (its config.json)
    recorded (bench.training.config_file); versions are None for a folder written before they were recorded."""
    path = path / "config.json" if path.is_dir() else path
    try:
        saved = read_json(path)
        defaults, rates = config_file.flag_defaults(saved), saved["learning_rates"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        reason = f"has no {error}" if isinstance(error, KeyError) else str(error).splitlines()[0][:120]
        raise ConfigError(f"--config {path}: not a comparison's config.json ({reason})") from None
    changed = config_file.fixed_changes(saved, TrainConfig)
    if changed:
        raise ConfigError(f"--config {path} was run with {', '.join(changed)}, which this version fixes otherwise; "
                          f"check out the revision its report names")
    if saved.get("precision") not in PRECISIONS:
        raise ConfigError(f"--config {path}: precision {saved.get('precision')} is no longer offered; pass "
                          f"--precision ({', '.join(PRECISIONS)})")
    results = path.with_name("results.json")
    seeds = read_json(results).get("seeds") if results.is_file() else None
    return defaults, rates, seeds or None, config_file.value(saved, "versions")


def budget_list(text: str) -> list[float]:
    """argparse type of --budgets: two or more different positive FLOP counts, in increasing order."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not a comma-separated list of FLOP counts") from None
    if any(not (0 < value < math.inf) for value in values):
        raise ArgumentTypeError(f"{text!r}: every budget must be a positive number of FLOPs")
    if len(set(values)) < 2:
        raise ArgumentTypeError(f"{text!r}: a sweep needs two or more different budgets (three or more to tell a "
                                "curve from a line)")
    return sorted(set(values))


def check_args(args) -> None:
    parse_seq_len(args.seq_len)
    for name, low in (("seeds", 1), ("batch_size", 1), ("eval_points", 1), ("num_nodes", 1)):
        if getattr(args, name) < low:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")
    if not args.budget > 0 or args.budget == float("inf"):
        raise ConfigError(f"--budget must be a positive number of FLOPs, got {args.budget:g}")
    if args.lr_sweep is not None:
        sweep_rates(args.lr_sweep)
    if not 0 < args.sweep_fraction <= 1:
        raise ConfigError(f"--sweep-fraction must be in (0, 1], got {args.sweep_fraction:g}")
    if args.num_proc is not None and args.num_proc < 1:
        raise ConfigError(f"--num-proc must be >= 1, got {args.num_proc}")
    on_cpu = args.accelerator == "cpu" or (args.accelerator == "auto" and not torch.cuda.is_available())
    if on_cpu and args.precision == "16-mixed":  # before Fabric, which would warn and switch to bf16 silently
        raise ConfigError("--precision 16-mixed needs a GPU; on CPU use bf16-mixed")
    # pre-Ampere GPUs emulate bf16, many times slower, and torch counts emulation as support unless told not to
    if not on_cpu and args.precision == "bf16-mixed" and torch.cuda.is_available() and \
            not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ConfigError(f"--precision bf16-mixed: this GPU ({torch.cuda.get_device_name()}) has no bf16 units; use "
                          "16-mixed")
    if any(word in args.strategy for word in ("spawn", "fork", "notebook", "fsdp", "deepspeed")):
        raise ConfigError(f"--strategy {args.strategy} is not supported: use auto or ddp (launched by this command, "
                          "torchrun or `fabric run`)")


def resume_after_restart(args: Namespace, environ: Mapping[str, str] = os.environ) -> None:
    """torchrun --max-restarts answers a failed worker by starting the same command again, without --resume: a
    restarted worker (TORCHELASTIC_RESTART_COUNT > 0) whose --out holds this comparison resumes it. A default --out
    is named by the clock, so a restart would start over in a new folder: with restarts allowed, --out is needed."""
    restarts = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if int(environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0:
        if args.out is None:
            raise ConfigError("torchrun --max-restarts needs --out: a restarted worker resumes the comparison there "
                              "(the default folder is named by the clock, so a restart would start over)")
        if environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1" and environ.get("RANK", "0") == "0":
            # measured with two gloo workers: torch 2.13's restarted workers hang in init_process_group, 2.14's fail
            # to connect; 2.4's and any with the variable set restart cleanly (pytorch/pytorch#135712)
            print("warning: set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for torchrun: without it, recent torch's "
                  "restarted workers may hang or fail to connect", file=sys.stderr)
    if restarts > 0 and not args.resume and args.out is not None and (args.out / "config.json").exists():
        args.resume = True
        if environ.get("RANK", "0") == "0":
            print(f"torchrun restart {restarts}: resuming the comparison in {args.out}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    check_args(args)
    resume_after_restart(args)
    unforwarded = unforwarded_stop_signals(os.environ)
    if unforwarded and os.environ.get("RANK", "0") == "0":
        print(f"warning: torchrun does not pass {' or '.join(unforwarded)} on to its workers: a scheduler's "
              f"{unforwarded[0]} would end it and them mid-step, unsaved; start torchrun with --signals-to-handle "
              f"{TORCHRUN_FORWARDS},{','.join(unforwarded)}, or have the scheduler send SIGTERM", file=sys.stderr)
    if args.budgets and given_flag(sys.argv[1:] if argv is None else argv, "budget"):
        raise ConfigError("--budget and --budgets both set the budget; give one of them")
    with stop_on_signals():  # once for the whole command: a signal between two steps is not lost (README)
        if args.preset is not None:
            diverged = run_preset(args, argv)
        else:
            _, diverged = compare_or_sweep(args, argv)
    if diverged:
        sys.exit(3)


def compare(args: Namespace, argv: list[str] | None,
            paper: Callable[[dict], dict] | None = None) -> tuple[dict | None, list[dict]]:
    """Run one comparison and write its report; (results, diverged runs) on rank 0, (None, []) elsewhere. `paper`
    turns the results into a preset's "Paper versus this run" section."""
    fabric = make_fabric(args.accelerator, args.devices, args.num_nodes, args.strategy, args.precision,
                         launch=False)
    plan_ = plan(args, fabric)
    warn_small_steps(fabric, args.batch_size, min(plan_.schedule.lengths))  # the shortest phase's steps are smallest
    # rows are named by the spec as the user wrote it, like the runs; at the length the models are evaluated at
    positions = [{**position_row(objective, plan_.schedule.final), "objective": spec}
                 for spec, objective in zip(plan_.specs, plan_.objectives)]
    bayes = bayes_references(plan_)
    launch_processes(fabric)
    plan_.out = agree_on_folder(fabric, plan_.out)
    if fabric.is_global_zero:
        try:
            write_json(plan_.out / "config.json", plan_.settings)
            if plan_.corpus.text_tokenizer is not None:  # bench.downstream --run tokenizes new tasks with it
                write_atomic(plan_.out / "tokenizer.json", plan_.corpus.text_tokenizer.to_str())
        except OSError as error:
            raise ConfigError(f"cannot write to --out {plan_.out}: {error.strerror}") from None
    lr_sweep = None
    if args.lr_sweep is not None:
        lr_sweep = sweep(fabric, plan_.specs, sweep_rates(args.lr_sweep),
                         plan_.corpus, plan_.config, args.sweep_fraction, plan_.out, progress=not args.quiet)
        plan_.learning_rates = {spec: item["chosen"] for spec, item in lr_sweep.items()}
    runs, diverged = run_all(fabric, plan_, args.seeds, args.resume, progress=not args.quiet)
    controls = run_controls(fabric, plan_, args.seeds, args.resume, progress=not args.quiet)
    if not fabric.is_global_zero:
        return None, []
    results = build_results(Measured(describe_setup(args, argv, plan_, runs, fabric, bayes), positions, runs,
                                     args.budget, plan_.schedule.final, plan_.specs[0], bayes, diverged, lr_sweep,
                                     plan_.downstream.describe() if plan_.downstream else None, plan_.accounting,
                                     controls))
    if paper is not None:
        results["paper"] = paper(results)
    print(f"report: {write_report(plan_.out, results)}")
    return results, diverged


def compare_or_sweep(args: Namespace, argv: list[str] | None,
                     paper: Callable[[dict], dict] | None = None) -> tuple[dict | None, list[dict]]:
    """One comparison at --budget, or with --budgets one per budget in --out/budget-B and the frontier report on
    top; (results, diverged runs) on rank 0, a sweep's results being its frontier's
    (bench.analysis.budgets.frontier_results)."""
    if not args.budgets:
        return compare(args, argv, paper)
    out, by_budget, diverged, started = output_folder(args.out), {}, [], time.perf_counter()
    for budget in args.budgets:
        print(f"budget sweep: comparison at {budget:g} FLOPs in {out / budget_folder(budget)}", file=sys.stderr)
        results, lost = compare(Namespace(**{**vars(args), "budget": budget, "budgets": None,
                                             "out": out / budget_folder(budget)}), argv)
        by_budget[budget], diverged = results, diverged + lost
    if any(results is None for results in by_budget.values()):  # not rank 0
        return None, diverged
    largest = by_budget[max(by_budget)]
    setup = {key: value for key, value in largest["setup"].items() if key not in ("budget (FLOPs)", "written")}
    frontier = frontier_results(by_budget, largest["baseline"], {
        "command": "python -m bench.compare " + shlex.join(sys.argv[1:] if argv is None else argv),
        "budgets (FLOPs)": ", ".join(f"{budget:.3g}" for budget in args.budgets), **setup,
        "sweep time": f"{runs_minutes(by_budget.values()):.1f} min in its runs (training, evaluations, probes and "
                      f"tasks, summed over runs and sessions); {time.perf_counter() - started:.0f} s of wall time in "
                      "this session"})
    if paper is not None:  # a preset's judge reads every budget's comparison, and the frontier
        frontier["paper"] = paper({**frontier, "comparisons": {budget_folder(budget): results
                                                               for budget, results in by_budget.items()}})
    print(f"report: {write_frontier_report(out, frontier)}")
    return frontier, diverged


def runs_minutes(comparisons) -> float:
    """What the comparisons' runs cost, however many sessions (--resume) they took."""
    return sum(run.get(key) or 0 for results in comparisons for run in results["runs"]
               for key in ("wall_seconds", "probe_seconds", "downstream_seconds")) / 60


def flag_value(dest: str, value: object) -> object:
    """A preset's setting as the flag's parser would have converted it."""
    action = next(action for action in build_parser()._actions if action.dest == dest)
    return action.type(value) if isinstance(value, str) and action.type is not None else value


def run_preset(args: Namespace, argv: list[str] | None) -> list[dict]:
    """A preset's comparison, or one comparison per variant in --out/VARIANT with the paper section in --out's own
    report; returns the diverged runs."""
    preset, started = get_preset(args.preset), time.perf_counter()
    if not preset.variants:
        return compare_or_sweep(args, argv, lambda results: paper_section(
            preset, results.get("comparisons") or {"": results}, time.perf_counter() - started,
            results if "comparisons" in results else None))[1]
    out = output_folder(args.out)
    found, diverged = {}, []
    for variant in preset.variants:
        print(f"preset {preset.name}: comparison {variant.name} ({flag_text(variant.flags)})", file=sys.stderr)
        flags = {dest: flag_value(dest, value) for dest, value in variant.flags.items()}
        results, lost = compare_or_sweep(Namespace(**{**vars(args), **flags, "out": out / variant.name}), argv)
        found[variant.name], diverged = results, diverged + lost
    if all(results is not None for results in found.values()):  # rank 0
        print(f"report: {write_preset_report(out, paper_section(preset, found, time.perf_counter() - started))}")
    return diverged


if __name__ == "__main__":
    run(main)
