"""The summaries of a comparison's runs and the Results that hold them beside the findings
(bench.analysis.findings): what bench.analysis.results builds, bench.report reads and results.json stores.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.analysis.findings import Answer, Verdict, from_json, omitted, to_json
from bench.training.records import ControlRecord, RunRecord


@dataclass(frozen=True)
class Stat:
    """A mean over seeds with the half-width of its 95 % Student-t interval (None with one seed)."""

    mean: float
    ci95: float | None
    n: int


@dataclass(frozen=True)
class Compute:
    """What an objective's runs spent, means over seeds: the counters, the throughput, where the wall time went
    (the steps, the evaluations at the FLOP checkpoints, the final probes and tasks) and the FLOPs per token and per
    supervised position."""

    flops_per_step: float
    steps: float
    tokens: float
    supervised_positions: float
    flops: float
    wall_seconds: float
    tokens_per_second: float
    supervised_per_sequence: float
    train_seconds: float
    checkpoint_seconds: float
    final_seconds: float
    flops_per_token: float
    flops_per_supervised: float


@dataclass(frozen=True)
class Floor:
    """A held-out metric beside its Bayes floor: the value, the excess over the floor, and the share of the learnable
    range (unigram → floor) closed."""

    floor: float
    unigram: float | None
    value: Stat | None
    excess: Stat | None
    closed: Stat | None


@dataclass(frozen=True)
class ProbeSummary:
    """The probes' accuracies over seeds (a probe that did not run is left out), beside the Bayes ceilings for what
    the backbone sees and what the input alone gives; the probes' mean FLOPs."""

    hidden_state: Stat | None = omitted()
    replaced_word: Stat | None = omitted()
    replaced_word_finetuned: Stat | None = omitted()
    sees: str
    ceilings: dict[str, float | None]
    input_only: dict | None
    probe_flops: float


@dataclass(frozen=True)
class ObjectiveSummary:
    """One objective's runs: seeds, compute, its untrained control, its own held-out loss and metrics, the floors
    and the probes."""

    objective: str
    seeds: int
    compute: Compute
    control: str
    loss: Stat | None
    metrics: dict[str, Stat | None]
    floors: dict[str, Floor]
    probes: ProbeSummary | None


@dataclass(frozen=True)
class Untrained:
    """One untrained control's seeds, the objective it is read as, and its probes."""

    control: str
    seeds: int
    read_as: str
    probes: ProbeSummary | None


@dataclass(frozen=True)
class TaskFlops:
    frozen: float
    finetune: float


@dataclass(frozen=True)
class TaskRow:
    """One objective (or control) on one downstream task: frozen and fine-tuned test scores over seeds, the other
    metrics, how often each rate was chosen on dev, whether a choice lies at the grid's edge, the FLOPs spent."""

    objective: str
    pooling: str
    frozen: Stat | None
    finetuned: Stat | None
    metrics: dict[str, Stat | None]
    rates: dict[str, int]
    rate_at_edge: bool
    flops: TaskFlops


@dataclass(frozen=True)
class TaskSummary:
    """A downstream task as described (Task.describe: level, classes, metric, source, ceilings, ...; only its name
    where it was not described) and its rows. Its JSON is the description with the rows beside it."""

    description: dict
    rows: list[TaskRow]

    @property
    def name(self) -> str:
        return self.description["task"]

    def to_json(self) -> dict:
        return {**self.description, "rows": to_json(self.rows)}

    @classmethod
    def from_json(cls, data: dict) -> TaskSummary:
        return cls({key: value for key, value in data.items() if key != "rows"},
                   from_json(list[TaskRow], data["rows"]))


@dataclass(frozen=True)
class DownstreamSummary:
    tasks: list[TaskSummary]


@dataclass(frozen=True)
class Results:
    """Everything a comparison's report states (results.json): what was measured (the setup table, the signal-density
    rows, the Bayes references, the learning-rate sweep, the tasks as described, a schedule's accounting, the runs
    and controls, as bench.pipeline recorded them) and what the analysis found (the answer, the verdict, the
    summaries). A preset adds its paper section."""

    schema: int
    budget_flops: float
    seq_len: int
    baseline: str | None
    seeds: int
    setup: dict
    answer: Answer | None
    verdict: Verdict | None
    lr_sweep: dict | None
    positions: list[dict]
    bayes: dict | None
    objectives: list[ObjectiveSummary]
    untrained: list[Untrained]
    downstream: DownstreamSummary | None
    seq_len_schedule: dict | None
    diverged: list[dict]
    tasks: list[dict] | None
    seq_len_accounting: dict | None
    runs: list[RunRecord]
    controls: list[ControlRecord]
    paper: dict | None = omitted()

    def objective(self, spec: str) -> ObjectiveSummary | None:
        return next((summary for summary in self.objectives if summary.objective == spec), None)
