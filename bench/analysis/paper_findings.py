"""A preset's "Paper versus this run", typed: each claim of the paper as its judge (bench.analysis.judges) found it,
our rows beside the paper's (bench.analysis.presets.paper_section), as results.json stores them.

A claim is one of five records, told apart by its kind and what it holds: a test of "A beats B" or "A is comparable
to B" (ClaimTest), a multiplier of at least some factor (MultiplierTest), a claim with no finished runs to test it
(Unmeasured), a fact of the paper's setting this run measured (Setting), or where two fits cross (CrossoverFinding).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.analysis.findings import Crossover, Family, Multiplier, Stat, from_json, omitted, to_json
from bench.analysis.uncertainty import Estimate

TESTS = ("beats", "comparable")  # the kinds of ClaimTest


@dataclass(frozen=True, kw_only=True)
class ClaimTest(Estimate):
    """"A beats B" or "A is comparable to B" on a yardstick: the difference first − second with its interval, both
    means, the non-inferiority margin ("comparable"), the p-value (None where it is not tested: one seed, or not
    measurable), Holm within the preset's family, and the outcome."""

    claim: str
    kind: str
    objectives: list[str]
    yardstick: str
    mirrors: list[str]  # the sides whose own task the yardstick is (a diagnostic)
    means: list[float]
    margin: float | None = omitted()
    p_holm: float | None = omitted()
    family: str | None = omitted()
    outcome: str = ""

    @staticmethod
    def matches(data: dict) -> bool:
        return data["kind"] in TESTS and "estimate" in data


@dataclass(frozen=True)
class MultiplierTest:
    """"A's compute multiplier over B is at least `factor`", tested one-sided on the log scale where the pair is
    measurable (p None where it is not)."""

    claim: str
    kind: str
    objectives: list[str]
    yardstick: str
    mirrors: list[str]
    multiplier: Multiplier | None = omitted()
    factor: float | None = omitted()
    p: float | None = None
    p_holm: float | None = omitted()
    family: str | None = omitted()
    outcome: str = ""

    @staticmethod
    def matches(data: dict) -> bool:
        return data["kind"] == "multiplier" and "p" in data


@dataclass(frozen=True)
class Unmeasured:
    """A claim whose sides have no finished runs on its yardstick (or no multiplier was read): "not measured"."""

    claim: str
    kind: str
    objectives: list[str]
    yardstick: str
    mirrors: list[str]
    outcome: str

    @staticmethod
    def matches(data: dict) -> bool:
        return data["kind"] in (*TESTS, "multiplier") and "estimate" not in data and "p" not in data


@dataclass(frozen=True)
class Setting:
    """What this run measured about the paper's own setting (epochs, positions), no test: the quantity `measured`
    names, per side (an objective, or a variant and its objective; "" for the runs as a whole) its mean per run."""

    claim: str
    kind: str
    outcome: str
    # "passes": passes over the training windows, [passes]; "pair_accuracy": a pair head's accuracy on held-out pairs
    # of its own task, [accuracy]; "positions": [token positions, supervised positions]
    measured: str
    values: dict[str, list[float]]

    @staticmethod
    def matches(data: dict) -> bool:
        return data["kind"] == "setting"


@dataclass(frozen=True)
class CrossoverFinding:
    """Where two of the preset's objectives cross across a budget sweep (no test: stated only inside the sweep, where
    both beat their controls around it and the measured means agree)."""

    claim: str
    kind: str
    outcome: str
    crossover: Crossover | None
    objectives: list[str]
    yardstick: str

    @staticmethod
    def matches(data: dict) -> bool:
        return data["kind"] == "crossover"


PaperFinding = ClaimTest | MultiplierTest | Unmeasured | Setting | CrossoverFinding


@dataclass(frozen=True)
class PaperRow:
    """A row of the paper's table: its label and the paper's values (None where it gives none)."""

    row: str
    values: list[float | None]


@dataclass(frozen=True)
class OurRow:
    """The same row in this run: the spec (and variant) it ran as, and per yardstick its mean over seeds. Its JSON
    holds the yardsticks' values beside the names."""

    row: str
    spec: str
    variant: str
    values: dict[str, Stat | None]

    def to_json(self) -> dict:
        return {"row": self.row, "spec": self.spec, "variant": self.variant, **to_json(self.values)}

    @classmethod
    def from_json(cls, data: dict) -> OurRow:
        return cls(data["row"], data["spec"], data["variant"],
                   {key: from_json(Stat | None, value) for key, value in data.items()
                    if key not in ("row", "spec", "variant")})


@dataclass(frozen=True)
class Paper:
    """A preset's paper section: the paper's table and claim, ours beside it, every claim judged in one named Holm
    family, what differs between the paper's setting and this run, and what the runs cost."""

    preset: str
    citation: str
    claim: str
    paper_columns: list[str]
    paper_rows: list[PaperRow]
    yardsticks: list[str]
    ours: list[OurRow]
    family: Family
    findings: list[PaperFinding]
    paper_setting: str
    # this run's setting, which the report sets beside the paper's: the model, the budget per run (and per comparison
    # of a preset with variants), the corpus and the seeds
    model: str
    budget_flops: float
    comparison_budgets: dict[str, float]
    corpus: str
    corpus_description: str
    seeds: int
    wall_seconds: float | None
    runs_seconds: float
