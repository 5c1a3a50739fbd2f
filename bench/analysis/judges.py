"""The presets' judges: for each claim of a paper, whether this comparison reproduces its direction, on its own
yardsticks, with CIs and Welch's test; "not measurable at this scale" where no objective beat its control.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench.analysis.measures import yardsticks
from bench.analysis.results import p_value, stat
from bench.analysis.stats import welch_difference_interval

# Welch's p below this is a difference; at or above it, "not significant" (the verdict's threshold)
ALPHA = 0.05


@dataclass
class Evidence:
    """The finished comparisons a judge reads: per variant ("" for a single comparison) its results.json dict, and
    per (variant, spec, yardstick) the values over seeds."""

    results: dict[str, dict]
    values: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    @classmethod
    def collect(cls, results: dict[str, dict]) -> "Evidence":
        evidence = cls(results)
        for variant, result in results.items():
            ceilings = (result.get("bayes") or {}).get("ceilings") or {}
            for yardstick in yardsticks(result["runs"], ceilings):
                for run in result["runs"]:
                    value = yardstick.final(run)
                    if value is not None:
                        evidence.values.setdefault((variant, run["objective"], yardstick.name), []).append(value)
        return evidence

    def names(self) -> list[str]:
        """The yardsticks the comparisons measured, in the order first met."""
        return list(dict.fromkeys(name for _, _, name in self.values))

    def read_on(self, preferred: tuple[str, ...]) -> list[str]:
        """The preferred yardsticks this evidence has; on text, where the embedded probes do not run, the labelled
        tasks', fine-tuned first."""
        found = [name for name in preferred if name in self.names()]
        tasks = [name for name in self.names() if name.endswith(("(finetuned)", "(frozen)"))]
        return found or sorted(tasks, key=lambda name: not name.endswith("(finetuned)"))

    def get(self, spec: str, yardstick: str, variant: str = "") -> list[float]:
        return self.values.get((variant, spec, yardstick), [])

    def measures(self, yardstick: str, variant: str = "") -> bool | None:
        """Whether some objective beat its untrained control on the yardstick in that comparison (None: no control
        was run, or the yardstick is not in its verdict)."""
        found = ((self.results.get(variant) or {}).get("verdict") or {}).get("yardsticks", [])
        return next((y.get("measures_pretraining") for y in found if y["yardstick"] == yardstick), None)


def unmeasurable(evidence: Evidence, yardstick: str, variants: tuple[str, ...], finding: dict) -> dict:
    """A claim read on a yardstick that no objective moved beyond its untrained control is not a result: its finding
    becomes "not measurable at this scale", whatever the means say."""
    failed = [variant or "this comparison" for variant in dict.fromkeys(variants)
              if evidence.measures(yardstick, variant) is False]
    if not failed or finding["outcome"] == "not measured":
        return finding
    return {**finding, "outcome": "not measurable at this scale",
            "evidence": f"no objective beats its untrained control on {yardstick} in {', '.join(failed)}; "
                        + finding["evidence"]}


def label(side: tuple[str, str]) -> str:
    """A (variant, spec) pair as the evidence names it: "four-times electra", or "mlm" in a single comparison."""
    return " ".join(part for part in side if part)


def not_measured(claim: str, yardstick: str) -> dict:
    return {"claim": claim, "outcome": "not measured", "evidence": f"no finished runs with `{yardstick}`"}


def compare(evidence: Evidence, claim: str, yardstick: str, better: tuple[str, str], worse: tuple[str, str]) -> dict:
    """The finding for a claim "`better` scores above `worse` on `yardstick`" ((variant, spec) pairs): reproduced
    when it is ahead and Welch's test separates them, "direction only" when ahead but not separated, "not
    reproduced" when behind; "not measurable at this scale" when the yardstick did not beat its untrained control."""
    return unmeasurable(evidence, yardstick, (better[0], worse[0]),
                        _compare(evidence, claim, yardstick, better, worse))


