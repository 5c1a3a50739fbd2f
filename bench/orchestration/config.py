"""A comparison's one typed configuration: a tree of frozen dataclasses built once from the flags (bench.compare),
validated in one place, serialised as config.json, and diffed by --resume.

Every field is named after the flag that sets it, so the command line maps onto it one to one. A field's `kind`
says what a folder records of it: a *setting* decides what the runs compute (--resume must match it); an *execution*
one changes only how the steps run and may differ between sessions; a *command* one belongs to this invocation and is
not recorded (where to write, whether to resume, how many runs at once).
"""

from __future__ import annotations

import importlib.util
import math
import shutil
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from backbone import ConfigError
from bench.common.tuned import TUNED
from bench.training.recipe import RunConfig
from bench.yardsticks.downstream import DEFAULT_STEPS

SETTING, EXECUTION, COMMAND = "setting", "execution", "command"
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "64-true")
# pool: this machine's processes (--jobs); slurm: one Slurm job per run through submitit; local: submitit's local
# executor, each run a process of its own as on Slurm (to try a cluster's path on one machine)
LAUNCHERS = ("pool", "slurm", "local")


def kind(value: str, default: object = None, **extra) -> object:
    """A field of a given kind (the module docstring)."""
    factory = {"default_factory": default} if callable(default) else {"default": default}
    return field(metadata={"kind": value, **extra}, **factory)


@dataclass(frozen=True)
class DataConfig:
    data: str = "synthetic"
    text_field: str = "text"
    vocab_size: int = 8192
    tokenizer: str | None = None
    num_proc: int | None = kind(EXECUTION)  # tokenization workers: the same tokens on any number
    # a rerun's or a resume's own tokenizer.json, read instead of training another (and the flag that chose it)
    reused_tokenizer: tuple[str, str] | None = kind(COMMAND)


@dataclass(frozen=True)
class ModelConfig:
    model: str = "mini"
    seq_len: str = "64"  # a length, or a schedule LENGTH:SHARE,...
    flops: str = RunConfig.flops


@dataclass(frozen=True)
class TrainingConfig:
    objectives: str = TUNED["objectives"]  # the tuned default's (bench.common.tuned, reports/tuning)
    # five: the fewest whose intervals a reviewer accepts (over 3 seeds a percentile interval under-covers); more
    # seeds add runs to a folder, fewer read only the first
    seeds: int = kind(EXECUTION, 5)
    # the default's main yardstick, the embedded language's neutral tasks, measures pretraining at this budget (most
    # objectives beat their untrained controls on it, and it rises with compute; docs/default.md)
    # 5e11 with 3 checkpoints and 75 fine-tuning steps: the default's 5 seeds fit in 300 s on 2 cores, cool-down
    # branches, native reads and the ELECTRA Bayes reference included (docs/default.md)
    budget: float = 5e11
    budgets: tuple[float, ...] = kind(COMMAND, ())  # a sweep: one comparison (its own config) per budget
    batch_size: int = RunConfig.batch_size
    lr: str = TUNED["lr"]  # chosen on validation data by `python -m bench.tune` (reports/tuning)
    # peak rate per spec as a rerun (--config) recorded them: specs with options cannot be written back as --lr
    rates: tuple[tuple[str, float], ...] = ()
    eval_points: int = RunConfig.eval_points
    compile: bool = False


@dataclass(frozen=True)
class YardstickConfig:
    no_probes: bool = False
    no_probe_curves: bool = False
    # also read every task frozen as BERT's feature-based column did (its Table 8): the last four layers concatenated
    feature_based: bool = False
    downstream: str | None = None  # None: the data source's default tasks (bench.orchestration.planning.task_specs)
    finetune_steps: int = DEFAULT_STEPS  # its one home is the fine-tuning recipe's (bench.yardsticks.downstream)
    # each reader's tuned rate per task where the setting is the tuned one (bench.common.tuned)
    finetune_lrs: str = "tuned"


