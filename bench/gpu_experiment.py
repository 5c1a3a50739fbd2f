"""One prepared comparison on real text for a lent GPU, resumable across leases (scripts/gpu-experiment.sh runs it;
README: GPUs and clusters).

A lease is short (minutes) and its command has a hard limit, so the command sizes itself: it measures the device's
training throughput at the experiment's shape (each objective for a few seconds, through the training code), picks
the FLOP budget and seeds that fit what is left of --limit with the evaluations, runs `bench.compare` on the
bundle's corpus and tasks (scripts/build_gpu_bundle.py), and stops it cleanly (SIGTERM: saved, exit 4) if the
estimate was wrong. --out keeps every lease: the first trains a budget point with SEEDS_FIRST seeds; with --resume
a later one adds seeds to a point that has fewer than --target-seeds, else a new, larger budget point. leases.json
records each lease (device, throughput, what it asked and what it finished), and each point's report.md ends with
which device and lease made each run.

`--dry-run` is the same command on a CPU at a tiny shape and budget (tests/commands/test_gpu_experiment.py), so
that a lease is never spent on a typo.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from backbone import ConfigError
from bench.common.files import write_atomic
from bench.speed.feed import PREDICTED_MFU, host_feed, host_rate, threads

OBJECTIVES = ("mlm", "ar", "electra")  # electra: the paper's λ = 50 and generator at ¼ width (ElectraOptions)
# ELECTRA-Small's shape (Clark et al. 2020, Table 6): 12 layers of width 256, 4 heads, T = 128; its peak rate 5e-4
SHAPE = {"model": "small:n_layer=12", "seq_len": 128, "batch_size": 256, "lr": "5e-4", "precision": "bf16-mixed",
         "accelerator": "cuda", "finetune_steps": 75, "finetune_lrs": "1e-4,3e-4,1e-3", "eval_points": 3,
         "num_proc": 8}
# the dry run: the same command and files at a shape a CPU runs in seconds
DRY_SHAPE = {"model": "tiny", "seq_len": 32, "batch_size": 4, "lr": "2e-3", "precision": "32-true",
             "accelerator": "cpu", "finetune_steps": 2, "finetune_lrs": "1e-3", "eval_points": 2, "num_proc": None}
DRY_MAX_STEPS = 12  # the dry run's budget: at most this many steps of the costliest objective
SEEDS_FIRST = 2  # a new budget point's seeds: two give the verdict an interval over seeds
TARGET_SEEDS = 5
# The comparison's wall time over its runs' training seconds (controls, the evaluations at each FLOP checkpoint,
# their cool-down branches, fine-tuning, the report): docs/speed.md finds the yardsticks cost about as much as
# training; taken as 3 until a lease in --out measured it
OVERHEAD = 3.0
STARTUP_SECONDS = 60  # bench.compare's start before its first step: imports, tokenizing the corpus, the tasks
MARGIN_SECONDS = 30  # left at the end of --limit: the stop's save, the lease record, the copy back
TASKS = "{data}/source.jsonl,{data}/order.jsonl,{data}/continues.jsonl,text_pair=text_pair," \
        "conll:{data}/replaced.conll,copies=replaced_token"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_experiment", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("build/gpu-bundle-data/data"),
                        help="the corpus, tasks and tokenizer: the data/ of the bundle scripts/build_gpu_bundle.py "
                             "wrote, unpacked (scripts/gpu-experiment.sh unpacks it)")
    parser.add_argument("--out", type=Path, default=Path("gpu-experiment"),
                        help="the experiment's folder: one comparison per budget point, leases.json, report.md")
    parser.add_argument("--resume", action="store_true",
                        help="continue --out: add seeds to a point with fewer than --target-seeds, else a new point")
    parser.add_argument("--allow-stale", action="store_true",
                        help="with --resume: keep runs other code trained (bench.compare's flag; the report names "
                             "them)")
    parser.add_argument("--limit", type=float, default=540.0,
                        help="seconds this command may take in all; the comparison is stopped (and saved) before")
    parser.add_argument("--measure-seconds", type=float, default=60.0,
                        help="seconds of throughput measurement, shared by the objectives")
    parser.add_argument("--target-seeds", type=int, default=TARGET_SEEDS,
                        help="seeds a budget point gets before a later lease starts a new point")
    parser.add_argument("--lease", default=os.environ.get("LEASE", ""),
                        help="a name for this lease in leases.json and the report (default: $LEASE, else the UTC "
                             "time and host)")
    parser.add_argument("--plan", type=Path, default=None,
                        help="write the predicted phases of a lease and the host's feed per objective to this page "
                             "(no GPU needed) and stop")
    parser.add_argument("--dry-run", action="store_true",
                        help="the same command on the CPU at a tiny shape and budget: checks everything but speed")
    args = parser.parse_args(argv)
    if args.limit <= MARGIN_SECONDS or args.measure_seconds <= 0 or args.target_seeds < 1:
        parser.error(f"--limit must exceed {MARGIN_SECONDS}, --measure-seconds and --target-seeds must be positive")
    return args


# --- throughput ---------------------------------------------------------------------------------------------------

def measure(shape: dict, data: Path, seconds: float, steps_cap: int | None) -> dict[str, dict]:
    """Tokens and FLOPs per second of each objective's training steps at the shape, on this device, through the
    training code itself (bench.training's loop, batches built as in training): a short run to warm up and time a
    step, then one sized to fill its share of `seconds`."""
    from bench.data.corpus import load_corpus
    from bench.data.text import TextOptions
    from bench.speed.throughput import steps_config
    from bench.training.batches import build_run_objective
    from bench.training.distributed import make_fabric
    from bench.training.runs import train_run
    from bench.training.state import Context, Work

    corpus = load_corpus(f"text:{data / 'corpus.jsonl'}", shape["seq_len"],
                         TextOptions(tokenizer=str(data / "tokenizer.json"), num_proc=shape["num_proc"]))
    fabric = make_fabric(shape["accelerator"], precision=shape["precision"])
    found, share = {}, seconds / len(OBJECTIVES)
    import tempfile

    for spec in OBJECTIVES:
        def timed(steps: int) -> tuple[float, float, float]:
            config = steps_config(spec, corpus, steps, shape["model"], shape["batch_size"])
            with tempfile.TemporaryDirectory() as folder:
                result = train_run(fabric, Work(spec, 0, config, Path(folder)), Context(corpus))
            return result.train_seconds, result.tokens, result.flops

        first = timed(3)  # the device's first kernels, autotuning and allocations: not what a long run sees
        per_step = first[0] / 3
        steps = max(3, int(share * 0.5 / max(per_step, 1e-6)))  # half the share: each timed run also evaluates
        if steps_cap is not None:
            steps = min(steps, steps_cap)
        run_seconds, tokens, flops = timed(steps)
        objective = build_run_objective(spec, steps_config(spec, corpus, 1, shape["model"], shape["batch_size"]),
                                        corpus)
        with threads(1):  # as the loop's one background thread builds them
            host = host_rate(objective, corpus.windows("train"), shape["batch_size"], shape["seq_len"], repeats=3)
        found[spec] = {"steps": steps, "seconds": run_seconds, "tokens_per_s": tokens / run_seconds,
                       "flops_per_s": flops / run_seconds, "flops_per_step": flops / steps,
                       "host_tokens_per_s": host}
    return found


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    from bench.orchestration.pipeline import cpu_model

    return f"CPU ({cpu_model()})"


# --- what a lease is predicted to take ------------------------------------------------------------------------------

def write_plan(path: Path, data: Path, limit: float) -> None:
    """The predicted phases of a first lease of `limit` seconds on an H200 and the host's feed, as a page."""
    feed = host_feed(data, SHAPE, OBJECTIVES)
    lines = ["# The GPU experiment, predicted", "",
             f"Written by `python -m bench.gpu_experiment --plan` on {device_name()} ({torch.__version__}), at the "
             f"experiment's shape ({SHAPE['model']}, T = {SHAPE['seq_len']}, batch {SHAPE['batch_size']}, "
             f"{SHAPE['precision']}) on the bundle's corpus. Nothing here ran on a GPU: the device's side is predicted "
             f"from each objective's FLOPs per step at {PREDICTED_MFU:.0%} of the H200's dense bf16 peak, plus the "
             "per-step overhead of the one H200 measurement (the default shape, launch-bound), taken as it is or "
             "scaled by depth: the two ends of each range.", "",
             "## Does the host keep the device fed?", "",
             "Tokens/s the host builds training batches at (the loop's own builder, on one thread, as its background "
             f"thread runs it; the fastest of 7 builds, with a load average of {os.getloadavg()[0]:.1f} on "
             f"{os.cpu_count()} cores) against the tokens/s the device consumes:", "",
             "| objective | host, one thread | device at the predicted MFU | device, launch-bound range | margin |",
             "|---|---|---|---|---|"]
    for spec, f in feed.items():
        fast = f["device_tokens_per_s"]  # the most the device asks for: compute alone, no overhead
        slow = SHAPE["batch_size"] * SHAPE["seq_len"] / f["step_seconds"][1]
        lines.append(f"| {spec} | {f['host_tokens_per_s']:,.0f} | {f['device_tokens_per_s']:,.0f} | "
                     f"{slow:,.0f} to {SHAPE['batch_size'] * SHAPE['seq_len'] / f['step_seconds'][0]:,.0f} | "
                     f"{f['host_tokens_per_s'] / fast:.1f}x |")
    rates = {spec: {"flops_per_s": f["flops_per_step"] / f["step_seconds"][1]} for spec, f in feed.items()}
    fast_rates = {spec: {"flops_per_s": f["flops_per_step"] / f["step_seconds"][0]} for spec, f in feed.items()}
    training = limit - 60 - STARTUP_SECONDS - MARGIN_SECONDS
    budgets = [choose({}, training / OVERHEAD, r, TARGET_SEEDS, None)[0] for r in (rates, fast_rates)]
    lines += ["", "Where the margin is under 2x, the device may wait for the host: build batches on the device or in "
              "loader workers.", "", f"## A first lease of {limit:.0f} s", "",
              "| phase | predicted seconds |", "|---|---|",
              "| unpack the bundle, install the missing wheels, import | 30 to 60 |",
              "| throughput measurement (each objective, two short runs) | 60 |",
              f"| bench.compare's start (imports, tokenizing the corpus on {SHAPE['num_proc']} processes, tasks) | "
              f"{STARTUP_SECONDS} |",
              f"| training: mlm, ar, electra x {SEEDS_FIRST} seeds | {training / OVERHEAD:.0f} |",
              f"| evaluations, controls, fine-tuning, report (taken as {OVERHEAD - 1:g}x training until measured) | "
              f"{training - training / OVERHEAD:.0f} |", f"| left for the stop's save and the copy back | "
              f"{MARGIN_SECONDS} |", "",
              f"The budget point it would choose: {budgets[0]:.2g} to {budgets[1]:.2g} FLOPs per run "
              f"(launch-bound per layer, and fixed), {SEEDS_FIRST} seeds of each objective."]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "\n".join(lines) + "\n")
    print(f"plan: {path}")