def _compare(evidence: Evidence, claim: str, yardstick: str, better: tuple[str, str], worse: tuple[str, str]) -> dict:
    high, low = evidence.get(better[1], yardstick, better[0]), evidence.get(worse[1], yardstick, worse[0])
    if not high or not low:
        return not_measured(claim, yardstick)
    a, b, p = stat(high), stat(low), p_value(high, low)
    difference = a["mean"] - b["mean"]
    if difference > 0 and p is not None and p < ALPHA:
        outcome = "reproduced"
    elif difference > 0:
        outcome = "direction only, not significant"
    else:
        outcome = "not reproduced" if p is not None and p < ALPHA else "not reproduced (opposite, not significant)"
    return {"claim": claim, "outcome": outcome, "p": p, "difference": difference,
            "evidence": f"{label(better)} {format_stat(a)} vs {label(worse)} {format_stat(b)} on {yardstick}: "
                        f"difference {difference:+.4f}, Welch p = {format_p(p)}"}


def comparable(evidence: Evidence, claim: str, yardstick: str, first: tuple[str, str], second: tuple[str, str],
               margin: float = 0.05) -> dict:
    """The finding for "`first` is comparable to or better than `second`", as a non-inferiority check: reproduced when
    the 95 % CI of the difference (Welch's) lies above −margin (a share of `second`'s mean), i.e. these seeds rule out
    a shortfall larger than the margin; "not reproduced" when `first` is significantly behind; otherwise the seeds
    cannot tell ("inconclusive"); "not measurable at this scale" when the yardstick did not beat its control."""
    return unmeasurable(evidence, yardstick, (first[0], second[0]),
                        _comparable(evidence, claim, yardstick, first, second, margin))


def _comparable(evidence: Evidence, claim: str, yardstick: str, first: tuple[str, str], second: tuple[str, str],
                margin: float) -> dict:
    one, two = evidence.get(first[1], yardstick, first[0]), evidence.get(second[1], yardstick, second[0])
    if not one or not two:
        return not_measured(claim, yardstick)
    a, b, p = stat(one), stat(two), p_value(one, two)
    difference = a["mean"] - b["mean"]
    allowed = margin * abs(b["mean"])
    low, high = welch_difference_interval(one, two)
    if low > -allowed:
        outcome = "reproduced"
    elif difference < 0 and p is not None and p < ALPHA:
        outcome = "not reproduced"
    else:
        outcome = "inconclusive (the CI of the difference reaches below −margin)"
    interval = "no CI (one seed)" if math.isnan(low) else f"95 % CI [{low:+.4f}, {high:+.4f}]"
    return {"claim": claim, "outcome": outcome, "p": p, "difference": difference, "interval": [low, high],
            "evidence": f"{label(first)} {format_stat(a)} vs {label(second)} {format_stat(b)} on {yardstick}: "
                        f"difference {difference:+.4f}, {interval}, margin "
                        f"−{allowed:.4f} ({margin:.0%} of the second), Welch p = {format_p(p)}"}


def spread(evidence: Evidence, specs: list[str], yardstick: str, variant: str = "") -> float | None:
    means = [stat(values)["mean"] for spec in specs for values in [evidence.get(spec, yardstick, variant)] if values]
    return max(means) - min(means) if len(means) == len(specs) else None


def mean_ci(evidence: Evidence, specs: list[str], yardsticks_: tuple[str, ...]) -> float:
    """The average 95 % CI half-width of these objectives' means: how large a spread the seeds can resolve."""
    widths = [stat(values)["ci95"] or math.inf for spec in specs for name in yardsticks_
              for values in [evidence.get(spec, name)] if values]
    return sum(widths) / len(widths) if widths else math.inf


