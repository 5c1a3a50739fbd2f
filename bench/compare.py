"""Compare pretraining objectives at equal compute: the command line (parse, build the typed configuration, call
bench.orchestration.pipeline, print).

    python -m bench.compare --objectives mlm,ar,electra
"""

from __future__ import annotations

import math
import os
import sys
from argparse import ArgumentTypeError
from pathlib import Path
from typing import Mapping

from backbone import ConfigError
from backbone.flops import CONVENTIONS
from bench import report
from bench.analysis.presets import PRESETS, Preset, get_preset
from bench.common.cli import MODEL_HELP, VOCAB_HELP, Parser, run
from bench.common.stopping import EXIT_STOPPED, stop_on_signals
from bench.orchestration import pipeline
from bench.orchestration.config import PRECISIONS, Config, validate
from bench.orchestration.planning import read_settings
from bench.training.distributed import TORCHRUN_FORWARDS, unforwarded_stop_signals
from bench.training.recipe import RunConfig
from bench.yardsticks.downstream import add_finetune_flags

# the flags' defaults are the configuration's (bench.orchestration.config says why each is what it is)
DEFAULTS = Config()
DEFAULT_OBJECTIVES, DEFAULT_SEEDS = DEFAULTS.training.objectives, DEFAULTS.training.seeds
DEFAULT_BUDGET, DEFAULT_LR = DEFAULTS.training.budget, DEFAULTS.training.lr
DEFAULT_MODEL, DEFAULT_SEQ_LEN = DEFAULTS.model.model, DEFAULTS.model.seq_len

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
    for group in (add_run_flags, add_data_flags, add_text_flags, add_folder_flags, add_hardware_flags,
                  add_yardstick_flags):
        group(parser.add_argument)
    parser.set_defaults(**{dest: value for dest, value in DEFAULTS.flags().items()
                           if dest not in ("budgets", "rates", "reused_tokenizer")})
    return parser


def add_run_flags(add) -> None:
    """What is compared, and at what compute."""
    add("--objectives", default=DEFAULT_OBJECTIVES,
        help="comma-separated objective specs (mlm, ar, electra, span; options as NAME:KEY=VALUE,..., e.g. "
             "mlm:rate=0.4), or a schedule on one backbone, A>B@SHARE (ar>mlm@0.25); the first is the baseline of "
             f"the compute multipliers (default {DEFAULT_OBJECTIVES})")
    add("--seeds", type=int, default=DEFAULT_SEEDS, help=f"runs per objective, seeds 0..N-1 (default {DEFAULT_SEEDS})")
    add("--budget", type=float, default=DEFAULT_BUDGET,
        help=f"training FLOPs per run, forward + backward, as the suite counts them (default {DEFAULT_BUDGET:g})")
    add("--budgets", type=budget_list, default=None, metavar="B,B,...",
        help="a budget sweep in place of --budget: one comparison per budget in --out/budget-B, then the efficiency "
             "frontier (fits against log-FLOPs, multipliers, crossovers) in --out/report.md")
    add("--model", default=DEFAULT_MODEL, help=MODEL_HELP + f" (default {DEFAULT_MODEL})")
    add("--seq-len", default=DEFAULT_SEQ_LEN, metavar="T|T:SHARE,...",
        help="window length in tokens, or phases LENGTH:SHARE (SHARE: the fraction of the FLOP budget spent at that "
             f"length), e.g. 128:0.67,512:0.33 (docs/scaling.md) (default {DEFAULT_SEQ_LEN})")
    add("--flops", choices=CONVENTIONS,
        help="how attention FLOPs are charged: dense, the full T × T (FlopCounterMode's count); executed, causal "
             "attention only for the 128 × 128 blocks a tiled kernel computes under its mask (default %(default)s)")
    add("--batch-size", type=int, help="global batch size in windows, the same for every objective "
                                                   "(default %(default)s)")
    add("--lr", default=DEFAULT_LR, help="peak AdamW rate: one for every objective, then SPEC=LR per objective "
                                         f"(default {DEFAULT_LR}, from the sweep docs/default.md names)")
    add("--eval-points", type=int, default=DEFAULTS.training.eval_points,
        help="log-spaced FLOP checkpoints for held-out evaluation, the last at the budget, each before it a finished "
             f"run (a cool-down branch) (default {DEFAULTS.training.eval_points})")
    add("--compile", action="store_true", help="torch.compile the transformer stacks: pays only for long runs "
                                               "(docs/speed.md)")
    add("--quiet", action="store_true", help="no progress bars")


