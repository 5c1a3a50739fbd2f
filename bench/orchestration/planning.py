"""A comparison's plan: its typed configuration (bench.orchestration.config) checked and turned into everything the runs
need before anything is written or launched: the corpus, the objectives on the meta device, the yardsticks, the peak
rates, config.json's record, and what a --resume continues.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import torch
from lightning_fabric import Fabric

from backbone import ConfigError, resolve_model
from bench.analysis.density import build_on_meta
from bench.common.environment import code_revision, package_versions, version_note
from bench.common.files import read_json
from bench.data.corpus import Corpus, load_corpus
from bench.data.text import TextOptions
from bench.orchestration.config import EXECUTION, SETTING, Config, changed_settings
from bench.orchestration.memory import check_memory
from bench.training.recipe import (RunConfig, SeqLenSchedule, check_batch_split, check_config, parse_seq_len,
                                   predict_phases, tf32_matmuls)
from bench.orchestration.tuned_setting import finetune_rates
from bench.training.runs import control_name
from bench.training.state import Yardstick
from bench.yardsticks.downstream import Downstream, finetune_config
from bench.yardsticks.examples import TaskContext
from bench.yardsticks.probes import ProbeConfig, Probes
from bench.yardsticks.tasks import load_tasks, parse_task_list
from objectives import Objective, Vocab, parse_objective_list


CONFIG_SCHEMA = 2  # config.json's layout (bench.orchestration.config's sections); a folder of another is refused
# the embedded language's neutral tasks, the default main yardstick there: every word shown, no [MASK], no pair
NEUTRAL_SYNTHETIC_TASKS = "synthetic:states,synthetic:agreement"
FIXED = ("warmup", "cooldown", "weight_decay", "grad_clip", "first_eval", "eval_windows")  # RunConfig's


@dataclass(frozen=True)
class Plan:
    """Everything a comparison needs before the first step, all checked."""

    config: Config
    specs: list[str]
    train: RunConfig
    corpus: Corpus
    objectives: list[Objective]  # on the meta device, for counts, FLOPs and Bayes references
    probe: ProbeConfig | None
    out: Path
    settings: dict  # what config.json records; --resume must match its settings
    learning_rates: dict[str, float]  # peak rate per spec
    downstream: Downstream | None  # labelled tasks, loaded and checked
    schedule: SeqLenSchedule  # --seq-len, a plain length being one phase
    accounting: dict | None  # a schedule's predicted positions per phase and per objective (schedule_accounting)
    versions_note: str | None = None  # how this run's package versions differ from the folder it reruns/resumes
    stale: tuple[str, ...] = ()  # runs kept by --resume --allow-stale that other code trained

    @property
    def yardsticks(self) -> list[Yardstick]:
        """What every run and control is read with besides its loss: the probes, then the downstream tasks."""
        return [*([Probes(self.corpus, self.probe)] if self.probe else []),
                *([self.downstream] if self.downstream else [])]

    def control_specs(self) -> dict[str, str]:
        """{control name: the first spec read that way}: one untrained control per way the comparison reads a
        backbone (objectives read alike share it: every run of a seed starts from the same initialisation)."""
        found: dict[str, str] = {}
        for spec, objective in zip(self.specs, self.objectives):
            found.setdefault(control_name(objective), spec)
        return found


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


def task_specs(given: str | None, data: str) -> str | None:
    """--downstream as given; on the embedded language, by default its neutral tasks (the main yardstick), since
    every other question it can ask copies some objective's training; "none" turns them off."""
    if given is not None:
        return None if given.strip().lower() == "none" else given
    return NEUTRAL_SYNTHETIC_TASKS if data.partition(":")[0] == "synthetic" else None


