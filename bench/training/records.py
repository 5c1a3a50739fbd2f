"""The records a run leaves for the later stages, typed: a trained run's result.json (RunRecord) and an untrained
control's (ControlRecord), each with its curve's rows (bench.training.curve.CurvePoint). `read_record` is the one
loader: result.json, and the runs and controls inside results.json, come back through it, and a record of another
layout is refused, never misread. `to_json` writes the layout field for field in order, so a file reads back equal.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from backbone import ConfigError
from bench.files import read_json
from bench.training.curve import CurvePoint

# result.json's layout: 2, the curve's rows in parts (bench.training.curve), the code revision named; 3, with the
# cool-down branches' steps and FLOPs, after which every curve point is a finished run
RUN_SCHEMA = 3

# a yardstick's scores and seconds are absent when it did not run, not null
OPTIONAL = ("probes", "probe_seconds", "downstream", "downstream_seconds")


def layout(record: object) -> dict:
    """The record's JSON: every field in order, the curve as rows, a yardstick that did not run left out."""
    out = {}
    for f in fields(record):
        value = getattr(record, f.name)
        if f.name in OPTIONAL and value is None:
            continue
        out[f.name] = [point.to_json() for point in value] if f.name == "curve" else value
    return out


@dataclass(frozen=True)
class RunRecord:
    """A finished run: what it is, the counters in total and per phase of the sequence-length schedule, throughput,
    sizes, the analytic counts, the curve and the yardsticks' final scores."""

    schema: int
    objective: str  # the spec as given, e.g. "mlm:rate=0.4"
    seed: int
    attention: str
    lr: float
    control: str  # the untrained control it is set beside (bench.training.runs.control_name)
    signals: list[str]
    sees: str | None  # what its tagging readout sees (the objective's tagging_ceiling)
    revision: str  # the code that trained it; a run resumed by other code names each in turn
    threads: int
    steps: int
    flops: int
    tokens: int
    supervised_positions: int
    phases: list[dict]
    cooldown_steps: int  # the FLOP checkpoints' cool-down branches (bench.training.loop): spent besides `flops`
    cooldown_flops: int
    supervised_per_sequence: float
    flops_per_step: float
    wall_seconds: float
    train_seconds: float
    tokens_per_second: float
    parameters: int
    backbone_parameters: int
    expected_supervised_per_sequence: float
    expected_flops_per_sequence: float
    curve: tuple[CurvePoint, ...]
    probes: dict | None = None
    probe_seconds: float | None = None
    downstream: dict | None = None
    downstream_seconds: float | None = None

    def to_json(self) -> dict:
        return layout(self)

    @classmethod
    def from_json(cls, data: dict) -> RunRecord:
        return cls(**{**data, "curve": tuple(CurvePoint.from_json(row) for row in data["curve"])})


@dataclass(frozen=True)
class ControlRecord:
    """An untrained control: the backbone a run of `read_as` starts from, read through the yardsticks at 0 FLOPs."""

    schema: int
    control: str
    read_as: str
    seed: int
    attention: str
    flops: int  # always 0: a control spends no training compute
    sees: str | None
    revision: str
    threads: int
    probes: dict | None = None
    downstream: dict | None = None
    wall_seconds: float | None = None

    def to_json(self) -> dict:
        return layout(self)

    @classmethod
    def from_json(cls, data: dict) -> ControlRecord:
        return cls(**data)


Record = RunRecord | ControlRecord


def from_json(data: dict, where: str) -> Record:
    """A run's or control's record from its JSON, refused with one line if it is of another layout."""
    if data.get("schema") != RUN_SCHEMA:
        raise ConfigError(f"{where} was written in another layout (schema {data.get('schema', 1)}, not "
                          f"{RUN_SCHEMA}): train it again in a new --out")
    kind = RunRecord if "objective" in data else ControlRecord
    try:
        return kind.from_json(data)
    except (TypeError, KeyError) as error:  # a field missing or unknown, in the record or a row of its curve
        raise ConfigError(f"{where} does not hold a {kind.__name__} of schema {RUN_SCHEMA}: {error}") from None


def read_record(path: Path) -> Record | None:
    """run_dir/result.json as a record; None when the run has not finished."""
    return from_json(read_json(path), str(path)) if path.exists() else None
