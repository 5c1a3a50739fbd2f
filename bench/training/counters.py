"""What a run has spent, as the loop counts it and its checkpoint keeps it: steps, FLOPs, tokens and supervised
positions in total and per phase of the sequence-length (or objective) schedule, times, where the next evaluation
is, and which code revisions and thread counts trained it. Typed here; a checkpoint holds `to_state()`, a dict of
plain values (what `torch.load(..., weights_only=True)` reads back), with its schema, and `from_state` refuses any
other layout with one line instead of resuming from numbers it would misread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from backbone import ConfigError

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
