"""A comparison's plan and its runs: every flag checked and turned into one Plan before anything is written, then
the runs, the untrained controls and the Bayes references, and the setup table of the report.
"""

from __future__ import annotations

import platform
import shlex
import sys
from argparse import Namespace
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import torch
from lightning_fabric import Fabric

from backbone import ConfigError, resolve_model
from bench.analysis.density import build_on_meta
from bench.data.corpus import Corpus, load_corpus
from bench.data.text import TextOptions
from bench.environment import code_revision, describe as describe_versions, package_versions, version_note
from bench.files import read_json
from bench.training import config_file
from bench.training.batches import eval_batches
from bench.training.config import TrainConfig, check_batch_split, check_config, run_name, tf32_matmuls
from bench.training.loop import Yardstick
from bench.training.memory import check_memory
from bench.training.runs import control_name, control_run, finished_result, trained_or_reused
from bench.training.schedule import SeqLenSchedule, parse_seq_len, predict_phases
from bench.training.stopping import current_stop_request, stop_agreed, stop_message
from bench.training.sweep import learning_rates, provenance
from bench.yardsticks.bayes import loss_floors, unigram_losses
from bench.yardsticks.downstream import Downstream, describe_recipe, finetune_config
from bench.yardsticks.examples import TaskContext
from bench.yardsticks.probes import ProbeConfig, Probes, input_only_controls, probe_ceilings
from bench.yardsticks.tasks import load_tasks, parse_task_list
from objectives import Objective, ObjectiveSchedule, Vocab, parse_objective_list

DEFAULT_LR = "3e-3,ar=6e-3"  # --lr-sweep 1e-3,3e-3,6e-3 --sweep-fraction 1 on the default setup (README)
# the embedded language's neutral tasks, the default main yardstick there: every word shown, no [MASK], no pair
NEUTRAL_SYNTHETIC_TASKS = "synthetic:states,synthetic:component"
SMALL_STEP_TOKENS = 16384  # tokens per device step below which a GPU mostly waits for the host (warn_small_steps)


