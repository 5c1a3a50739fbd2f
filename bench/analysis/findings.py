"""The findings a comparison's analysis returns and its report words, typed: frozen dataclasses, built by
bench.analysis, read by bench.report, written to results.json by `to_json` and read back by `from_json`.

A record's JSON lists its fields in order; a field marked `omitted` is left out where it is None (a reading that was
not taken: a gain's ρ without curves, a multiplier's bootstrap with one seed), so a results.json reads back equal and
writes back the same. A comparison that was not judged, or a multiplier that was not read, has a record of its own
(Unjudged, Unread): it carries no interval, so it has no interval fields to leave empty.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

from bench.analysis.uncertainty import Estimate

# outcomes of a comparison of A and B, read for A (bench.analysis.claims)
AHEAD, BEHIND, NOT_SEPARATED, NOT_MEASURABLE = "ahead", "behind", "not separated", "not measurable"


def omitted() -> Any:
    """A field left out of the JSON while it is None (keyword-only, so it may stand anywhere in the order)."""
    return field(default=None, kw_only=True, metadata={"omitted": True})


def to_json(value: Any) -> Any:
    """A finding (or a list or dict of them) as JSON-ready data, fields in order."""
    if hasattr(value, "to_json") and not isinstance(value, type):  # a record with a layout of its own
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.metadata.get("omitted") and getattr(value, f.name) is None)}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    return value


def from_json(kind: Any, data: Any) -> Any:
    """`data` read as `kind` (a finding class, or list[...], dict[str, ...], X | None, a union of findings told apart
    by their `matches`, or a plain type, taken as it is)."""
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, types.UnionType):
        options = [option for option in arguments if option is not type(None)]
        if data is None:
            return None
        if len(options) == 1:
            return from_json(options[0], data)
        if not all(hasattr(option, "matches") for option in options):  # plain types: taken as they are
            return data
        return from_json(next(option for option in options if option.matches(data)), data)
    if origin is list:
        return [from_json(arguments[0], item) for item in data]
    if origin is dict:
        return {key: from_json(arguments[1], item) for key, item in data.items()}
    if hasattr(kind, "from_json"):
        return kind.from_json(data)
    if dataclasses.is_dataclass(kind):
        return kind(**fields_from_json(kind, data))
    return data


def fields_from_json(kind: type, data: dict, leave: tuple[str, ...] = ()) -> dict:
    """The fields of dataclass `kind` that `data` holds, each read as its type, but those named in `leave`."""
    hints = typing.get_type_hints(kind)
    return {f.name: from_json(hints[f.name], data[f.name]) for f in dataclasses.fields(kind)
            if f.name in data and f.name not in leave}


@dataclass(frozen=True)
class Family:
    """A Holm family: its name and how many tests it holds."""

    family: str
    size: int


@dataclass(frozen=True)
class ScoredExamples:
    """How many test examples and scored units a yardstick's score rests on (summed over its tasks)."""

    examples: int
    units: int


@dataclass(frozen=True, kw_only=True)
class Mean(Estimate):
    """One objective's mean on a yardstick, its interval over seeds and test examples (uncertainty.Estimate)."""

    objective: str
    seeds: int


@dataclass(frozen=True, kw_only=True)
class ControlMean(Estimate):
    """An untrained control's mean on a yardstick, as Mean."""

    control: str
    seeds: int


@dataclass(frozen=True, kw_only=True)
class Gain(Estimate):
    """An objective's gain over its own untrained control (positive: an improvement, whatever the direction), Holm
    within the yardstick's gain family; the share of the gain the Bayes ceiling leaves available; ρ of its curve."""

    objective: str
    control: str
    share_of_gain: float | None
    rise: float | None = omitted()
    p_holm: float | None = None
    family: str | None = None


