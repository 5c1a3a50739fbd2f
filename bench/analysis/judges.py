"""The presets' judges: each claim of a paper, judged on this run's neutral yardsticks by the one claim rule
(bench.analysis.claims): a comparison of A and B only where both beat their own untrained controls, Holm within the
preset's family of claims (its size stated), intervals over seeds and test examples (bench.analysis.uncertainty).

Three kinds of claim: "A beats B" (reproduced when A is ahead, not reproduced when B is, else not separated); "A is
comparable to B" (non-inferiority: reproduced when A's shortfall is shown to be under a margin, not reproduced when
its whole interval is beyond it, else inconclusive); and a multiplier of at least some factor (reproduced when it is
shown above it, not reproduced when its whole interval is below it, else inconclusive). A paper whose claim is about
an objective's own task (ALBERT's intrinsic NSP and SOP accuracies) is judged on that task, and the finding says it
is a diagnostic of the objective's own homework.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from scipy import stats

from bench.analysis import uncertainty
from bench.analysis.claims import NOT_MEASURABLE, beats_control, family, significant
from bench.analysis.findings import Family, Unread, YardstickVerdict
from bench.analysis.measures import Measure, group, yardsticks
from bench.analysis.paper_findings import ClaimTest, MultiplierTest, PaperFinding, Setting, Unmeasured
from bench.analysis.summaries import Results

MARGIN = 0.05  # "comparable": a shortfall of at most 5 % of the second's mean


@dataclass
class Evidence:
    """The finished comparisons a judge reads: per variant ("" for a single comparison) its Results."""

    results: dict[str, Results]
    _yardsticks: dict[str, dict[str, Measure]] = field(default_factory=dict)

    def yardstick(self, variant: str, name: str) -> Measure | None:
        if variant not in self._yardsticks:
            result = self.results[variant]
            bayes = result.bayes or {}
            self._yardsticks[variant] = {y.name: y for y in yardsticks(result.runs, bayes.get("ceilings") or {},
                                                                       bayes.get("input_only"), result.tasks)}
        return self._yardsticks[variant].get(name)

    def item(self, variant: str, name: str) -> YardstickVerdict | None:
        """That comparison's verdict on the yardstick."""
        result = self.results.get(variant)
        return result.verdict.item(name) if result and result.verdict else None

    def group(self, variant: str, spec: str, name: str):
        yardstick = self.yardstick(variant, name) if variant in self.results else None
        runs = [run for run in self.results[variant].runs if run.objective == spec] if variant in self.results else []
        return None if yardstick is None or not runs else group(runs, yardstick.final)

    def main(self, finetuned: bool = False, mode: str | None = None) -> str:
        """The comparisons' main yardstick (the neutral tasks read frozen), or its twin read another way
        (`finetuned`, or a mode of bench.analysis.measures.MODES)."""
        name = next((r.verdict.main for r in self.results.values() if r.verdict and r.verdict.main),
                    None) or "neutral_average_frozen"
        return name.replace("frozen", "finetuned" if finetuned else mode or "frozen")

    def beats(self, variant: str, spec: str, name: str) -> bool:
        item = self.item(variant, name)
        return beats_control(item.gain_of(spec) if item else None)


def side_label(side: tuple[str, str]) -> str:
    """A (variant, spec) pair as a finding names it: "four-times electra", or "mlm" in a single comparison."""
    return " ".join(part for part in side if part)