# --- what a lease runs ----------------------------------------------------------------------------------------------

def read_leases(out: Path) -> list[dict]:
    path = out / "leases.json"
    return json.loads(path.read_text()) if path.exists() else []


def points(out: Path) -> dict[float, int]:
    """Each budget point in --out and the seeds its comparison finished (every objective's run of the seed)."""
    found = {}
    for folder in sorted(out.glob("budget-*")):
        finished = [sum((folder / "runs" / f"{spec}-seed{seed}" / "result.json").exists() for spec in OBJECTIVES)
                    for seed in range(100)]
        found[float(folder.name.removeprefix("budget-"))] = next(i for i, n in enumerate(finished)
                                                                 if n < len(OBJECTIVES))
    return found


def overhead(leases: list[dict]) -> float:
    """The comparison's wall time over its training seconds, as the last lease that finished one measured it."""
    measured = [lease["overhead"] for lease in leases if lease.get("overhead")]
    return measured[-1] if measured else OVERHEAD


def choose(existing: dict[float, int], seconds: float, rates: dict[str, dict], target: int,
           budget_cap: float | None) -> tuple[float, int]:
    """The budget point and seeds this lease runs: training FLOPs that fit `seconds` of training on this device
    (each objective at its measured rate). A point with fewer than `target` seeds gets the seeds that fit (at least
    one); otherwise a new point with SEEDS_FIRST seeds at the largest budget that fits, two significant digits."""
    seconds_per_flop = sum(1 / rate["flops_per_s"] for rate in rates.values())  # one seed of every objective
    short = [budget for budget, seeds in sorted(existing.items()) if seeds < target]
    if short:
        budget = short[0]
        return budget, existing[budget] + max(1, min(target - existing[budget],
                                                     int(seconds / (budget * seconds_per_flop))))
    budget = seconds / (SEEDS_FIRST * seconds_per_flop)
    if budget_cap is not None:
        budget = min(budget, budget_cap)
    budget = float(f"{budget:.2g}")
    if budget in existing:
        raise ConfigError(f"this lease fits budget {budget:g} again, which already has {existing[budget]} seeds; "
                          "raise --target-seeds or --limit")
    return budget, SEEDS_FIRST