@dataclass(frozen=True)
class GainAt:
    """A gain over the control at one budget of a sweep, as that budget's verdict found it (Gain, in short: its p,
    standard error and df give the interval that agrees with its Holm outcome; a sweep written before has none)."""

    estimate: float
    ci_low: float | None
    ci_high: float | None
    p_holm: float | None
    family: str | None
    p: float | None = omitted()
    se: float | None = omitted()
    df: float | None = omitted()


@dataclass(frozen=True)
class RawDifference:
    """The difference of two objectives' scores, shown beside a comparison of their gains."""

    estimate: float
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True, kw_only=True)
class Comparison(Estimate):
    """A judged comparison of two objectives that both beat their controls: the first's difference (positive: it is
    better), Holm within the yardstick's comparison family, and its outcome for the first. Where the two have
    different untrained controls (a bidirectional and a causal backbone), the difference is of their gains over
    their own controls, what pretraining added, and `raw` holds the difference of their scores beside it."""

    objectives: list[str]
    p_holm: float | None = None
    family: str | None = None
    outcome: str = ""
    of: str = "scores"  # what is compared: "scores", or "gains" over each one's own control
    raw: RawDifference | None = None  # with `of` "gains": the difference of the scores themselves

    @staticmethod
    def matches(data: dict) -> bool:
        return data.get("outcome") != NOT_MEASURABLE


@dataclass(frozen=True)
class Unjudged:
    """A pair not compared (one of the two does not beat its control): only the difference of the means."""

    objectives: list[str]
    outcome: str
    estimate: float

    @staticmethod
    def matches(data: dict) -> bool:
        return data.get("outcome") == NOT_MEASURABLE


@dataclass(frozen=True)
class Multiplier:
    """A compute multiplier (bench.analysis.multipliers): its value and kind ("=", ">"/"<" for a bound, "?" not
    read), its reading ("direct" or "reversed"), the 95 % interval (an end None where it is open) and the bootstrap
    behind it. In the verdict it names the objective, the baseline and the yardstick; in the answer those are the
    answer's."""

    objective: str | None = omitted()
    against: str | None = omitted()
    yardstick: str | None = omitted()
    multiplier: float
    kind: str
    reading: str
    seeds: list[int]
    ci_low: float | None
    ci_high: float | None
    ci_low_kind: str | None
    ci_high_kind: str | None
    resamples: int
    range: list[float]
    read_the_other_way: float | None = omitted()
    # "gains": read off each one's gain over its own untrained control (the two controls differ), else "scores"
    on: str | None = omitted()
    bound: str | None = omitted()  # "baseline": a reversed "<" bound by the baseline's side, not the objective's
    log_se: float | None = omitted()
    df: int | None = omitted()
    test_sampling: bool | None = omitted()

    @staticmethod
    def matches(data: dict) -> bool:
        return "multiplier" in data


@dataclass(frozen=True)
class Unread:
    """A multiplier not read: the pair is not measurable (one of the two does not beat its control)."""

    objective: str
    against: str
    yardstick: str
    outcome: str = NOT_MEASURABLE

    @staticmethod
    def matches(data: dict) -> bool:
        return "multiplier" not in data


@dataclass(frozen=True)
class YardstickVerdict:
    """One yardstick's findings: the means, the controls and what the input alone gives, the gains over the controls
    and whether any is significant (None: untestable), the comparisons, and the objectives whose training input or
    task it copies (`mirrors`: then it ranks nobody)."""

    yardstick: str
    label: str
    higher_is_better: bool
    mirrors: list[str]
    copies: list[str]
    n_test: ScoredExamples | None
    rows: list[Mean]
    controls: list[ControlMean]
    input_only: dict[str, float]
    ceilings: dict[str, float]
    gains: list[Gain]
    gain_family: Family
    measures_pretraining: bool | None
    comparisons: list[Comparison | Unjudged]
    comparison_family: Family

    def gain_of(self, objective: str) -> Gain | None:
        return next((gain for gain in self.gains if gain.objective == objective), None)


