"""What a comparison's config.json records, in one schema: `record` writes it, `flag_defaults` turns it back into
bench.compare's flag defaults (--config), `changed` checks a folder against it (--resume). An older folder's missing
keys mean what `Entry.absent` says, here and nowhere else.

Three kinds of entry: a *setting* decides what the runs compute, so --resume must match it; a *fixed* one is a
constant of this version (the learning-rate schedule's shape, the evaluation grid), recorded so that --config can
refuse a folder run with another; a *session* one (how the steps were executed, the package versions) may change
between the sessions of one comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

REQUIRED = object()  # an Entry.absent: a folder without the key is not a comparison's


@dataclass(frozen=True)
class Entry:
    key: str  # in config.json
    flags: tuple[str, ...] = ()  # bench.compare's flags (argparse dests) it comes back to under --config
    to_flags: Callable[[object], dict] | None = None  # its value → those flags' defaults (None: the one flag's value)
    kind: str = "setting"  # "setting", "fixed" or "session" (the module docstring)
    absent: object = REQUIRED  # what an older folder without the key means
    optional: bool = False  # written only when it differs from `absent`, so older folders still resume


EXECUTION = ("micro_batch", "activation_checkpointing", "checkpoint_every", "log_every")


def _downstream_flags(recorded: dict | None) -> dict:
    if not recorded:
        return {}
    return {"downstream": ",".join(recorded["tasks"]), "finetune_steps": recorded["finetune_steps"],
            "finetune_lrs": ",".join(f"{lr:g}" for lr in recorded["finetune_lrs"])}


def _plain(key: str, flag: str | None = None) -> Entry:
    return Entry(key, (flag or key,))


def _fixed(key: str) -> Entry:
    return Entry(key, kind="fixed")


SCHEMA: tuple[Entry, ...] = (
    _plain("data"),
    _plain("seq_len"),  # a plain length as the int it always was; a schedule as its text
    _plain("text_field"),
    _plain("vocab_size"),
    _plain("tokenizer"),
    _plain("precision"),
    _plain("budget_flops", "budget"),
    _plain("model"),
    _plain("batch_size"),
    _fixed("warmup"),
    _fixed("min_lr_ratio"),
    _fixed("weight_decay"),
    _fixed("grad_clip"),
    _plain("eval_points"),
    _fixed("first_eval"),
    _fixed("eval_windows"),
    Entry("probe_every_eval", ("no_probe_curves",), lambda value: {"no_probe_curves": not value}),
    _plain("compile"),
    Entry("model_shape"),  # what --model resolved to: derived, compared on --resume
    # one peak rate per spec: --config gives them back as rates, since specs with options cannot be written as --lr
    Entry("learning_rates", ("objectives", "lr"), lambda rates: {"objectives": ",".join(rates)}),
    _plain("lr_sweep"),
    _plain("sweep_fraction"),
    Entry("probes", ("no_probes",), lambda value: {"no_probes": not value}),
    Entry("flops", ("flops",), absent="dense", optional=True),  # the FLOP convention; before it, always dense
    Entry("tf32", absent=False, optional=True),  # derived from the device and precision; absent on CPU
    Entry("downstream", ("downstream", "finetune_steps", "finetune_lrs"), _downstream_flags, absent=None,
          optional=True),
    Entry("execution", EXECUTION, lambda execution: {k: v for k, v in execution.items() if k in EXECUTION},
          kind="session", absent={}),
    Entry("versions", kind="session", absent=None),
    Entry("resumed_with", kind="session", absent=[]),
)
ENTRIES = {entry.key: entry for entry in SCHEMA}

# bench.compare's flags that config.json does not record, and why
NOT_RECORDED = {
    "help": "prints the help",
    "seeds": "results.json holds the seeds run, which --config reads",
    "num_proc": "tokenization workers: the same tokens on any number",
    "out": "the folder config.json is in",
    "preset": "a preset's settings are recorded as the flags it set",
    "config": "where a rerun's defaults come from",
    "resume": "whether this command continues the folder",
    "allow_stale": "whether this --resume keeps runs other code trained (each run records its revision)",
    "accelerator": "the hardware: a comparison may resume on another (results.json's setup names it)",
    "devices": "the hardware, as --accelerator",
    "num_nodes": "the hardware, as --accelerator",
    "strategy": "the hardware, as --accelerator",
    "quiet": "progress bars",
    "budgets": "a budget sweep is one comparison per budget, each recording its own budget_flops",
}


def record(values: dict) -> dict:
    """config.json's content from every setting and fixed entry's value, in the schema's order; optional entries
    only where they differ from their absent value. Session entries are added as the command learns them."""
    unknown = set(values) - set(ENTRIES)
    missing = [entry.key for entry in SCHEMA if entry.kind != "session" and entry.key not in values]
    if unknown or missing:
        raise ValueError(f"config.json schema: unknown {sorted(unknown)}, missing {missing}")
    return {entry.key: values[entry.key] for entry in SCHEMA if entry.key in values
            and not (entry.optional and values[entry.key] == entry.absent)}


def value(saved: dict, key: str, default: object = REQUIRED) -> object:
    """A recorded value, or what an older folder's missing key means; for a required key (or one outside the
    schema) `default`, KeyError without one."""
    if key in saved:
        return saved[key]
    absent = ENTRIES[key].absent if key in ENTRIES else REQUIRED
    if absent is REQUIRED and default is REQUIRED:
        raise KeyError(key)
    return default if absent is REQUIRED else absent


def flag_defaults(saved: dict) -> dict:
    """bench.compare's flag defaults that rerun the comparison `saved` records (KeyError: a required key is
    missing; fixed entries are not flags, see `fixed_changes`)."""
    defaults = {}
    for entry in SCHEMA:
        if entry.flags:
            recorded = value(saved, entry.key)
            defaults.update(entry.to_flags(recorded) if entry.to_flags else {entry.flags[0]: recorded})
    return defaults


def fixed_changes(saved: dict, current: object) -> list[str]:
    """The fixed entries `saved` recorded with another value than this version's (`current`, a TrainConfig)."""
    return [f"{entry.key} {saved[entry.key]} (now {getattr(current, entry.key)})" for entry in SCHEMA
            if entry.kind == "fixed" and entry.key in saved and saved[entry.key] != getattr(current, entry.key)]


def changed(saved: dict, settings: dict) -> list[str]:
    """The setting and fixed entries (and any key outside the schema) on which a folder's config.json and this
    command's differ; session entries may change between sessions."""
    keys = dict.fromkeys([*settings, *saved])
    compared = [key for key in keys if key not in ENTRIES or ENTRIES[key].kind != "session"]
    missing = object()
    return [key for key in compared if value(saved, key, missing) != value(settings, key, missing)]