def claim(evidence: Evidence, text: str, name: str, first: tuple[str, str], second: tuple[str, str],
          kind: str = "beats", margin: float = MARGIN) -> ClaimTest | Unmeasured:
    """A claim about `first` against `second` ((variant, spec) pairs) on yardstick `name`: its test, unjudged
    ("not measurable") unless both beat their own untrained controls there; Holm is applied by judge()."""
    a, b = evidence.group(*first, name), evidence.group(*second, name)
    item = evidence.item(first[0], name)
    named = dict(claim=text, kind=kind, objectives=[side_label(first), side_label(second)], yardstick=name,
                 mirrors=sorted(set(item.mirrors if item else []) & {first[1], second[1]}))
    if a is None or b is None:
        return Unmeasured(**named, outcome="not measured")
    estimate = uncertainty.difference(a, b)
    found = ClaimTest(**named, **estimate.record(), means=[float(a.values.mean()), float(b.values.mean())])
    if not (evidence.beats(first[0], first[1], name) and evidence.beats(second[0], second[1], name)):
        return replace(found, p=None, outcome=NOT_MEASURABLE)
    if kind == "comparable":  # one-sided: H0 is a shortfall of at least the margin
        allowed = margin * abs(float(b.values.mean()))
        found = replace(found, margin=allowed, p=one_sided(estimate.estimate + allowed, estimate.se, estimate.df))
    return found


def one_sided(shift: float, se: float, df: float | None) -> float | None:
    """P(a t-distributed estimate this far above 0 | H0 at 0)."""
    if df is None or not math.isfinite(df) or not se > 0:
        return None
    return float(stats.t.sf(shift / se, df))


def multiplier_claim(evidence: Evidence, text: str, variant: str, spec: str, against: str,
                     factor: float) -> MultiplierTest | Unmeasured:
    """"`spec`'s compute multiplier against `against` is at least `factor`" on the main yardstick of `variant`,
    tested one-sided on the log scale, read only where the pair is measurable."""
    named = dict(claim=text, kind="multiplier", objectives=[side_label((variant, spec)), side_label((variant, against))],
                 yardstick=evidence.main(), mirrors=[])
    result = evidence.results.get(variant)
    m = next((m for m in (result.verdict.multipliers if result and result.verdict else []) if m.objective == spec
              and m.against == against and m.yardstick == evidence.main()), None)
    if m is None:
        return Unmeasured(**named, outcome="not measured")
    if isinstance(m, Unread) or m.kind == "?":
        return MultiplierTest(**named, p=None, outcome=NOT_MEASURABLE)
    p = None if m.log_se is None else one_sided(math.log(m.multiplier / factor), m.log_se, m.df)
    return MultiplierTest(**named, multiplier=m, factor=factor, p=p)


def judge(findings: list[PaperFinding], name: str) -> tuple[list[PaperFinding], Family]:
    """Holm over the claims' tests, in one named family (bench.analysis.claims.family), then each claim's outcome. A
    claim the gate left not measurable counts in the family as tested with p = 1: its size is fixed by the claims the
    preset asks, not by what the data let through."""
    def is_test(found: PaperFinding) -> bool:
        return isinstance(found, (ClaimTest, MultiplierTest)) and found.p is not None

    gated = sum(isinstance(found, (ClaimTest, MultiplierTest)) and found.outcome == NOT_MEASURABLE
                for found in findings)
    tested, named = family(name, [found for found in findings if is_test(found)], untested=gated)
    judged = iter(replace(test, outcome=claim_outcome(test)) for test in tested)  # in the order of `findings`
    return [next(judged) if is_test(found) else untested(found) for found in findings], named


def claim_outcome(test: ClaimTest | MultiplierTest) -> str:
    """"A beats B": reproduced, not reproduced (B ahead) or not separated. "A is comparable to B" and "a multiplier
    of at least k": reproduced where the one-sided test shows it (Holm), not reproduced where the whole 95 % interval
    lies on the other side (a shortfall beyond the margin, a multiplier below k: "inconclusive" would understate
    data that contradict the claim), otherwise inconclusive."""
    if test.kind == "beats":
        return ("reproduced" if test.estimate > 0 else "not reproduced") if significant(test) else "not separated"
    if significant(test):
        return "reproduced"
    if isinstance(test, MultiplierTest):
        contradicted = test.multiplier is not None and test.multiplier.ci_high is not None and \
            test.multiplier.ci_high < test.factor
    else:
        contradicted = test.ci_high is not None and test.margin is not None and test.ci_high < -test.margin
    return "not reproduced" if contradicted else "inconclusive"