def smaller(claim: str, small: float | None, large: float | None, resolution: float, evidence_text: str) -> dict:
    """The finding for "`small` is below `large`" (two spreads or gaps of means): "inconclusive" when the seeds'
    CIs are wider than both, whatever the means say."""
    if small is None or large is None:
        return {"claim": claim, "outcome": "not measured", "evidence": "a setting has no finished run"}
    outcome = "reproduced" if small < large else "not reproduced"
    if resolution > max(abs(small), abs(large)):
        outcome = f"inconclusive ({outcome} by the means, but their CIs (± {resolution:.4f} on average) are wider)"
    return {"claim": claim, "outcome": outcome, "evidence": evidence_text}


def format_stat(summary: dict | None) -> str:
    if summary is None:
        return "—"
    return f"{summary['mean']:.3f}" + ("" if summary["ci95"] is None else f" ± {summary['ci95']:.3f}")


def format_p(p: float | None) -> str:
    return "n/a (one seed)" if p is None else f"{p:.3g}"


# --- the presets ------------------------------------------------------------------------------------------------------

TABLE8_SPECS = (("80/10/10", "mlm"), ("100/0/0", "mlm:mask=1,random=0,keep=0"),
                ("80/0/20", "mlm:mask=0.8,random=0,keep=0.2"), ("80/20/0", "mlm:mask=0.8,random=0.2,keep=0"),
                ("0/20/80", "mlm:mask=0,random=0.2,keep=0.8"), ("0/0/100", "mlm:mask=0,random=0,keep=1"))


def judge_table8(evidence: Evidence) -> list[dict]:
    # frozen: the replaced-word question, read on windows without [MASK], the inputs a MASK-only model never saw
    specs = [spec for _, spec in TABLE8_SPECS]
    frozen, finetuned = "replaced_word_share", "replaced_word_finetuned_share"
    spread_frozen, spread_tuned = spread(evidence, specs, frozen), spread(evidence, specs, finetuned)
    shown = lambda value: "—" if value is None else f"{value:.4f}"  # noqa: E731
    insensitive = smaller("Fine-tuning is less sensitive to the strategy than frozen features", spread_tuned,
                          spread_frozen, mean_ci(evidence, specs, (frozen, finetuned)),
                          f"spread of the six strategies' means (max − min): fine-tuned {shown(spread_tuned)}, frozen "
                          f"{shown(spread_frozen)} (both as shares of the replaced-word ceiling; the paper: MNLI 0.8 "
                          "points, NER feature-based 0.9)")
    return [compare(evidence, "Feature-based (frozen) use: MASK-only (100/0/0) scores below 80/10/10", frozen,
                    ("", "mlm"), ("", "mlm:mask=1,random=0,keep=0")),
            unmeasurable(evidence, frozen, ("",), unmeasurable(evidence, finetuned, ("",), insensitive))]


def judge_corruption(evidence: Evidence) -> list[dict]:
    tuned = "replaced_word_finetuned_share"
    flat_specs = ["span:density=0.1", "span:density=0.15", "span:density=0.25"]
    flat = spread(evidence, flat_specs, tuned)
    middle, high = evidence.get("span:density=0.15", tuned), evidence.get("span:density=0.5", tuned)
    drop = stat(middle)["mean"] - stat(high)["mean"] if middle and high else None
    shown = lambda value: "—" if value is None else f"{value:+.4f}"  # noqa: E731
    return [
        compare(evidence, "T5: span corruption at 50 % is worse than at 15 %", tuned, ("", "span:density=0.15"),
                ("", "span:density=0.5")),
        unmeasurable(evidence, tuned, ("",), smaller(
            "T5: flat from 10 % to 25 % (their spread is below the drop at 50 %)", flat, drop,
            mean_ci(evidence, flat_specs + ["span:density=0.5"], (tuned,)),
            f"spread of the 10/15/25 % means {shown(flat)}; drop from 15 % to 50 % {shown(drop)} (the paper: "
            "spread 0.46, drop 2.01 GLUE points)")),
        compare(evidence, "Wettig et al.: masking 40 % can beat 15 %", tuned, ("", "mlm:rate=0.4"), ("", "mlm")),
        comparable(evidence, "Wettig et al.: masking 80 % keeps most of 15 %'s quality (here: within 5 %)", tuned,
                   ("", "mlm:rate=0.8"), ("", "mlm")),
    ]