def compare_command(shape: dict, data: Path, point: Path, budget: float, seeds: int, resume: bool,
                    allow_stale: bool) -> list[str]:
    command = [sys.executable, "-m", "bench.compare", "--objectives", ",".join(OBJECTIVES),
               "--data", f"text:{data / 'corpus.jsonl'}", "--tokenizer", str(data / "tokenizer.json"),
               "--model", shape["model"], "--seq-len", str(shape["seq_len"]), "--batch-size", str(shape["batch_size"]),
               "--lr", shape["lr"], "--precision", shape["precision"], "--accelerator", shape["accelerator"],
               "--budget", f"{budget:g}", "--seeds", str(seeds), "--downstream", TASKS.format(data=data),
               "--finetune-steps", str(shape["finetune_steps"]), "--finetune-lrs", shape["finetune_lrs"],
               "--eval-points", str(shape["eval_points"]),
               "--checkpoint-every", "2", "--quiet", "--out", str(point)]
    if shape["num_proc"]:
        command += ["--num-proc", str(shape["num_proc"])]
    if resume:
        command.append("--resume")
    if allow_stale:
        command.append("--allow-stale")
    return command


def run_until(command: list[str], deadline: float) -> int:
    """The command, sent SIGTERM at `deadline` (time.monotonic) if still running: bench.compare then saves at the end
    of its step and exits 4, and a later --resume continues."""
    process = subprocess.Popen(command)
    try:
        return process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        print(f"stopping the comparison at the deadline (SIGTERM to {process.pid})", file=sys.stderr)
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=MARGIN_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()