def add_data_flags(add) -> None:
    add("--data",
        help="synthetic[:key=value,...], the embedded language with exact inference; synthetic:text, it written as "
             "text; text:PATH, a .txt/.jsonl/.json/.parquet file, folder or glob; hf:NAME[:CONFIG], a hub dataset "
             "(needs network) (default %(default)s)")


def add_folder_flags(add) -> None:
    """Where a comparison is written, and what it reruns or resumes."""
    add("--out", type=Path, default=None, help="output folder (default reports/<UTC timestamp>)")
    add("--preset", default=None, metavar="NAME",
        help="a classic published ablation (`--preset list`): it sets the objectives, data, budget and seeds (flags "
             "given still override them) and its report sets the paper's numbers beside this run's (docs/presets.md)")
    add("--config", type=Path, default=None,
        help="rerun a comparison: the settings its config.json (or folder) recorded become the defaults; flags "
             "given override them")
    add("--resume", action="store_true", help="continue the comparison in --out: finished runs are kept, an "
                                              "interrupted one restarts from its last checkpoint; runs of other code "
                                              "are refused")
    add("--allow-stale", action="store_true", help="with --resume: keep runs another revision of the code trained; "
                                                   "the report names them")


def add_yardstick_flags(add) -> None:
    """What every run and control is read with besides its loss: labelled tasks and the diagnostic probes."""
    add("--no-probes", action="store_true", help="skip the diagnostic probes of the embedded language (they copy "
                                                 "objectives' own training and rank nobody)")
    add("--no-probe-curves", action="store_true", help="read the tasks only at the budget, not at every FLOP "
                                                       "checkpoint: faster, but no curve to read multipliers off")
    add("--feature-based", action="store_true",
        help="also read every task frozen as BERT's feature-based results did (Devlin et al. 2019, Table 8): a "
             "plain linear probe on the last four layers' states concatenated, a yardstick of its own")
    add("--downstream", default=None,
        help="labelled tasks, frozen and fine-tuned, the neutral ones giving the answer: specs PATH[,text=F,"
             "text_pair=F,label=F,metric=M,copies=SIGNAL,...], hf:NAME[:CONFIG], conll:PATH, "
             "synthetic:states|agreement|topic|order|same-source, or none (default: synthetic:states,"
             "synthetic:agreement on the embedded language, none on text; docs/yardsticks.md)")
    add_finetune_flags(add)


def add_text_flags(add) -> None:
    """Flags that matter only for text corpora (text:, hf:, and synthetic:text but its field); given with a corpus
    that has no use for them, they are refused (bench.orchestration.config.refuse_unused_text_flags)."""
    add("--text-field", help="text:/hf: corpora: the record field that holds the text (default %(default)s)")
    add("--vocab-size", type=int, help="text:/hf: corpora and synthetic:text: the WordPiece vocabulary trained on "
                                       "the training documents; " + VOCAB_HELP + " (default %(default)s)")
    add("--tokenizer", default=None, help="text:/hf: corpora and synthetic:text: a tokenizers JSON file instead of "
                                          "training one; it must hold [PAD] [MASK] [BOS] [EOS] [UNK] as ids 0-4")
    add("--num-proc", type=int, default=None, help="text:/hf: corpora and synthetic:text: processes for tokenizing "
                                                   "large corpora (default: one)")