def untested(found: PaperFinding) -> PaperFinding:
    """A finding without a test keeps its outcome; a test without a p is a difference with one seed, or a multiplier
    without its bootstrap."""
    if found.outcome:
        return found
    return replace(found, outcome="untested (one seed)" if isinstance(found, ClaimTest) else "not measured")


def setting(text: str, measured: str, values: dict[str, list[float]]) -> Setting:
    """What the run measured about the paper's own setting (epochs, positions): no test."""
    return Setting(claim=text, kind="setting", outcome="setting", measured=measured, values=values)


# --- the presets ------------------------------------------------------------------------------------------------------

TABLE8_SPECS = (("80/10/10", "mlm"), ("100/0/0", "mlm:mask=1,random=0,keep=0"),
                ("80/0/20", "mlm:mask=0.8,random=0,keep=0.2"), ("80/20/0", "mlm:mask=0.8,random=0.2,keep=0"),
                ("0/20/80", "mlm:mask=0,random=0.2,keep=0.8"), ("0/0/100", "mlm:mask=0,random=0,keep=1"))


def judge_table8(evidence: Evidence) -> list[PaperFinding]:
    mask_only = ("", "mlm:mask=1,random=0,keep=0")
    # BERT's feature-based column concatenates the last four layers (the preset's --feature-based read)
    return [claim(evidence, "Feature-based (frozen, last four layers concatenated) use: MASK-only (100/0/0) scores "
                            "below 80/10/10", evidence.main(mode="feature_based"), ("", "mlm"), mask_only),
            claim(evidence, "Fine-tuning is insensitive to the strategy: MASK-only (100/0/0) is comparable to "
                            "80/10/10", evidence.main(finetuned=True), mask_only, ("", "mlm"), "comparable")]


# T5's Table 6 corrupts i.i.d. (its Table 7's i.i.d. row is the same 83.28): here each corrupted token is a span of
# its own (mean span 1); the span corruption T5 went on to use, mean span 3, is an extra, labelled row at 15 %
CORRUPTION_SPECS = (("T5 15 %", "span:density=0.15,mean_span=1"), ("T5 10 %", "span:density=0.1,mean_span=1"),
                    ("T5 25 %", "span:density=0.25,mean_span=1"), ("T5 50 %", "span:density=0.5,mean_span=1"),
                    ("span 15 %, mean span 3 (extra row)", "span:density=0.15"), ("mlm 15 %", "mlm"),
                    ("mlm 30 %", "mlm:rate=0.3"), ("mlm 40 %", "mlm:rate=0.4"), ("mlm 50 %", "mlm:rate=0.5"),
                    ("mlm 80 %", "mlm:rate=0.8"))


def judge_corruption(evidence: Evidence) -> list[PaperFinding]:
    main = evidence.main()  # the default's main yardstick: one preset and one default read the same runs alike
    span = lambda rate: ("", f"span:density={rate},mean_span=1")  # noqa: E731
    return [claim(evidence, "T5: corruption at 50 % is worse than at 15 %", main, span(0.15), span(0.5)),
            claim(evidence, "T5: flat from 10 % to 25 %: 10 % is comparable to 15 %", main, span(0.1), span(0.15),
                  "comparable"),
            claim(evidence, "T5: flat from 10 % to 25 %: 25 % is comparable to 15 %", main, span(0.25), span(0.15),
                  "comparable"),
            claim(evidence, "Wettig et al.: masking 40 % can beat 15 %", main, ("", "mlm:rate=0.4"), ("", "mlm")),
            claim(evidence, "Wettig et al.: masking 80 % keeps most of 15 %'s quality (comparable within 5 %)", main,
                  ("", "mlm:rate=0.8"), ("", "mlm"), "comparable")]