def run_config(config: Config, fabric: Fabric, schedule: SeqLenSchedule) -> RunConfig:
    training, hardware = config.training, config.hardware
    found = RunConfig(budget_flops=training.budget, model=config.model.model, batch_size=training.batch_size,
                        eval_points=training.eval_points, probe_every_eval=not config.yardsticks.no_probe_curves,
                        compile=training.compile, micro_batch=hardware.micro_batch,
                        activation_checkpointing=hardware.activation_checkpointing,
                        checkpoint_every=hardware.checkpoint_every,
                        tf32=tf32_matmuls(fabric.device, hardware.precision), log_every=hardware.log_every,
                        seq_len_schedule=schedule, flops=config.model.flops)
    check_config(found, fabric.world_size)
    return found


def check_steps_fit(config: Config, specs: list[str], longest: int, fabric: Fabric) -> None:
    """Before any data is made: a shape that cannot fit would otherwise spend minutes building windows, then swap.
    The tokenizer's vocabulary stands in for the corpus's; it changes only the embedding's few megabytes."""
    provisional, hardware = Vocab.for_tokenizer(config.data.vocab_size), config.hardware
    for spec in specs:
        check_memory(build_on_meta(spec, resolve_model(config.model.model, provisional.size, longest), provisional),
                     hardware.micro_batch or config.training.batch_size // fabric.world_size, longest,
                     hardware.precision, fabric.device, hardware.activation_checkpointing)


def plan_corpus(config: Config, out: Path, longest: int) -> Corpus:
    """The corpus at the longest phase's length, read with the tokenizer the comparison already has, if any (a
    --resume reads the folder's, a --config rerun its original's)."""
    data, reused = config.data, config.data.reused_tokenizer
    if config.output.resume and data.tokenizer is None and (out / "tokenizer.json").is_file():
        reused = (str(out / "tokenizer.json"), "--resume")  # the runs already trained read their tokens with it
    corpus = load_corpus(data.data, longest, TextOptions(data.text_field, data.vocab_size,
                                                         reused[0] if reused else data.tokenizer, data.num_proc))
    if reused:
        corpus.tokenizer += f"; the comparison's own, reused by {reused[1]}"
    return corpus


def plan_objectives(specs: list[str], corpus: Corpus, config: Config, schedule: SeqLenSchedule, flops: str,
                    fabric: Fabric) -> list[Objective]:
    shape = resolve_model(config.model.model, corpus.vocab.size, schedule.longest)
    objectives = [build_on_meta(spec, shape, corpus.vocab, flops) for spec in specs]
    for objective in objectives:
        for seq_len in dict.fromkeys(schedule.lengths):
            objective.check_seq_len(seq_len)
    canonical = [objective.spec() for objective in objectives]  # "mlm:rate=0.15" is "mlm"
    if len(set(canonical)) != len(canonical):
        raise ConfigError(f"an objective is listed twice in --objectives ({', '.join(canonical)})")
    return objectives


def plan_downstream(config: Config, corpus: Corpus, longest: int, specs: list[str],
                    objectives: list[Objective]) -> Downstream | None:
    tasks, yardsticks = task_specs(config.yardsticks.downstream, config.data.data), config.yardsticks
    if tasks is None:
        return None
    context = TaskContext(longest, corpus.vocab, corpus.text_tokenizer, corpus.language or corpus.spelled_language,
                          corpus.spell)
    loaded = load_tasks(parse_task_list(tasks), context)
    readers = [*specs, *(control_name(objective) for objective in objectives)]  # the names a run's record reads by
    tuned = one_protocol(finetune_rates(config), readers, [task.name for task in loaded])
    return Downstream(loaded, replace(finetune_config(yardsticks.finetune_steps, yardsticks.finetune_lrs, tuned=tuned),
                                      feature_based=yardsticks.feature_based))