def finished_runs(point: Path) -> set[str]:
    return {path.parent.name for path in point.glob("runs/*/result.json")}


def training_seconds(point: Path, names: set[str]) -> float:
    total = 0.0
    for name in names:
        result = json.loads((point / "runs" / name / "result.json").read_text())
        total += result.get("train_seconds", 0.0)
    return total


def lease_section(leases: list[dict], point: Path) -> str:
    """Which device and lease made each run of the point: the section the point's report.md ends with."""
    rows = [f"| {run} | {lease['lease']} | {lease['device']} | {lease['started']} |"
            for lease in leases if lease["point"] == point.name for run in lease["finished"]]
    return ("\n\n## Devices and leases\n\nEach run and untrained control of this comparison, with the lent device "
            "and the lease (scripts/gpu-experiment.sh) that finished it; leases.json in the experiment's folder "
            "keeps each lease's measured throughput and the budget it chose.\n\n| run | lease | device | lease "
            "started |\n|---|---|---|---|\n" + "\n".join(sorted(rows)) + "\n")


def write_index(out: Path, leases: list[dict]) -> None:
    """out/report.md: the budget points, each lease, and links to each point's report."""
    lines = ["# GPU experiment: mlm, ar and electra on Debian documentation", "",
             "Made by scripts/gpu-experiment.sh, one lease at a time (bench/gpu_experiment.py).", "",
             "| lease | device | started | point | seeds | tokens/s measured (mlm / ar / electra) | exit | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for lease in leases:
        rates = " / ".join(f"{lease['measured'][spec]['tokens_per_s']:,.0f}" for spec in OBJECTIVES)
        lines.append(f"| {lease['lease']} | {lease['device']} | {lease['started']} | [{lease['point']}]"
                     f"({lease['point']}/report.md) | {lease['seeds']} | {rates} | {lease['exit']} | "
                     f"{lease['seconds']:.0f} |")
    write_atomic(out / "report.md", "\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    args = parse_args(argv)
    shape = DRY_SHAPE if args.dry_run else SHAPE
    data = args.data.resolve()
    missing = [name for name in ("corpus.jsonl", "tokenizer.json", "source.jsonl") if not (data / name).is_file()]
    if missing:
        raise ConfigError(f"no bundle data in {args.data} ({missing[0]} is missing): build it with python "
                          "scripts/build_gpu_bundle.py; scripts/gpu-experiment.sh unpacks its data.tar.xz")
    if args.plan is not None:
        write_plan(args.plan, data, args.limit)
        return 0
    if args.out.exists() and any(args.out.iterdir()) and not args.resume:
        raise ConfigError(f"--out {args.out} holds an earlier experiment: add --resume to continue it")
    if not args.dry_run and not torch.cuda.is_available():
        raise ConfigError("no CUDA device here: run on a lent GPU, or add --dry-run to check the command on the CPU")
    args.out.mkdir(parents=True, exist_ok=True)
    leases = read_leases(args.out)
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lease = args.lease or f"{started} {socket.gethostname()}"
    device = device_name()
    print(f"lease {lease!r} on {device}: measuring throughput for up to {args.measure_seconds:.0f} s")
    rates = measure(shape, data, args.measure_seconds, DRY_MAX_STEPS if args.dry_run else None)
    for spec, rate in rates.items():
        # the loop builds the next batch while the device runs this one: near the builder's rate, it waits for it
        bound = " (near what the host builds on one thread: host-bound?)" if rate["tokens_per_s"] > 0.8 * rate[
            "host_tokens_per_s"] else ""
        print(f"  {spec}: {rate['tokens_per_s']:,.0f} tokens/s, {rate['flops_per_s']:.3g} FLOP/s; the host builds "
              f"{rate['host_tokens_per_s']:,.0f} tokens/s{bound}")
    left = args.limit - (time.monotonic() - start) - STARTUP_SECONDS - MARGIN_SECONDS
    if left <= 0:
        raise ConfigError(f"--limit {args.limit:g} leaves no time to train after the measurement; raise it")
    factor = overhead(leases)
    cap = DRY_MAX_STEPS * max(rate["flops_per_step"] for rate in rates.values()) if args.dry_run else None
    budget, seeds = choose(points(args.out), left / factor, rates, args.target_seeds, cap)
    point = args.out / f"budget-{budget:g}"
    before = finished_runs(point)
    print(f"budget point {budget:g} FLOPs, {seeds} seeds, about {left / factor:.0f} s of training "
          f"(the comparison's wall time taken as {factor:.1f}x its training)")
    command = compare_command(shape, data, point, budget, seeds, point.exists(), args.allow_stale)
    tick = time.monotonic()
    status = run_until(command, start + args.limit - MARGIN_SECONDS)
    seconds = time.monotonic() - tick
    made = sorted(finished_runs(point) - before)
    trained = training_seconds(point, {name for name in made if not name.startswith("untrained")})
    leases.append({"lease": lease, "device": device, "started": started, "torch": torch.__version__,
                   "measured": rates, "point": point.name, "budget": budget, "seeds": seeds, "exit": status,
                   "seconds": seconds, "finished": made, "command": command[1:],
                   # only a finished comparison tells what its evaluations cost beside training
                   "overhead": seconds / trained if status == 0 and trained > 0 else None})
    write_atomic(args.out / "leases.json", json.dumps(leases, indent=2) + "\n")
    report = point / "report.md"
    if status == 0 and report.exists():
        write_atomic(report, report.read_text() + lease_section(leases, point))
    write_index(args.out, leases)
    for checkpoint in args.out.rglob("*.pt"):  # too large to travel back; a later lease retrains unfinished runs
        checkpoint.unlink()
    print(f"{'report: ' + str(report) if status == 0 else f'bench.compare exited {status}'}; "
          f"{len(made)} runs finished in this lease; leases: {args.out / 'leases.json'}")
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