def judge_static(evidence: Evidence) -> list[PaperFinding]:
    setup = evidence.results[""].setup
    passes = {"": [setup["runs"]["tokens"] / setup["corpus"]["train_tokens"]]} if setup["runs"] else {}
    return [setting("The data repeat: about 40 epochs, so each of the 10 static copies is seen about 4 times",
                    "passes", passes)] + [
        claim(evidence, f"RoBERTa: dynamic masking is comparable to or better than static masking ({name})", name,
              ("", "mlm"), ("", "mlm:static=10"), "comparable")
        for name in (evidence.main(finetuned=True), evidence.main())]


def judge_pairs(evidence: Evidence) -> list[PaperFinding]:
    nsp, sop = "synthetic:same-source (finetuned)", "synthetic:order (finetuned)"
    heads = {o.objective: [o.metrics["pair_accuracy"].mean]
             for o in evidence.results[""].objectives if o.metrics.get("pair_accuracy")}
    return [setting("Each pair objective's own head on held-out pairs of its own task (ALBERT's intrinsic accuracy)",
                    "pair_accuracy", heads),
            claim(evidence, "A model trained with NSP solves NSP (beats MLM alone)", nsp, ("", "mlm:pair=nsp"),
                  ("", "mlm")),
            claim(evidence, "...but not SOP: MLM alone is comparable to it on SOP", sop, ("", "mlm"),
                  ("", "mlm:pair=nsp"), "comparable"),
            claim(evidence, "A model trained with SOP solves SOP (beats NSP)", sop, ("", "mlm:pair=sop"),
                  ("", "mlm:pair=nsp")),
            claim(evidence, "...and most of NSP (beats MLM alone on it)", nsp, ("", "mlm:pair=sop"), ("", "mlm")),
            claim(evidence, "Neither auxiliary costs the neutral tasks: MLM + SOP is comparable to MLM alone",
                  evidence.main(), ("", "mlm:pair=sop"), ("", "mlm"), "comparable")]


def judge_units(evidence: Evidence) -> list[PaperFinding]:
    return [claim(evidence, f"SpanBERT: {name} masking beats sub-word token masking ({yardstick})", yardstick,
                  ("", spec), ("", "mlm"))
            for name, spec in (("span", "mlm:span=geometric"), ("whole-word", "mlm:whole_word=true"))
            for yardstick in (evidence.main(finetuned=True), evidence.main())]


# ¼×, 1× and 4× bench.compare's DEFAULT_BUDGET (a test holds "default" to it: presets cannot import compare)
BUDGETS = (("quarter", 1.25e11), ("default", 5e11), ("four-times", 2e12))
ELECTRA_PEERS = ("mlm", "mlm:rate=0.4", "electra", "ar")


def judge_electra(evidence: Evidence) -> list[PaperFinding]:
    # against MLM at 40 % too: a weak MLM baseline would inflate ELECTRA's lead (Wettig et al. 2022)
    findings = [claim(evidence, f"ELECTRA beats {name} at equal FLOPs ({budget:.2g})", evidence.main(),
                      (variant, "electra"), (variant, mlm))
                for variant, budget in BUDGETS for mlm, name in (("mlm", "MLM"), ("mlm:rate=0.4", "MLM at 40 %"))]
    # the paper's "less than ¼ of the compute" is one large-scale comparison (ELECTRA-400K at 7.1e20 FLOPs against
    # RoBERTa-500K at 3.2e21), so it is set against the largest budget here alone, as a question, not at every budget
    variant, budget = BUDGETS[-1]
    return findings + [multiplier_claim(evidence, f"ELECTRA's compute multiplier over MLM is 4× or more, as against "
                                                  f"RoBERTa at 3.2e21 FLOPs ({budget:.2g} here)", variant, "electra",
                                        "mlm", 4.0)]


# ELECTRA's own ablation (Clark et al. 2020, Table 5): one generator throughout, the backbone's task and where its loss
# is read changed one at a time (objectives.electra); ELECTRA at the default's tuned λ
TABLE5_SPECS = (("ELECTRA", "electra:disc_weight=10"), ("All-Tokens MLM", "electra:head=mlm"),
                ("Replace MLM", "electra:head=mlm,supervise=masked"),
                ("ELECTRA 15 %", "electra:disc_weight=10,supervise=masked"), ("BERT", "mlm"))