def one_protocol(tuned: tuple[tuple[str, str, float], ...], readers: list[str],
                 tasks: list[str]) -> tuple[tuple[str, str, float], ...]:
    """The tuned fine-tuning rates where every reader of the comparison (each objective and its control) has one on
    every task, else none: every backbone is then fine-tuned over the grid, the dev split choosing. Tuned rates for
    some and the grid for others would read one comparison two ways (one control scored 0.398 at its tuned rate and
    0.343 over the grid on the same task)."""
    covered = {(reader, task) for reader, task, _ in tuned}
    return tuned if all((reader, task) in covered for reader in readers for task in tasks) else ()


def make_plan(config: Config, fabric: Fabric) -> Plan:
    specs, schedule = parse_objective_list(config.training.objectives), parse_seq_len(config.model.seq_len)
    longest = schedule.longest  # the corpus's windows and the model's max_seq_len; the shorter phases cut them
    check_batch_split(config.training.batch_size, fabric.world_size, config.hardware.micro_batch)
    check_steps_fit(config, specs, longest, fabric)
    rates = dict(config.training.rates) or learning_rates(config.training.lr, specs,
                                                          strict=config.training.lr != Config().training.lr)
    missing = [spec for spec in specs if spec not in rates]
    if missing:
        raise ConfigError(f"--config recorded no peak rate for {', '.join(missing)}: give --lr")
    train = run_config(config, fabric, schedule)
    out = output_folder(config.output.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder")
    corpus = plan_corpus(config, out, longest)
    probe = None if config.yardsticks.no_probes or corpus.language is None else probe_config(len(corpus.heldout))
    objectives = plan_objectives(specs, corpus, config, schedule, train.flops, fabric)
    downstream = plan_downstream(config, corpus, longest, specs, objectives)
    settings = record(config, train, objectives, rates, probe, downstream)
    accounting = schedule_accounting(specs, objectives, schedule, train)
    saved = check_resume(out, settings, config.output.resume)
    stale = check_revisions(out, config.output.allow_stale) if saved is not None else []
    versions_note = record_versions(settings, saved, out, config.output.config)
    if versions_note and fabric.is_global_zero:
        print(f"warning: {versions_note}", file=sys.stderr)
    return Plan(config, specs, train, corpus, objectives, probe, out, settings, {s: rates[s] for s in specs},
                downstream, schedule, accounting, versions_note, tuple(stale))


def record(config: Config, train: RunConfig, objectives: list[Objective], rates: dict, probe: ProbeConfig | None,
           downstream: Downstream | None) -> dict:
    """config.json: the settings (bench.orchestration.config), what they resolved to, this version's fixed constants,
    and how the steps run (execution, which may change between sessions)."""
    shape = asdict(objectives[0].backbone.config)
    return {"schema": CONFIG_SCHEMA, "config": config.recorded(SETTING),
            "derived": {"model_shape": {k: v for k, v in shape.items() if k not in ("vocab_size", "max_seq_len")},
                        "learning_rates": rates, "tf32": train.tf32, "probes": probe is not None,
                        "downstream": None if downstream is None else downstream.settings(),
                        "fixed": {key: getattr(train, key) for key in FIXED}},
            "execution": config.recorded(EXECUTION)}


def read_settings(folder: Path) -> dict:
    """A comparison's config.json, refused (one line) unless it is of this layout."""
    path = folder / "config.json" if folder.is_dir() else folder
    try:
        saved = read_json(path)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: not a comparison's config.json ({str(error).splitlines()[0][:120]})") from None
    if not isinstance(saved, dict) or saved.get("schema") != CONFIG_SCHEMA:
        raise ConfigError(f"{path} was written by another version of this suite (config schema "
                          f"{saved.get('schema', 1) if isinstance(saved, dict) else '?'}, not {CONFIG_SCHEMA}): check "
                          "out the revision its report names")
    return saved


def check_resume(out: Path, settings: dict, resume: bool) -> dict | None:
    """The config.json of the comparison --resume continues (None for a fresh --out), refused unless it was
    started with the same settings (how the steps ran, and on which package versions, may change)."""
    if not (out / "config.json").exists():
        return None
    if not resume:
        raise ConfigError(f"{out} already holds a comparison; pass --resume to continue it, or choose another --out")
    saved = read_settings(out)
    changed = changed_settings({**saved["config"], "derived": saved["derived"]},
                               {**settings["config"], "derived": settings["derived"]})
    if changed:
        raise ConfigError(f"--resume with different settings than {out} was started with ({', '.join(changed)})")
    return saved


def record_versions(settings: dict, saved: dict | None, out: Path, rerun_of: Path | None) -> str | None:
    """Put the package versions in config.json and say how they differ from the folder's: a resumed comparison
    keeps the versions it was started with and lists each later session that ran on others; a rerun (--config)
    records its own and is compared with its original's."""
    current = package_versions()
    if saved is None:
        settings["versions"] = current
        return version_note(rerun_of, read_settings(rerun_of).get("versions"), current) if rerun_of else None
    settings["versions"] = saved.get("versions")
    note = version_note(out, settings["versions"], current)
    settings["resumed_with"] = saved.get("resumed_with", []) + ([current] if note else [])
    return note


def schedule_accounting(specs: list[str], objectives: list[Objective], schedule: SeqLenSchedule,
                        config: RunConfig) -> dict | None:
    """For a schedule, per objective: the steps, positions and FLOPs each phase is predicted to get, and what the
    final length throughout would give for the same FLOPs. A phase that would get no step is refused here."""
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


def predicted_phases(objective: Objective, schedule: SeqLenSchedule, config: RunConfig) -> list[dict]:
    """The predicted phases of `schedule`, each piece of an objective schedule at its own cost per sequence."""
    pieces = [objective.piece(k) for k in range(len(objective.starts))]
    return [asdict(phase) for phase in predict_phases(schedule, config.budget_flops, config.batch_size,
                                                      [piece.expected_flops_per_sequence for piece in pieces],
                                                      [piece.expected_supervised_positions for piece in pieces])]


def stale_runs(out: Path) -> list[str]:
    """"NAME (REVISION)" for each run or control in `out`, finished or interrupted, that code other than this
    process's trained (bench.common.environment.code_revision)."""
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


# --- Peak learning rates: one for every objective favours whichever it suits, so each objective has its own, given
# (`--lr 3e-3,electra=6e-3`) or, by default, the ones bench.tune chose on validation data (bench/common/tuned.json).

def parse_rate(text: str, flag: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not a number") from None
    if not rate > 0 or math.isinf(rate):
        raise ConfigError(f"{flag} rates must be positive and finite, got {text}")
    return rate


def learning_rates(text: str, specs: list[str], strict: bool = True) -> dict[str, float]:
    """"3e-3,electra=6e-3" -> {spec: peak rate} for every spec: SPEC=LR matches the spec as written, else its name;
    the plain number is everyone else's. `strict`: a name that matches no spec is a mistake (a typo), as it is when
    the user wrote it; the built-in default may name objectives that are not being compared."""
    default, named = None, {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        key, _, value = part.rpartition("=")
        rate = parse_rate(value, "--lr")
        if not key:
            if default is not None:
                raise ConfigError(f"--lr {text!r} gives more than one rate for all objectives")
            default = rate
        elif key in named:
            raise ConfigError(f"--lr names {key!r} twice")
        else:
            named[key] = rate
    unknown = [key for key in named if key not in specs and key not in {s.split(":")[0] for s in specs}]
    if unknown and strict:
        raise ConfigError(f"--lr names {', '.join(unknown)}, which is not among --objectives ({', '.join(specs)})")
    missing = [s for s in specs if s not in named and s.split(":")[0] not in named]
    if default is None and missing:
        raise ConfigError(f"--lr {text!r} gives no rate for {', '.join(missing)}: add a plain number for the rest")
    return {s: named.get(s, named.get(s.split(":")[0], default)) for s in specs}