def add_hardware_flags(add) -> None:
    """Where and how the runs execute; none of them changes what a run computes but the precision."""
    add("--accelerator", help="Fabric accelerator: auto, cpu, cuda, mps or gpu (default %(default)s)")
    add("--devices", help="Fabric devices per node: a count, a list like 0,1, or auto (default %(default)s)")
    add("--num-nodes", type=int, help="nodes, launched with torchrun or `fabric run` (default %(default)s)")
    add("--strategy", help="Fabric strategy: auto or ddp (default %(default)s; docs/scaling.md)")
    add("--precision", choices=PRECISIONS,
        help="32-true (fp32; TF32 matmuls on CUDA), bf16-mixed (bf16 autocast, fp32 weights), 16-mixed (GPU only) "
             "or 64-true; no bf16-true, whose weights round away small AdamW updates unevenly (default %(default)s)")
    add("--micro-batch", type=int, default=None,
        help="windows per forward/backward on each process, gradients accumulated: the same results in less memory "
             "(default: a process's whole share)")
    add("--activation-checkpointing", action="store_true",
        help="recompute each block's activations in the backward pass: less memory, the same results")
    add("--log-every", type=int, metavar="STEPS",
        help="live metrics every this many steps in runs/NAME/logs/ (CSV, TensorBoard where installed); 0: off "
             "(default %(default)s)")
    add("--checkpoint-every", type=float, default=None, metavar="MINUTES",
        help="also save the running run between evaluations this often (default: at the evaluations only)")
    add_job_flags(add)


def add_job_flags(add) -> None:
    """How many runs at once, and where (docs/scaling.md): none changes a run's numbers at a given thread count."""
    add("--jobs", type=int, default=None, metavar="N",
        help="runs (objective x seed, then the untrained controls) at once, each in a process of its own on its share "
             "of the cores or on one GPU (one or more per GPU); results are written as each finishes (default: "
             "one per core when the runs hold enough training to repay the processes' start, else one; on GPUs, "
             "one or more per device, by memory)")
    add("--threads-per-run", type=int, default=None, metavar="N",
        help="torch threads of each run on a CPU: the same count gives the same numbers, however many run at once "
             "(default: the cores shared out among the runs at once)")
    add("--launcher", choices=("pool", "slurm", "local"),
        help="pool: this machine's processes (--jobs); slurm: each run a Slurm job through submitit (pip install "
             "-e '.[slurm]'), this command waiting for them and writing the report, --resume collecting finished "
             "jobs and resubmitting the others; local: submitit's local executor, each run a process of its own as on "
             "Slurm (default %(default)s)")
    add("--slurm-partition", default=None, help="Slurm partition of the run jobs (default: the cluster's)")
    add("--slurm-time", type=int, metavar="MINUTES", help="time limit of each run job (default %(default)s)")
    add("--slurm-gpus-per-job", type=int, default=None, metavar="N",
        help="GPUs of each run job (default: 1, none with --accelerator cpu)")
    add("--slurm-cpus-per-job", type=int, default=None, metavar="N",
        help="CPUs of each run job, its torch threads on a CPU (default: --threads-per-run, else 1)")
    add("--slurm-folder", type=Path, default=None,
        help="submitit's scripts and logs (default --out/slurm, on the storage the jobs share)")


def parse_config(argv: list[str] | None) -> Config:
    """The flags as one typed configuration; with --preset or --config, theirs are the defaults and the flags given
    override them. The argparse Namespace stops here."""
    parser, given = build_parser(), sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    reused = None
    if args.preset == "list":
        print(describe_presets())
        sys.exit(0)
    if args.preset is not None and args.config is not None:
        raise ConfigError("--preset and --config both set the defaults; give one of them")
    if args.preset is not None:
        preset = get_preset(args.preset)
        parser.set_defaults(**preset.flags)
        refuse_variant_flags(preset, given)
    elif args.config is not None:
        defaults, reused = rerun_defaults(args.config, given)
        parser.set_defaults(**defaults)
    args = parser.parse_args(argv)
    if args.budgets and given_flag(given, "budget"):
        raise ConfigError("--budget and --budgets both set the budget; give one of them")
    values = {**vars(args), "seq_len": str(args.seq_len), "budgets": tuple(args.budgets or ())}
    if reused is not None and all(values[name] == parser.get_default(name)
                                  for name in ("data", "text_field", "vocab_size", "tokenizer")):
        values["reused_tokenizer"] = reused
    config = Config.from_flags(values, tuple(given))
    validate(config)
    return config


def refuse_variant_flags(preset: Preset, given: list[str]) -> None:
    for variant in preset.variants:
        for dest in variant.flags:
            if given_flag(given, dest):
                raise ConfigError(f"--preset {preset.name} runs one comparison per --{dest.replace('_', '-')} "
                                  f"({', '.join(str(v.flags[dest]) for v in preset.variants)}); drop the flag")