def judge_static(evidence: Evidence) -> list[dict]:
    epochs = evidence.results[""]["setup"].get("epochs", "unknown")
    setting = {"claim": "The data repeat: about 40 epochs, so each of the 10 static copies is seen about 4 times",
               "outcome": "setting", "evidence": f"this run: {epochs}"}
    return [setting] + [comparable(evidence, "RoBERTa: dynamic masking is comparable to or slightly better than "
                                             f"static masking ({yardstick})", yardstick, ("", "mlm"),
                                   ("", "mlm:static=10"))
                        for yardstick in ("replaced_word_finetuned_share", "hidden_state_share")]


def judge_pairs(evidence: Evidence) -> list[dict]:
    nsp, sop = "synthetic:same-source (finetuned)", "synthetic:order (finetuned)"
    heads = [f"{o['objective']} {format_stat(o['metrics'].get('pair_accuracy'))}"
             for o in evidence.results[""]["objectives"] if o["metrics"].get("pair_accuracy")]
    own = {"claim": "Each pair objective's own head on held-out pairs of its own task (ALBERT's intrinsic accuracy)",
           "outcome": "measured", "evidence": "; ".join(heads) or "no pair objective finished"}
    return [own,
        compare(evidence, "A model trained with NSP solves NSP (beats MLM alone)", nsp, ("", "mlm:pair=nsp"),
                ("", "mlm")),
        comparable(evidence, "...but not SOP: no better than MLM alone on it", sop, ("", "mlm"), ("", "mlm:pair=nsp")),
        compare(evidence, "A model trained with SOP solves SOP (beats NSP)", sop, ("", "mlm:pair=sop"),
                ("", "mlm:pair=nsp")),
        compare(evidence, "...and most of NSP (beats MLM alone on it)", nsp, ("", "mlm:pair=sop"), ("", "mlm")),
    ]


def judge_units(evidence: Evidence) -> list[dict]:
    return [compare(evidence, f"SpanBERT: {name} masking beats sub-word token masking ({yardstick})", yardstick,
                    ("", spec), ("", "mlm"))
            for name, spec in (("span", "mlm:span=geometric"), ("whole-word", "mlm:whole_word=true"))
            for yardstick in ("synthetic:tagging (finetuned)", "synthetic:tagging (frozen)")]


# ¼×, 1× and 4× bench.compare's DEFAULT_BUDGET (8e11; a test holds "default" to it: presets cannot import compare)
BUDGETS = (("quarter", 2e11), ("default", 8e11), ("four-times", 3.2e12))
ELECTRA_PEERS = ("mlm", "mlm:rate=0.4", "electra", "ar")


def judge_electra(evidence: Evidence) -> list[dict]:
    findings = []
    # against MLM at 40 % too: a weak MLM baseline would inflate ELECTRA's lead (Wettig et al. 2022)
    for variant, budget in BUDGETS:
        for mlm, name in (("mlm", "MLM"), ("mlm:rate=0.4", "MLM at 40 %")):
            findings.append(compare(evidence, f"ELECTRA beats {name} at equal FLOPs ({budget:.2g})",
                                    "replaced_word_finetuned_share", (variant, "electra"), (variant, mlm)))
    for variant, budget in BUDGETS:
        result = evidence.results.get(variant)
        multipliers = [m for m in ((result or {}).get("verdict") or {}).get("multipliers", [])
                       if m["objective"] == "electra"]
        density = result["verdict"]["signal_density_ratio"].get("electra", float("nan")) if multipliers else None
        for m in multipliers:
            # where MLM never got there in its run, both curves are read at MLM's final value (the paper's reading)
            reading = m.get("reversed") or m if m["kind"] == ">" else m
            # "<" and "=" bound the multiplier from above; ">" only from below
            if reading["multiplier"] >= 4 and reading["kind"] in ("=", ">"):
                outcome = "reproduced"
            elif reading["kind"] == ">":
                outcome = ("inconclusive (at least this much: " + ("MLM's run never reached ELECTRA's value)"
                           if reading is m else "ELECTRA was past MLM's value at its first checkpoint)"))
            else:
                outcome = "not reproduced"
            findings.append({"claim": f"ELECTRA's compute multiplier over MLM is about 4× or more ({budget:.2g}, "
                                      f"{m['yardstick']})",
                             "outcome": outcome,
                             "evidence": f"multiplier {m['text']} (signal-density ratio {density:.2f}×)"})
    return findings


