"""What a run has spent (Counters, kept in its checkpoint), its curve (one row per FLOP checkpoint, CurvePoint) and
the records it leaves for the later stages, typed: a trained run's result.json (RunRecord) and an untrained
control's (ControlRecord). `read_record` is the one
loader: result.json, and the runs and controls inside results.json, come back through it, and a record of another
layout is refused, never misread. `to_json` writes the layout field for field in order, so a file reads back equal.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from backbone import ConfigError
from bench.common.files import read_json, read_jsonl


# result.json's layout: 2, the curve's rows in parts (bench.training.records), the code revision named; 3, with the
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
    phases: list[dict]  # PhaseCounters.to_json() per phase of the schedule, in order
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
    # each yardstick's final scores, free-form: keyed by the probes' questions and the tasks' names, which the
    # yardsticks choose (bench.yardsticks.probes, bench.yardsticks.downstream)
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


# --- What a run has spent, as the loop counts it and its checkpoint keeps it: steps, FLOPs, tokens and supervised
# positions in total and per phase of the sequence-length (or objective) schedule, times, where the next evaluation
# is, and which code revisions and thread counts trained it. Typed here; a checkpoint holds `to_state()`, a dict of
# plain values (what `torch.load(..., weights_only=True)` reads back), with its schema, and `from_state` refuses any
# other layout with one line instead of resuming from numbers it would misread.
# 1: the untyped dict of earlier revisions, which had no schema entry; 2: without `threads`; 3: without the cool-downs


COUNTERS_SCHEMA = 4


@dataclass
class PhaseCounters:
    """What one phase of the schedule has spent; the phases' counts add up to the run's. `objective`: the piece of
    an objective schedule it trains (recorded only under one, so other runs' records are as they were)."""

    seq_len: int
    share: float
    objective: str | None = None
    steps: int = 0
    tokens: int = 0
    supervised_positions: int = 0
    flops: int = 0

    def to_json(self) -> dict:
        """The phase as run records have always written it: `objective` only under an objective schedule."""
        row = asdict(self)
        if self.objective is None:
            del row["objective"]
        return row


@dataclass
class Counters:
    """A run's totals and its place in training; mutated by the loop step by step."""

    phases: list[PhaseCounters]
    step: int = 0
    flops: int = 0
    tokens: int = 0
    supervised_positions: int = 0
    train_seconds: float = 0.0
    wall_seconds: float = 0.0
    next_eval: int = 0  # the index of the next FLOP checkpoint in the evaluation grid
    # what the FLOP checkpoints' cool-down branches spent (bench.training.loop), besides the run's own counts above
    cooldown_steps: int = 0
    cooldown_flops: int = 0
    last_finite_loss: float | None = None
    revisions: list[str] = field(default_factory=list)  # each session's code, in order
    threads: list[int] = field(default_factory=list)  # each session's torch threads, in order

    def add_step(self, phase: int, tokens: int, supervised_positions: int, flops: int, loss: float) -> None:
        """One finished optimizer step of `phase`, counted in the run's totals and its phase's."""
        for totals in (self, self.phases[phase]):
            totals.tokens += tokens
            totals.supervised_positions += supervised_positions
            totals.flops += flops
        self.phases[phase].steps += 1
        self.step += 1
        self.last_finite_loss = loss

    def mark_session(self, revision: str, threads: int) -> str | None:
        """This session's code and torch thread count train the run from here on (saved with the next checkpoint).
        Returns a warning where the threads differ from the last session's: a CPU's sums split by thread round in
        another order, so the run will not equal an uninterrupted one to the last digit (the count follows the
        machine's cores and, without --jobs, how much training the comparison holds: more --seeds can change it)."""
        if not self.revisions or self.revisions[-1] != revision:
            self.revisions.append(revision)
        before = self.threads[-1] if self.threads else threads
        if not self.threads or before != threads:
            self.threads.append(threads)
        if before == threads:
            return None
        return (f"trained on {before} thread{'s' if before != 1 else ''} until now and continues on {threads}: its "
                f"last digits will differ from an uninterrupted run's (--threads-per-run {before} keeps them)")

    def per_sequence_basis(self) -> tuple[int, int]:
        """(supervised positions, steps) of the final phase, where per-sequence numbers are read (the length the
        evaluation is at); of the whole run should the final phase have run no step."""
        final = self.phases[-1]
        return (final.supervised_positions, final.steps) if final.steps else (self.supervised_positions, self.step)

    def to_state(self) -> dict:
        return {"schema": COUNTERS_SCHEMA, **asdict(self)}

    @classmethod
    def from_state(cls, state: dict, source: object) -> Counters:
        """The counters a checkpoint (`source`, named in the error) holds; refuses another schema or layout."""
        state = dict(state)
        schema = state.pop("schema", 1)
        phase_fields = {f.name for f in fields(PhaseCounters)}
        if schema != COUNTERS_SCHEMA or set(state) != {f.name for f in fields(cls)} or \
                any(set(phase) != phase_fields for phase in state["phases"]):
            raise ConfigError(f"{source} holds training counters of another layout (schema {schema}, this code "
                              f"reads {COUNTERS_SCHEMA}): it was saved by another revision; resume it with that "
                              "revision, or start the run again")
        phases = [PhaseCounters(**phase) for phase in state.pop("phases")]
        return cls(phases=phases, **state)


# --- A run's curve: one row per FLOP checkpoint in curve.jsonl (and in results.json), in three parts that never mix:
# the counters at the top level, the objective's own held-out metrics under "metrics", and each yardstick's frozen
# scores under its result key ("probes", "downstream"), as in result.json.
#
#     {"checkpoint": 1e9, "step": 8, "flops": ..., "tokens": ..., "supervised_positions": ...,
#      "metrics": {"loss": 4.47, "accuracy": 0.12}, "probes": {"hidden_state": 0.17, ...},
#      "downstream": {"synthetic:tagging": 0.30}}


COUNTERS = ("checkpoint", "step", "flops", "tokens", "supervised_positions")


@dataclass(frozen=True)
class CurvePoint:
    """One row of the curve, typed: where it was read (the counters), the objective's held-out metrics, and the
    yardsticks' frozen scores (None where a yardstick has no curve)."""

    checkpoint: float  # the FLOP checkpoint this row stands for
    step: int
    flops: int
    tokens: int
    supervised_positions: int
    metrics: dict[str, float | None]
    probes: dict | None = None
    downstream: dict | None = None

    def to_json(self) -> dict:
        row = {key: getattr(self, key) for key in (*COUNTERS, "metrics")}
        return {**row, **{key: value for key in ("probes", "downstream")
                          if (value := getattr(self, key)) is not None}}

    @classmethod
    def from_json(cls, row: dict) -> CurvePoint:
        return cls(**row)


def curve_row(counters: Counters, checkpoint: float, metrics: dict[str, float]) -> dict:
    """A checkpoint's row before the yardsticks add their parts."""
    return {"checkpoint": checkpoint, **{key: getattr(counters, key) for key in COUNTERS[1:]}, "metrics": metrics}


def read_curve(path: Path) -> tuple[CurvePoint, ...]:
    return tuple(CurvePoint.from_json(row) for row in read_jsonl(path))