def judge_table5(evidence: Evidence) -> list[PaperFinding]:
    main, side = evidence.main(), lambda name: ("", dict(TABLE5_SPECS)[name])  # noqa: E731
    return [claim(evidence, "ELECTRA beats BERT (85.0 vs 82.2)", main, side("ELECTRA"), side("BERT")),
            claim(evidence, "Learning from every position is most of the gain: ELECTRA beats ELECTRA 15 % (85.0 vs "
                            "82.4)", main, side("ELECTRA"), side("ELECTRA 15 %")),
            claim(evidence, "All-Tokens MLM beats Replace MLM (84.3 vs 82.4)", main, side("All-Tokens MLM"),
                  side("Replace MLM")),
            claim(evidence, "The [MASK] mismatch costs little: Replace MLM is comparable to BERT (82.4 vs 82.2)",
                  main, side("Replace MLM"), side("BERT"), "comparable")]


def judge_seq_len(evidence: Evidence) -> list[PaperFinding]:
    flowed = {f"{variant} {o.objective}": [o.compute.tokens, o.compute.supervised_positions]
              for variant in ("schedule", "fixed") if variant in evidence.results
              for o in evidence.results[variant].objectives}
    return [setting("At equal FLOPs the schedule lets more positions flow (BERT's arithmetic: 4.26e10 of them in "
                    "10^6 steps against 1.31e11 for T = 512 throughout, at a third of the FLOPs)", "positions",
                    flowed)] + [
        claim(evidence, f"BERT's schedule (90 % of the steps at T/4) is comparable to the full length throughout, at "
                        f"equal FLOPs ({name})", name, ("schedule", "mlm"), ("fixed", "mlm"), "comparable")
        for name in (evidence.main(finetuned=True), evidence.main())]


# MLM against CLM (Gisserot-Boukhlef et al. 2025): MLM at 40 % first, the paper's MLM and the baseline every frontier
# multiplier is against (a weak 15 % baseline would flatter the others), then BERT's 15 %, CLM, and CLM → MLM-40 %
# switching at 25, 50 and 75 % of the budget
CLM_SWITCHES = (0.25, 0.5, 0.75)
CLM_PEERS = ("mlm:rate=0.4", "mlm", "ar", *(f"ar>mlm:rate=0.4@{share}" for share in CLM_SWITCHES))
CLM_BUDGETS = (2e11, 8e11, 1.6e12)


def judge_clm(evidence: Evidence) -> list[PaperFinding]:
    """Per budget of the sweep (each a comparison, evidence.results keyed by its folder): MLM against CLM, and each
    CLM → MLM schedule against MLM alone; at the smallest budget, CLM against MLM (the paper's data efficiency); on
    the main yardstick, as the default's answer is (the paper fine-tunes; the report's fine-tuned read is beside it)."""
    variants = sorted(evidence.results, key=lambda name: float(name.removeprefix("budget-")))
    main, findings = evidence.main(), []
    for variant in variants:
        budget = float(variant.removeprefix("budget-"))
        findings.append(claim(evidence, f"MLM (40 %) beats CLM at equal FLOPs ({budget:.2g})", main,
                              (variant, "mlm:rate=0.4"), (variant, "ar")))
        findings += [claim(evidence, f"CLM → MLM ({schedule}) beats MLM alone at equal FLOPs ({budget:.2g})", main,
                           (variant, schedule), (variant, "mlm:rate=0.4")) for schedule in CLM_PEERS[3:]]
    if variants:
        findings.append(claim(evidence, "CLM is the more data-efficient: it leads MLM at the smallest budget "
                                        f"({float(variants[0].removeprefix('budget-')):.2g})", main,
                              (variants[0], "ar"), (variants[0], "mlm:rate=0.4")))
    return findings