def rerun_defaults(path: Path, given: list[str]) -> tuple[dict, tuple[str, str] | None]:
    """A finished comparison's recorded settings as flag defaults, its peak rates (unless --lr or --objectives is
    given), and its tokenizer to read instead of training another (WordPiece training differs between versions)."""
    saved = read_settings(path)
    changed = [f"{key} {value} (now {getattr(RunConfig, key)})" for key, value in saved["derived"]["fixed"].items()
               if value != getattr(RunConfig, key)]
    if changed:
        raise ConfigError(f"--config {path} was run with {', '.join(changed)}, which this version fixes otherwise; "
                          "check out the revision its report names")
    defaults = Config.from_recorded({**saved["config"], **{k: {**saved["config"].get(k, {}), **v}
                                                           for k, v in saved.get("execution", {}).items()}})
    if not given_flag(given, "lr") and not given_flag(given, "objectives"):
        defaults["rates"] = tuple(saved["derived"]["learning_rates"].items())
    defaults["config"] = path
    tokenizer = (path if path.is_dir() else path.parent) / "tokenizer.json"
    return defaults, ((str(tokenizer), "--config") if tokenizer.is_file() and not given_flag(given, "tokenizer")
                      else None)


def given_flag(given: list[str], dest: str) -> bool:
    flag = "--" + dest.replace("_", "-")
    return any(word == flag or word.startswith(flag + "=") for word in given)


def flag_text(flags: dict) -> str:
    """The flags as they would be typed: --key value, a bare --key for a switch that is on."""
    words = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        words.append(flag if value is True else f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return " ".join(words)


def describe_presets() -> str:
    """What `--preset list` prints: each preset, what it runs and the paper it re-asks."""
    lines = []
    for preset in PRESETS.values():
        runs = "; one comparison per variant: " + ", ".join(f"{v.name} ({flag_text(v.flags)})"
                                                           for v in preset.variants) if preset.variants else ""
        lines.append(f"{preset.name}: {preset.summary}\n    paper: {preset.paper.citation}\n    runs: "
                     f"{flag_text(preset.flags)}{runs}")
    return "\n".join(lines)


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


def resume_after_restart(config: Config, environ: Mapping[str, str] = os.environ) -> Config:
    """torchrun --max-restarts answers a failed worker by starting the same command again, without --resume: a
    restarted worker (TORCHELASTIC_RESTART_COUNT > 0) whose --out holds this comparison resumes it. A default --out
    is named by the clock, so a restart would start over in a new folder: with restarts allowed, --out is needed."""
    out, restarts = config.output.out, int(environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if int(environ.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0:
        if out is None:
            raise ConfigError("torchrun --max-restarts needs --out: a restarted worker resumes the comparison there "
                              "(the default folder is named by the clock, so a restart would start over)")
        if environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1" and environ.get("RANK", "0") == "0":
            # measured with two gloo workers: torch 2.13's restarted workers hang in init_process_group, 2.14's fail
            # to connect; 2.4's and any with the variable set restart cleanly (pytorch/pytorch#135712)
            print("warning: set TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 for torchrun: without it, recent torch's "
                  "restarted workers may hang or fail to connect", file=sys.stderr)
    if restarts > 0 and not config.output.resume and out is not None and (out / "config.json").exists():
        if environ.get("RANK", "0") == "0":
            print(f"torchrun restart {restarts}: resuming the comparison in {out}", file=sys.stderr)
        return config.with_flags(resume=True)
    return config


def main(argv: list[str] | None = None) -> None:
    config = resume_after_restart(parse_config(argv))
    unforwarded = unforwarded_stop_signals(os.environ)
    if unforwarded and os.environ.get("RANK", "0") == "0":
        print(f"warning: torchrun does not pass {' or '.join(unforwarded)} on to its workers: a scheduler's "
              f"{unforwarded[0]} would end it and them mid-step, unsaved; start torchrun with --signals-to-handle "
              f"{TORCHRUN_FORWARDS},{','.join(unforwarded)}, or have the scheduler send SIGTERM", file=sys.stderr)
    with stop_on_signals():  # once for the whole command: a signal between two steps is not lost
        diverged = pipeline.run(config, report)
    if diverged:
        sys.exit(3)


if __name__ == "__main__":
    run(main)