@dataclass(frozen=True)
class Wins:
    """How many neutral yardsticks measured pretraining, and on which each objective beat its control."""

    neutral_yardsticks: int
    by_objective: dict[str, list[str]]


@dataclass(frozen=True)
class DensityRatio:
    """Supervised positions per sequence and per FLOP, over the baseline's (None where not known)."""

    per_sequence: float | None
    per_flop: float | None


@dataclass(frozen=True)
class Verdict:
    """Every yardstick's findings, the main one named, the multipliers against the baseline, the wins and the signal
    density ratios."""

    baseline: str
    main: str | None
    yardsticks: list[YardstickVerdict]
    multipliers: list[Multiplier | Unread]
    wins: Wins
    signal_density_ratio: dict[str, DensityRatio]

    def item(self, name: str) -> YardstickVerdict | None:
        return next((item for item in self.yardsticks if item.yardstick == name), None)


@dataclass(frozen=True)
class Scale:
    """What an answer speaks for: backbone parameters, tokens per run, FLOPs per run."""

    parameters: int
    tokens: float
    flops: float


@dataclass(frozen=True)
class OtherRead:
    """The neutral tasks read the other way than the main yardstick (fine-tuned beside frozen): who beats their
    controls and leads there, and whether that agrees with the main yardstick (the same leader, the same objectives
    beating their controls)."""

    yardstick: str
    label: str
    leader: str | None  # the first by its gain over its control
    beat_control: list[str]
    agrees: bool
    separated: bool = False  # the leader separated from every other that beat its control there (Holm): "leads"


@dataclass(frozen=True)
class Answer:
    """Who leads on the main yardstick (None: nobody beat their control), who beat their controls, whether the leader
    is separated from every other that did, the multiplier against the runner-up, and the scale it speaks for. The
    report adds its sentence."""

    yardstick: str | None
    label: str | None
    leader: str | None
    did_not_beat_control: list[str]
    beat_control: list[str]
    scale: Scale
    separated: bool
    not_separated_from: list[str]
    runner_up: str | None
    multiplier: Multiplier | None
    family: Family | None
    # objectives whose runs did not learn their own task (bench.analysis.results.own_task: on some seed): ranked nowhere
    did_not_learn_task: list[str] = field(default_factory=list)
    other_read: OtherRead | None = None  # the same neutral tasks read the other way (fine-tuned for frozen)
    # with two or more ranked: False where the main yardstick has no curve to read a multiplier off (its tasks were
    # read only at the budget, --no-probe-curves); None in a record from before it was kept
    curves: bool | None = omitted()
    # not separated: whether the multiplier table holds, against the baseline, the leader and each objective it is
    # not separated from (None: a record from before it was kept)
    tabled: bool | None = omitted()
    # of did_not_learn_task, those that beat their control all the same (None: none, or a record from before it was
    # kept): the answer says so, rather than that nothing beat its control
    unlearned_beat_control: list[str] | None = omitted()
    sentence: str | None = omitted()


# --- readings shared by the summaries, the sweeps and the presets' findings -------------------------------------------

@dataclass(frozen=True)
class Stat:
    """A mean over seeds with the half-width of its 95 % Student-t interval (None with one seed)."""

    mean: float
    ci95: float | None
    n: int


@dataclass(frozen=True)
class Placed:
    """A budget a fit found (None: it never gets there), its interval, and where it lies against the sweep: "within",
    "below the sweep", "beyond the sweep" or "never"."""

    where: str
    budget: float | None
    ci_low: float | None
    ci_high: float | None
    lack_of_fit: bool  # whether the interval includes the fit's lack of fit


@dataclass(frozen=True)
class Crossover:
    """Where two objectives' fits meet, and whether the measured means around it contradict it; "not measurable"
    where one of them does not beat its control at the budgets around it."""

    pair: list[str]
    where: str
    budget: float | None
    ci_low: float | None
    ci_high: float | None
    lack_of_fit: bool
    contradicted: bool
    outcome: str | None = omitted()