@dataclass(frozen=True)
class HardwareConfig:
    accelerator: str = kind(COMMAND, "auto")  # a comparison may resume on other hardware; its setup names it
    devices: str = kind(COMMAND, "1")
    num_nodes: int = kind(COMMAND, 1)
    strategy: str = kind(COMMAND, "auto")
    precision: str = "32-true"
    micro_batch: int | None = kind(EXECUTION)
    activation_checkpointing: bool = kind(EXECUTION, False)
    log_every: int = kind(EXECUTION, RunConfig.log_every)
    checkpoint_every: float | None = kind(EXECUTION)
    # how many runs at once and where (bench.orchestration.jobs): never what a run computes at a given thread count
    jobs: int | None = kind(COMMAND)  # None: what the machine uses well (bench.orchestration.jobs.auto_jobs)
    threads_per_run: int | None = kind(COMMAND)  # None: the cores shared out among the runs at once
    launcher: str = kind(COMMAND, "pool")
    slurm_partition: str | None = kind(COMMAND)
    slurm_time: int = kind(COMMAND, 60)
    slurm_gpus_per_job: int | None = kind(COMMAND)
    slurm_cpus_per_job: int | None = kind(COMMAND)
    slurm_folder: Path | None = kind(COMMAND)

    def __post_init__(self) -> None:
        """The mistakes these flags alone can make, refused where the flags become a configuration."""
        for name in ("jobs", "threads_per_run", "slurm_time", "slurm_cpus_per_job"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.launcher not in LAUNCHERS:
            raise ConfigError(f"--launcher {self.launcher} is not offered ({', '.join(LAUNCHERS)})")
        several = (self.jobs or 1) > 1 or self.launcher != "pool"
        if several and (str(self.devices) != "1" or self.num_nodes != 1):
            how = f"--jobs {self.jobs}" if self.launcher == "pool" else f"--launcher {self.launcher}"
            raise ConfigError(f"{how} runs each run on one device; --devices {self.devices} --num-nodes "
                              f"{self.num_nodes} makes one run span several (Fabric DDP): give one of them")
        if self.launcher != "pool" and importlib.util.find_spec("submitit") is None:
            raise ConfigError(f"--launcher {self.launcher} needs submitit: pip install -e '.[slurm]'")
        if self.launcher == "slurm" and shutil.which("sbatch") is None:
            raise ConfigError("--launcher slurm: no sbatch on this machine's PATH; run the command where Slurm "
                              "jobs are submitted (a login node)")
        slurm = [f.name for f in fields(self) if f.name.startswith("slurm_") and getattr(self, f.name) not in
                 (None, f.default)]
        if slurm and self.launcher == "pool":
            raise ConfigError(f"--{slurm[0].replace('_', '-')} needs --launcher slurm (or local)")


@dataclass(frozen=True)
class OutputConfig:
    out: Path | None = kind(COMMAND)
    resume: bool = kind(COMMAND, False)
    allow_stale: bool = kind(COMMAND, False)
    quiet: bool = kind(COMMAND, False)
    config: Path | None = kind(COMMAND)  # the comparison a rerun took its settings from
    preset: str | None = kind(COMMAND)


SECTIONS = {"data": DataConfig, "model": ModelConfig, "training": TrainingConfig, "yardsticks": YardstickConfig,
            "hardware": HardwareConfig, "output": OutputConfig}


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    yardsticks: YardstickConfig = field(default_factory=YardstickConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    command: tuple[str, ...] = ()  # the words the command was given, for the report

    @classmethod
    def from_flags(cls, values: dict, command: tuple[str, ...] = ()) -> "Config":
        """The tree from flag values by destination (argparse's); a value no field takes is a mistake."""
        known = {f.name for section in SECTIONS.values() for f in fields(section)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"no configuration field for {', '.join(sorted(unknown))}")
        return cls(**{name: section(**{f.name: values[f.name] for f in fields(section) if f.name in values})
                      for name, section in SECTIONS.items()}, command=tuple(command))

    def flags(self) -> dict:
        """Every field by its flag's destination."""
        return {f.name: getattr(getattr(self, name), f.name) for name, section in SECTIONS.items()
                for f in fields(section)}

    def with_flags(self, **values) -> "Config":
        """The same configuration with some flags changed (a preset's variant, one budget of a sweep)."""
        return Config.from_flags({**self.flags(), **values}, self.command)

    def recorded(self, *kinds: str) -> dict:
        """{section: {field: value}} of the fields of these kinds, JSON-ready (config.json)."""
        found = {}
        for name, section in SECTIONS.items():
            part = {f.name: plain(getattr(getattr(self, name), f.name)) for f in fields(section)
                    if f.metadata.get("kind", SETTING) in kinds}
            if part:
                found[name] = part
        return found

    @classmethod
    def from_recorded(cls, recorded: dict) -> dict:
        """Flag values from a config.json's sections (--config): what a rerun takes as its defaults."""
        values = {}
        for name, section in SECTIONS.items():
            for f in fields(section):
                if f.name in recorded.get(name, {}):
                    value = recorded[name][f.name]
                    values[f.name] = tuple(tuple(pair) for pair in value) if f.name == "rates" else \
                        tuple(value) if isinstance(value, list) else value
        return values


def plain(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [plain(item) for item in value]
    return value


def on_cpu(hardware: HardwareConfig) -> bool:
    return hardware.accelerator == "cpu" or (hardware.accelerator == "auto" and not torch.cuda.is_available())


def validate(config: Config) -> None:
    """Every mistake a configuration can hold that no flag parser sees, as one-line ConfigErrors, before anything
    runs (the objectives, data and tasks are checked where they are built, bench.orchestration.planning)."""
    from bench.training.recipe import parse_seq_len

    training, hardware = config.training, config.hardware
    parse_seq_len(config.model.seq_len)
    for section, name, low in (("training", "seeds", 1), ("training", "batch_size", 1),
                               ("training", "eval_points", 1), ("hardware", "num_nodes", 1)):
        if getattr(getattr(config, section), name) < low:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(getattr(config, section), name)}")
    if not 0 < training.budget < math.inf:
        raise ConfigError(f"--budget must be a positive number of FLOPs, got {training.budget:g}")
    if config.data.num_proc is not None and config.data.num_proc < 1:
        raise ConfigError(f"--num-proc must be >= 1, got {config.data.num_proc}")
    refuse_unused_text_flags(config.data)
    if hardware.precision not in PRECISIONS:
        raise ConfigError(f"--precision {hardware.precision} is not offered ({', '.join(PRECISIONS)})")
    if on_cpu(hardware) and hardware.precision == "16-mixed":  # before Fabric, which would switch to bf16 silently
        raise ConfigError("--precision 16-mixed needs a GPU; on CPU use bf16-mixed")
    # pre-Ampere GPUs emulate bf16, many times slower, and torch counts emulation as support unless told not to
    if not on_cpu(hardware) and hardware.precision == "bf16-mixed" and torch.cuda.is_available() and \
            not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ConfigError(f"--precision bf16-mixed: this GPU ({torch.cuda.get_device_name()}) has no bf16 units; use "
                          "16-mixed")
    if any(word in hardware.strategy for word in ("spawn", "fork", "notebook", "fsdp", "deepspeed")):
        raise ConfigError(f"--strategy {hardware.strategy} is not supported: use auto or ddp (launched by this "
                          "command, torchrun or `fabric run`)")


def refuse_unused_text_flags(data: DataConfig) -> None:
    """A text flag set for a corpus that has no use for it would be accepted and do nothing: refused instead. The
    embedded language has no records, tokenizer or tokenization; synthetic:text writes its own one-field file, whose
    WordPiece vocabulary (--vocab-size, capped at half its words), --tokenizer and --num-proc it does use."""
    from bench.data.corpus import data_source

    source = data_source(data.data)[0]
    unused = {"synthetic": ("text_field", "vocab_size", "tokenizer", "num_proc"),
              "synthetic:text": ("text_field",)}.get(source, ())
    for name in unused:
        value = getattr(data, name)
        if value != DataConfig.__dataclass_fields__[name].default:
            raise ConfigError(f"--{name.replace('_', '-')} {value} does nothing with --data {data.data}: it applies to "
                              "text:/hf: corpora" + (" and synthetic:text" if name != "text_field" else "")
                              + "; drop it")


def changed_settings(saved: dict, current: dict) -> list[str]:
    """"section.field" for each setting two config.json records differ on (what --resume refuses)."""
    found = []
    for name in dict.fromkeys([*saved, *current]):
        for key in dict.fromkeys([*saved.get(name, {}), *current.get(name, {})]):
            if saved.get(name, {}).get(key, MISSING) != current.get(name, {}).get(key, MISSING):
                found.append(f"{name}.{key}")
    return found


MISSING = object()


