"""The summaries of a comparison's runs and the Results that hold them beside the findings
(bench.analysis.findings): what bench.analysis.results builds, bench.report reads and results.json stores; and a
budget sweep's frontier (Sweep), what bench.analysis.budgets builds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from bench.analysis.findings import (NOT_MEASURABLE, Answer, Crossover, GainAt, Placed, Stat, Verdict,
                                     fields_from_json, from_json, omitted, to_json)
from bench.analysis.paper_findings import Paper
from bench.training.records import ControlRecord, RunRecord


@dataclass(frozen=True)
class Compute:
    """What an objective's runs spent, means over seeds: the counters, the throughput, where the wall time went
    (the steps, the FLOP checkpoints' cool-down branches and evaluations, the final probes and tasks) and the FLOPs
    per token and per supervised position."""

    flops_per_step: float
    steps: float
    tokens: float
    supervised_positions: float
    flops: float
    cooldown_flops: float  # the FLOP checkpoints' cool-down branches, spent besides the budget
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
class OwnTask:
    """What an objective's own task leaves to learn on this language, and how much of it each run learned: the loss
    of its trivial answer (the unigram loss; "all original" for ELECTRA's discriminator, its labels' entropy), its
    Bayes loss, the learnable nats per sequence between them (the gap times the positions the loss is taken at), and
    the share of that gap each seed's run closed. `learned`: every seed closed at least LEARNED_TASK of it."""

    metric: str
    trivial: float
    bayes: float
    positions: float | None  # where the loss is taken, per sequence
    learnable_per_sequence: float | None
    closed: Stat | None
    closed_each: list[float]
    learned: bool


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
    own_task: OwnTask | None = None  # None: no Bayes reference (text, MLM's span masking), so whether it learned is unknown


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
    native: Stat | None  # the family's own read, frozen (bench.yardsticks.downstream.native_read): ranks nobody
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
    # per objective or control, the neutral tasks' average read the family's own way, frozen: a diagnostic beside
    # the main yardstick (which reads every backbone one way), never ranked
    native_average: dict[str, Stat | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Results:
    """Everything a comparison's report states (results.json): what was measured (the setup's facts, the signal-density
    rows, the Bayes references, the tasks as described, a schedule's accounting, the runs and controls, as
    bench.orchestration.pipeline recorded them) and what the analysis found (the answer, the verdict, the summaries). A
    preset adds its paper section."""

    schema: int
    budget_flops: float
    seq_len: int
    baseline: str | None
    seeds: int
    # a free-form map: the facts the report's setup table is worded from (bench.orchestration.pipeline.setup_facts names
    # them), versions and settings whose keys follow the command's flags and the packages installed
    setup: dict
    answer: Answer | None
    verdict: Verdict | None
    # The maps below stay free-form: their keys are names the objectives, yardsticks and tasks choose (an objective's
    # own metrics and parts, a task's options), so a registered objective or task adds keys without a schema change.
    positions: list[dict]  # the signal-density rows, one per objective (bench.analysis.density.position_row)
    bayes: dict | None  # floors and unigram losses per objective and metric, probe ceilings, input-only controls
    objectives: list[ObjectiveSummary]
    untrained: list[Untrained]
    downstream: DownstreamSummary | None
    seq_len_measured: dict | None  # per objective, the counts per phase its runs spent (means over seeds)
    diverged: list[dict]  # the diverged runs' records (bench.training.loop.TrainingDiverged.record)
    tasks: list[dict] | None  # the downstream tasks as described (bench.yardsticks.downstream.Downstream.describe)
    seq_len_accounting: dict | None  # a schedule's predicted phases (bench.orchestration.planning.schedule_accounting)
    runs: list[RunRecord]
    controls: list[ControlRecord]
    paper: Paper | None = omitted()

    def objective(self, spec: str) -> ObjectiveSummary | None:
        return next((summary for summary in self.objectives if summary.objective == spec), None)


# --- a sweep of budgets: the frontier (bench.analysis.budgets, fitted by bench.analysis.frontier) ----------------------

@dataclass(frozen=True)
class Trend:
    """A gain over the control fitted as a line in log-FLOPs: the gain per decade and its interval, the line (α, β),
    and where the fitted gain meets the control."""

    per_decade: float
    per_decade_ci: list[float] | None
    lack_of_fit: bool
    line: list[float]
    meets: Placed


@dataclass(frozen=True)
class SweepGain:
    """An objective's gain over its control at every budget (each budget's verdict) and its trend."""

    control: str
    trend: Trend
    per_budget: list[GainAt | None]


@dataclass(frozen=True)
class MultiplierAt:
    """The compute multiplier against the baseline at one budget, read off the fits (None where it never gets
    there); `outside` where that compute lies outside the sweep, which makes it no result."""

    budget: float
    multiplier: float | None
    ci_low: float | None
    ci_high: float | None
    lack_of_fit: bool
    outside: bool

    @staticmethod
    def matches(data: dict) -> bool:
        return "multiplier" in data


@dataclass(frozen=True)
class UnreadAt:
    """A multiplier not read at a budget: one of the pair does not beat its control there."""

    budget: float
    outcome: str = NOT_MEASURABLE

    @staticmethod
    def matches(data: dict) -> bool:
        return "multiplier" not in data


@dataclass(frozen=True)
class Fit:
    """A neutral yardstick's fit across the sweep: its form and why, the ceiling it saturates toward, the fitted
    scores and lines per objective, the multipliers against the baseline and every pair's crossover."""

    fit: str
    fit_reason: str
    lack_of_fit: bool
    ceiling: float | None
    fitted: dict[str, list[float]]
    lines: dict[str, list[float]]
    multipliers: dict[str, list[MultiplierAt | UnreadAt]]
    crossovers: list[Crossover]


@dataclass(frozen=True)
class SweepYardstick:
    """One yardstick across the budgets: the means per budget and the controls, which objectives beat their
    controls where, the gains and their trends, and (where it is neutral and measures pretraining) the fit. Its JSON
    holds the fit's fields beside the others."""

    yardstick: str
    label: str
    higher_is_better: bool
    mirrors: list[str]
    means: dict[str, list[Stat | None]]
    seeds: dict[str, list[int]]
    controls: dict[str, Stat | None]
    beats_control: dict[str, list[bool]]
    measures_pretraining: list[bool | None]
    gains: dict[str, SweepGain]
    fit: Fit | None = None

    def to_json(self) -> dict:
        found = {f.name: to_json(getattr(self, f.name)) for f in fields(self) if f.name != "fit"}
        return {**found, **(to_json(self.fit) if self.fit else {})}

    @classmethod
    def from_json(cls, data: dict) -> SweepYardstick:
        fit = from_json(Fit, {f.name: data[f.name] for f in fields(Fit)}) if "fit" in data else None
        return cls(**fields_from_json(cls, data, leave=("fit",)), fit=fit)


@dataclass(frozen=True)
class Sweep:
    """A budget sweep's frontier: the budgets, the baseline every multiplier is against, the objectives, the setup's
    facts (bench.orchestration.pipeline.sweep_facts: the largest budget's setup, every budget, the time taken; a
    free-form map, as a comparison's), every yardstick across the budgets and each budget's answer. A preset adds its
    paper section."""

    budgets: list[float]
    baseline: str
    objectives: list[str]
    setup: dict
    yardsticks: list[SweepYardstick]
    answers: list[Answer | None]
    paper: Paper | None = omitted()