def output_folder(out: Path | None) -> Path:
    """--out, or reports/<UTC timestamp> by default, as an absolute path."""
    return (out or Path("reports") / datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")).absolute()


def probe_config(heldout_windows: int) -> ProbeConfig:
    """The default probe split, shrunk to fit a small held-out set: 3/4 to fit, the rest to score."""
    if heldout_windows < 2:
        raise ConfigError(f"probes need at least 2 held-out windows, got {heldout_windows}; add more or --no-probes")
    default = ProbeConfig()
    train = min(default.train_windows, heldout_windows * 3 // 4)
    return replace(default, train_windows=train, test_windows=min(default.test_windows, heldout_windows - train))


@dataclass
class Plan:
    """Everything a comparison needs before the first step, all checked: a mistake surfaces here, before anything
    is written or launched."""

    specs: list[str]
    config: TrainConfig
    corpus: Corpus
    objectives: list[Objective]  # on the meta device, for counts, FLOPs and Bayes references
    probe: ProbeConfig | None
    out: Path
    settings: dict  # what config.json records; --resume must match it
    learning_rates: dict[str, float]  # peak rate per spec (replaced by the sweep's choice with --lr-sweep)
    downstream: Downstream | None  # labelled tasks, loaded and checked
    schedule: SeqLenSchedule  # --seq-len, a plain length being one phase
    accounting: dict | None  # a schedule's predicted positions per phase and per objective (schedule_accounting)
    versions_note: str | None = None  # how this run's package versions differ from the folder it reruns/resumes
    stale: list[str] = field(default_factory=list)  # runs kept by --resume --allow-stale that other code trained

    @property
    def yardsticks(self) -> list[Yardstick]:
        """What every run and control is read with besides its loss: the probes, then the downstream tasks."""
        return [*([Probes(self.corpus, self.probe)] if self.probe else []), *([self.downstream] if self.downstream
                                                                             else [])]


def check_steps_fit(args, specs: list[str], longest: int, fabric: Fabric) -> None:
    """Before any data is made: a shape that cannot fit would otherwise spend minutes building windows, then swap.
    The tokenizer's vocabulary stands in for the corpus's; it changes only the embedding's few megabytes. The longest
    phase is the one that needs the most memory (a step's windows are the same in number at every length)."""
    provisional = Vocab.for_tokenizer(args.vocab_size)
    for spec in specs:
        check_memory(build_on_meta(spec, resolve_model(args.model, provisional.size, longest), provisional),
                     args.micro_batch or args.batch_size // fabric.world_size, longest, args.precision,
                     fabric.device, args.activation_checkpointing)


def plan_corpus(args, out: Path, longest: int) -> Corpus:
    """The corpus at the longest phase's length, read with the tokenizer the comparison already has, if any (a
    --resume reads the folder's, a --config rerun its original's)."""
    reused = getattr(args, "reused_tokenizer", None)
    if args.resume and args.tokenizer is None and (out / "tokenizer.json").is_file():
        reused = (out / "tokenizer.json", "--resume")  # the runs already trained read their tokens with it
    text = TextOptions(args.text_field, args.vocab_size, str(reused[0]) if reused else args.tokenizer, args.num_proc)
    corpus = load_corpus(args.data, longest, text)
    if reused:
        corpus.tokenizer += f"; the comparison's own, reused by {reused[1]}"
    return corpus


def task_specs(given: str | None, data: str) -> str | None:
    """--downstream as given; on the embedded language, by default its neutral tasks (the main yardstick), since
    every other question it can ask copies some objective's training; "none" turns them off."""
    if given is not None:
        return None if given.strip().lower() == "none" else given
    return NEUTRAL_SYNTHETIC_TASKS if data.partition(":")[0] == "synthetic" else None


def plan(args, fabric: Fabric) -> Plan:
    specs = parse_objective_list(args.objectives)
    schedule = parse_seq_len(args.seq_len)
    longest = schedule.longest  # the corpus's windows and the model's max_seq_len; the shorter phases cut them
    check_batch_split(args.batch_size, fabric.world_size, args.micro_batch)  # once, before processes are launched
    check_steps_fit(args, specs, longest, fabric)
    rates = getattr(args, "config_learning_rates", None) or learning_rates(args.lr, specs,
                                                                           strict=args.lr != DEFAULT_LR)
    config = TrainConfig(budget_flops=args.budget, model=args.model, batch_size=args.batch_size,
                         eval_points=args.eval_points, probe_every_eval=not args.no_probe_curves, compile=args.compile,
                         micro_batch=args.micro_batch, activation_checkpointing=args.activation_checkpointing,
                         checkpoint_every=args.checkpoint_every, tf32=tf32_matmuls(fabric.device, args.precision),
                         log_every=args.log_every, seq_len_schedule=schedule, flops=args.flops)
    check_config(config, fabric.world_size)
    out = output_folder(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder")
    corpus = plan_corpus(args, out, longest)
    probe = None if args.no_probes or corpus.language is None else probe_config(len(corpus.heldout))
    shape = resolve_model(args.model, corpus.vocab.size, longest)
    objectives = [build_on_meta(spec, shape, corpus.vocab, config.flops) for spec in specs]
    for objective in objectives:
        for seq_len in dict.fromkeys(schedule.lengths):
            objective.check_seq_len(seq_len)
    for objective in objectives:
        own = objective.pieces_with_own_parameters() if isinstance(objective, ObjectiveSchedule) else []
        if own and fabric.world_size > 1:
            raise ConfigError(f"{objective.spec()} on {fabric.world_size} processes: its piece(s) {', '.join(own)} "
                              "hold parameters that no gradient reaches in the other pieces' shares, which DDP "
                              "refuses; run it on one process, or use pieces without heads of their own")
    canonical = [objective.spec() for objective in objectives]  # "mlm:rate=0.15" is "mlm"
    if len(set(canonical)) != len(canonical):
        raise ConfigError(f"an objective is listed twice in --objectives ({', '.join(canonical)})")
    downstream, tasks = None, task_specs(args.downstream, args.data)
    if tasks is not None:
        context = TaskContext(longest, corpus.vocab, corpus.text_tokenizer,
                              corpus.language or corpus.spelled_language, corpus.spell)
        downstream = Downstream(load_tasks(parse_task_list(tasks), context),
                                finetune_config(args.finetune_steps, args.finetune_lrs))
    recorded = config_file.record({
        "data": args.data, "seq_len": schedule.recorded(), "text_field": args.text_field,
        "vocab_size": args.vocab_size, "tokenizer": args.tokenizer, "precision": args.precision,
        **{k: v for k, v in asdict(config).items()
           if k not in ("lr", "tf32", "seq_len_schedule", *config_file.EXECUTION)},
        "model_shape": {k: v for k, v in asdict(shape).items() if k not in ("vocab_size", "max_seq_len")},
        "learning_rates": rates, "lr_sweep": args.lr_sweep, "sweep_fraction": args.sweep_fraction,
        "probes": probe is not None, "tf32": config.tf32,
        "downstream": None if downstream is None else downstream.settings()})
    accounting = schedule_accounting(specs, objectives, schedule, config)
    saved = check_resume(out, recorded, args.resume)
    stale = check_revisions(out, args.allow_stale) if saved is not None else []
    recorded["execution"] = {k: getattr(config, k) for k in config_file.EXECUTION}
    versions_note = record_versions(recorded, saved, out, args)
    if versions_note and fabric.is_global_zero:
        print(f"warning: {versions_note}", file=sys.stderr)
    return Plan(specs, config, corpus, objectives, probe, out, recorded, rates, downstream, schedule, accounting,
                versions_note, stale)


def record_versions(settings: dict, saved: dict | None, out: Path, args: Namespace) -> str | None:
    """Put the package versions in what config.json records and say how they differ from the folder's: a resumed
    comparison keeps the versions it was started with and lists each later session that ran on others; a rerun
    (--config) records its own and is compared with its original's."""
    current = package_versions()
    if saved is None:
        settings["versions"] = current
        return version_note(args.config, args.config_versions, current) if args.config else None
    settings["versions"] = saved.get("versions")
    note = version_note(out, settings["versions"], current)
    settings["resumed_with"] = saved.get("resumed_with", []) + ([current] if note else [])
    return note


def schedule_accounting(specs: list[str], objectives: list[Objective], schedule: SeqLenSchedule,
                        config: TrainConfig) -> dict | None:
    """For a schedule, per objective: the steps, positions and FLOPs each phase is predicted to get
    (bench.training.schedule.predict_phases), and what the final length throughout would give for the same FLOPs; the
    report sets the measured positions beside them. A phase that would get no step is a mistake, refused here."""
    for spec, objective in zip(specs, objectives):  # every phase, of the lengths and of an objective schedule
        split = schedule.split_at(objective.starts)
        for phase, predicted in zip(split.phases, predicted_phases(objective, split, config)):
            if predicted["steps"] == 0:
                what = f"--seq-len {schedule.text}: phase {phase.seq_len}:{phase.share:g}" if split is schedule else \
                    f"{spec}: its {objective.piece(phase.piece).spec()} phase of {phase.share:g} of the FLOPs"
                raise ConfigError(f"{what} gets no step of {spec} at --budget {config.budget_flops:g} (the phase "
                                  "before it overshoots past its end); raise its share or the budget")
    if schedule.is_fixed:
        return None
    found = {}
    for spec, objective in zip(specs, objectives):
        split = schedule.split_at(objective.starts)
        phases = predicted_phases(objective, split, config)
        if split is not schedule:  # per length, each piece at its own cost
            phases = schedule.merged([{**phase, "share": cut.share} for phase, cut in zip(phases, split.phases)],
                                     ("steps", "tokens", "supervised_positions", "flops"))
            phases = [{k: v for k, v in phase.items() if k != "share"} for phase in phases]
        found[spec] = {"predicted": phases,
                       "final_throughout": predicted_phases(objective, SeqLenSchedule.fixed(schedule.final), config)[0]}
    return {"schedule": schedule.text, "final_seq_len": schedule.final, "objectives": found}


def predicted_phases(objective: Objective, schedule: SeqLenSchedule, config: TrainConfig) -> list[dict]:
    """The predicted phases of `schedule` (cut by an objective schedule's pieces when it is), each piece at its
    own cost per sequence."""
    pieces = [objective.piece(k) for k in range(len(objective.starts))]
    return [asdict(phase) for phase in predict_phases(schedule, config.budget_flops, config.batch_size,
                                                      [piece.expected_flops_per_sequence for piece in pieces],
                                                      [piece.expected_supervised_positions for piece in pieces])]


def check_resume(out: Path, recorded: dict, resume: bool) -> dict | None:
    """The config.json of the comparison --resume continues (None for a fresh --out), refused unless it was
    started with the same settings."""
    if not (out / "config.json").exists():
        return None
    if not resume:
        raise ConfigError(f"{out} already holds a comparison; pass --resume to continue it, or choose another --out")
    saved = read_json(out / "config.json")
    # how the steps ran, and on which package versions, may change between sessions; what they compute may not
    changed = config_file.changed(saved, recorded)
    if changed:
        raise ConfigError(f"--resume with different settings than {out} was started with ({', '.join(changed)})")
    return saved


def stale_runs(out: Path) -> list[str]:
    """"NAME (REVISION)" for each run or control in `out`, finished or interrupted, that code other than this
    process's trained (bench.environment.code_revision)."""
    current, found = code_revision(), []
    for run_dir in sorted((out / "runs").glob("*")):
        if (run_dir / "result.json").is_file():
            revision = read_json(run_dir / "result.json").get("revision", "unrecorded")
        elif (run_dir / "checkpoint.pt").is_file():
            saved = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=True)
            revision = " → ".join(saved["counters"].get("revisions", [])) or "unrecorded"
        else:
            continue
        if revision != current:
            found.append(f"{run_dir.name} ({revision})")
    return found


def check_revisions(out: Path, allow_stale: bool) -> list[str]:
    """--resume keeps only runs of this code: others are refused, unless --allow-stale keeps them (and the report
    names them)."""
    stale = stale_runs(out)
    if stale and not allow_stale:
        shown = ", ".join(stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
        raise ConfigError(f"--resume: {out} holds runs trained by other code than {code_revision()}: {shown}; "
                          "start a fresh --out, or pass --allow-stale to keep them (the report then names them)")
    return stale


def control_specs(plan_: Plan) -> dict[str, str]:
    """{control name: the first spec read that way}: one untrained control per way the comparison reads a backbone
    (objectives read alike share it, since every run of a seed starts from the same initialisation)."""
    found: dict[str, str] = {}
    for spec, objective in zip(plan_.specs, plan_.objectives):
        found.setdefault(control_name(objective), spec)
    return found


def run_controls(fabric: Fabric, plan_: Plan, seeds: int, resume: bool, progress: bool) -> list[dict]:
    """Every seed's untrained controls through the yardsticks (bench.training.runs.control_run), kept on --resume;
    nothing to do when no yardstick runs."""
    if not plan_.yardsticks:
        return []
    controls, request = [], current_stop_request()
    for name, spec in control_specs(plan_).items():
        for seed in range(seeds):
            run_dir = plan_.out / "runs" / run_name(name, seed)
            if stop_agreed(fabric, request):
                raise stop_message(fabric, f"before {run_dir.name} (the finished runs are saved)", request.signal_name)
            result = fabric.broadcast(finished_result(run_dir) if resume else None, src=0)
            if result is None:
                result = control_run(fabric, spec, seed, plan_.corpus, plan_.config, run_dir, plan_.yardsticks,
                                     progress)
            controls.append(result)
    return controls


def run_all(fabric: Fabric, plan_: Plan, seeds: int, resume: bool, progress: bool) -> tuple[list[dict], list[dict]]:
    """Train every objective and seed, keeping finished runs on --resume. A diverged run is recorded (its folder
    holds diverged.json) and the others go on. Returns (finished runs, diverged runs)."""
    runs, diverged, request = [], [], current_stop_request()
    for spec in plan_.specs:
        for seed in range(seeds):
            if stop_agreed(fabric, request):  # e.g. during the Bayes references, or the report of a preset variant
                raise stop_message(fabric, f"before {run_name(spec, seed)} (the finished runs are saved)",
                                   request.signal_name)
            config = replace(plan_.config, lr=plan_.learning_rates[spec])
            result, record = trained_or_reused(fabric, spec, seed, plan_.corpus, config,
                                               plan_.out / "runs" / run_name(spec, seed), resume,
                                               plan_.yardsticks, progress)
            if record is not None:
                diverged.append(record)
            else:
                runs.append(result)
    return runs, diverged


def bayes_references(plan_: Plan) -> dict | None:
    """On the embedded language the true distribution is known: the Bayes floor of every objective's held-out
    metrics on exactly its evaluation batches, and the probes' ceilings on their test windows."""
    corpus, probe = plan_.corpus, plan_.probe
    if corpus.language is None:
        return None
    batches = {spec: eval_batches(objective, corpus, plan_.config) for spec, objective in zip(plan_.specs,
                                                                                             plan_.objectives)}
    return {"floors": {spec: loss_floors(objective, batches[spec], corpus)
                       for spec, objective in zip(plan_.specs, plan_.objectives)},
            "unigram": {spec: unigram_losses(objective, batches[spec], corpus)
                        for spec, objective in zip(plan_.specs, plan_.objectives)},
            "ceilings": probe_ceilings(corpus, probe) if probe else None,
            "input_only": input_only_controls(corpus, probe) if probe else None}


def describe_setup(args, argv: list[str] | None, plan_: Plan, runs: list[dict], fabric: Fabric,
                   bayes: dict | None) -> dict:
    corpus, config, shape = plan_.corpus, plan_.config, plan_.settings["model_shape"]
    parameters = "no finished run"
    if runs:
        tokens = sum(r["tokens"] for r in runs) / len(runs)
        backbone = runs[0]["backbone_parameters"]
        parameters = f"{backbone:,} backbone parameters; {tokens / backbone:.2f} training tokens per parameter"
    setup = {
        "command": "python -m bench.compare " + shlex.join(sys.argv[1:] if argv is None else argv),
        "objectives": ", ".join(plan_.specs), "seeds": args.seeds, "budget (FLOPs)": f"{args.budget:.3g}",
        "model": f"{args.model}: n_layer {shape['n_layer']}, d_model {shape['d_model']}, n_head {shape['n_head']}, "
                 f"d_ff {shape['d_ff']}, {shape['positions']} positions; {parameters}",
        "sequence length": plan_.schedule.final if plan_.schedule.is_fixed else plan_.schedule.describe(),
        "global batch": args.batch_size,
        "FLOPs charged": (f"{config.flops}: " + ("attention over the full T × T, whatever the mask (what torch's "
                                                  "FlopCounterMode measures)" if config.flops == "dense" else
                                                  "causal and prefix attention only for the blocks a tiled kernel "
                                                  "computes (backbone.flops)")),
        "peak learning rates": ", ".join(f"{spec} {rate:g}" for spec, rate in plan_.learning_rates.items())
        + rates_source(provenance(args.lr, DEFAULT_LR, args.lr_sweep, {
            "budget": args.budget, "seq_len": args.seq_len, "model": args.model, "batch_size": args.batch_size,
            "data": args.data}, plan_.specs)),
        "data": f"{corpus.name}: {corpus.description}",
        "data size": f"{corpus.summary()['train_tokens']:,} training tokens in {len(corpus.train):,} windows, "
                     f"{len(corpus.heldout):,} held-out windows (first {min(config.eval_windows, len(corpus.heldout))}"
                     " evaluated)",
        "epochs": (f"{sum(r['tokens'] for r in runs) / len(runs) / corpus.summary()['train_tokens']:.1f} passes over "
                   "the training windows per run (mean)" if runs else "no finished run"),
        "tokenizer": corpus.tokenizer,
        "vocabulary": f"{corpus.vocab.size} ids ({corpus.vocab.num_ordinary} ordinary, "
                      f"{corpus.vocab.first_ordinary} special, {corpus.vocab.num_sentinels} sentinels)",
        "device": f"{device_name(fabric.device)} × {fabric.world_size}, precision {args.precision}",
        "environment": describe_versions(package_versions()) + (f" ({plan_.versions_note})"
                                                               if plan_.versions_note else ""),
        "live metrics": (f"every {config.log_every} steps in runs/NAME/logs/from-step-S/metrics.csv (CSV; "
                         "TensorBoard beside it where installed)" if config.log_every else "off (--log-every 0)"),
        "git revision": code_revision(),
        **({"stale runs": f"kept by --resume --allow-stale, trained by other code: {', '.join(plan_.stale)}"}
           if plan_.stale else {}),
        "written": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if bayes:
        setup["learnable range"] = "; ".join(
            f"{spec} {metric}: unigram {bayes['unigram'][spec][metric]:.3f} → Bayes floor {floor:.3f} nats"
            for spec, floors in bayes["floors"].items() for metric, floor in floors.items())
    if bayes and bayes.get("input_only"):
        setup["trivial baselines"] = ("probes: what the input alone gives (section 4); losses: the unigram loss "
                                      "(above); ELECTRA's discriminator: \"all original\" (its accuracy and label "
                                      "entropy are in section 4)")
    if plan_.downstream is not None:
        setup["downstream"] = describe_recipe(plan_.downstream, runs)
    if plan_.probe is not None:
        probe = plan_.probe
        setup["probes"] = (f"linear probes fitted on {probe.train_windows} held-out windows, scored on the next "
                           f"{probe.test_windows}, asked about {probe.chosen_rate:.0%} of each window's positions; "
                           f"fine-tuning probe: {probe.finetune_steps} steps of {probe.finetune_batch} windows")
    if plan_.probe is not None or plan_.downstream is not None:
        setup["untrained controls"] = (", ".join(f"{name} (read as {spec})" for name, spec in
                                                 control_specs(plan_).items())
                                       + ": each seed's backbone at the initialisation its runs start from, through "
                                       "the same yardsticks, never trained")
    return setup


def rates_source(found: dict) -> str:
    """Where the peak rates come from, said plainly (bench.training.sweep.provenance)."""
    if found["kind"] == "swept":
        return " (chosen by this comparison's own --lr-sweep; its runs' FLOPs are reported apart)"
    if found["kind"] == "given":
        return " (given by --lr: no sweep chose them)"
    text = f" (borrowed from the sweep that chose the defaults, `{found['from']['command']}`"
    if found["differs"]:
        text += f"; this comparison differs in {', '.join(found['differs'])}"
    if found["never_swept"]:
        text += f"; never swept: {', '.join(found['never_swept'])}, which take their name's or the common rate"
    return text + ("; run --lr-sweep for rates of its own)" if found["differs"] or found["never_swept"] else ")")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return f"{device.type} ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def warn_small_steps(fabric: Fabric, batch_size: int, seq_len: int) -> None:
    """A GPU fed a few thousand tokens per step waits on the host and the launch overheads most of the time."""
    tokens = batch_size // fabric.world_size * seq_len
    if fabric.device.type == "cuda" and tokens < SMALL_STEP_TOKENS:
        print(f"warning: each process's step holds {tokens:,} tokens (--batch-size {batch_size} over "
              f"{fabric.world_size} process(es) × --seq-len {seq_len}); below about {SMALL_STEP_TOKENS:,} a GPU "
              "mostly waits: raise --batch-size (with --micro-batch if memory is short)", file=sys.stderr)