def judge_seq_len(evidence: Evidence) -> list[dict]:
    flowed = [f"{variant} {o['compute']['tokens']:,.0f} token positions ({o['compute']['supervised_positions']:,.0f} "
              "supervised)" for variant in ("schedule", "fixed")
              for o in (evidence.results.get(variant) or {}).get("objectives", [])]
    setting = {"claim": "At equal FLOPs the schedule lets more positions flow (BERT's arithmetic: 4.26e10 of them in "
                        "10^6 steps against 1.31e11 for T = 512 throughout, at a third of the FLOPs)",
               "outcome": "setting", "evidence": "per run, mean over seeds: " + "; ".join(flowed)}
    return [setting] + [comparable(evidence, "BERT's schedule (90 % of the steps at T/4) is as good as the full "
                                             f"length throughout, at equal FLOPs ({yardstick})", yardstick,
                                   ("schedule", "mlm"), ("fixed", "mlm"))
                        for yardstick in ("replaced_word_finetuned_share", "hidden_state_share")]


# MLM against CLM (Gisserot-Boukhlef et al. 2025): MLM at 40 % first, the paper's MLM and the baseline every frontier
# multiplier is against (a weak 15 % baseline would flatter the others), then BERT's 15 %, CLM, and CLM → MLM-40 %
# switching at 25, 50 and 75 % of the budget
CLM_SWITCHES = (0.25, 0.5, 0.75)
CLM_PEERS = ("mlm:rate=0.4", "mlm", "ar", *(f"ar>mlm:rate=0.4@{share}" for share in CLM_SWITCHES))
CLM_BUDGETS = (2e11, 8e11, 1.6e12)
CLM_YARDSTICK = "hidden_state_share"  # the state from context: what every objective must infer


def judge_clm(evidence: Evidence) -> list[dict]:
    """Per budget of the sweep (each a comparison, evidence.results keyed by its folder): MLM against CLM, and each
    CLM → MLM schedule against MLM alone; at the smallest budget, CLM against MLM (the paper's data efficiency). On
    the hidden state from context, or on text on each fine-tuned task."""
    variants = sorted(evidence.results, key=lambda name: float(name.removeprefix("budget-")))
    read_on = [name for name in evidence.read_on((CLM_YARDSTICK,)) if not name.endswith("(frozen)")] or \
        [CLM_YARDSTICK]
    findings = []
    for yardstick in read_on:
        on = "" if yardstick == CLM_YARDSTICK else f", {yardstick}"
        for variant in variants:
            budget = float(variant.removeprefix("budget-"))
            findings.append(compare(evidence, f"MLM (40 %) beats CLM at equal FLOPs ({budget:.2g}{on})", yardstick,
                                    (variant, "mlm:rate=0.4"), (variant, "ar")))
            for schedule in CLM_PEERS[3:]:
                findings.append(compare(evidence, f"CLM → MLM ({schedule}) beats MLM alone at equal FLOPs "
                                                  f"({budget:.2g}{on})", yardstick, (variant, schedule),
                                        (variant, "mlm:rate=0.4")))
        if variants:
            findings.append(compare(evidence, f"CLM is the more data-efficient: it leads MLM at the smallest budget "
                                              f"({float(variants[0].removeprefix('budget-')):.2g}{on})", yardstick,
                                    (variants[0], "ar"), (variants[0], "mlm:rate=0.4")))
    return findings
