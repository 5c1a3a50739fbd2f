"""The sections and tables of report.md, each a function of the Results (bench.analysis.summaries)."""

from __future__ import annotations

from tabulate import tabulate

from backbone.flops import TILE
from bench.analysis.findings import Comparison, DensityRatio, Gain, Stat, Unjudged, Verdict, YardstickVerdict
from bench.analysis.results import PROBE_SCORES, by_objective
from bench.analysis.summaries import DownstreamSummary, Results
from bench.report.setup import setup_table
from bench.report.wording import (VERDICT_GUIDE, answer_sentence, estimate_text, family_text, measurement_text,
                                  mirrors_text, multiplier_text, p_text, tested_text)
from objectives import REGISTRY, Objective


def table(rows: list[list], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def fmt(summary: Stat | None, digits: int = 3) -> str:
    """A Stat as "mean ± ci95", or the mean alone with one seed."""
    if summary is None:
        return ""
    if summary.ci95 is None:
        return f"{summary.mean:.{digits}f}"
    return f"{summary.mean:.{digits}f} ± {summary.ci95:.{digits}f}"


def answer_section(results: Results) -> str:
    """The answer first: which objective buys the most per FLOP on the main yardstick, how sure, and at what scale."""
    plot = "\n\n![gains over the untrained controls](gains_forest.png)" if results.verdict else ""
    return f"## Answer\n\n{answer_sentence(results.answer)}{plot}"


def verdict_section(results: Results) -> str:
    """Per yardstick, the main one first: who beats its own untrained control, how the objectives compare under the
    one claim rule, and the multipliers on the neutral yardsticks."""
    v = results.verdict
    if v is None:
        return ("## Verdict\n\nNo verdict: no cross-objective yardstick ran (probes need the embedded language and "
                "are off with `--no-probes`; on any text, name labelled tasks with `--downstream`), or the baseline "
                f"`{results.baseline}` has no finished run; own losses of different objectives cannot be compared.")
    text = ["## Verdict\n", VERDICT_GUIDE]
    if results.seeds < 2:
        text.append("One seed per objective: nothing below can be tested; run with `--seeds 5`.\n")
    order = sorted(v.yardsticks, key=lambda y: (y.yardstick != v.main, bool(y.mirrors)))
    for y in order:
        text.append(yardstick_block(y, y.yardstick == v.main))
    if v.multipliers:
        text.append(multiplier_table(v))
    return "\n".join(text)


def yardstick_block(y: YardstickVerdict, main: bool) -> str:
    ceilings = ", ".join(f"{READERS.get(s, s)} {c:.3f}" for s, c in y.ceilings.items())
    rows = [[row.objective, estimate_text(row.estimate, row.ci_low, row.ci_high), *gain_cells(y.gain_of(row.objective))]
            for row in y.rows]
    rows += [[f"*{c.control}*", estimate_text(c.estimate, c.ci_low, c.ci_high), "", "", "", ""] for c in y.controls]
    rows += [[f"*input only ({READERS.get(s, s)})*", f"{value:.3f}", "", "", "", ""]
             for s, value in y.input_only.items()]
    about = [f"n test: {y.n_test.examples:,} examples, {y.n_test.units:,} scored positions" if y.n_test else
             "n test: not resampled (the metric is not a mean over examples)"]
    if ceilings:
        about.append(f"Bayes ceiling: {ceilings}")
    head = f"**{'Main yardstick: ' if main else ''}{y.label[:1].upper() + y.label[1:]}** (`{y.yardstick}`)."
    judged = [p for p in y.comparisons if isinstance(p, Comparison)]
    unjudged = [" vs ".join(p.objectives) for p in y.comparisons if isinstance(p, Unjudged)]
    pairs = [[" vs ".join(p.objectives), p.outcome, p.of, tested_text(p), p_text(p.p_holm),
              estimate_text(p.raw.estimate, p.raw.ci_low, p.raw.ci_high, signed=True) if p.raw else ""]
             for p in judged]
    pair_columns = ["comparison", "outcome (first objective)", "of", "difference (Holm-adjusted CI)", "Holm p",
                    "difference of scores (95 % CI)"]
    if not any(p.raw for p in judged):  # every pair shares its control: the scores are what is compared
        pairs, pair_columns = [[*row[:2], *row[3:5]] for row in pairs], [*pair_columns[:2], *pair_columns[3:5]]
    notes = [f"Gains: {family_text(y.gain_family)}."]
    if pairs:
        notes.append(f"Comparisons: {family_text(y.comparison_family)}.")
    if unjudged:
        notes.append(f"Not measurable (one of the two does not beat its control): {', '.join(unjudged)}.")
    return "\n".join([
        " ".join(part for part in (head, mirrors_text(y) if y.mirrors else "", measurement_text(y),
                                   f"({'; '.join(about)})") if part) + "\n",
        table(rows, ["objective", "mean (95 % CI)", "gain over control (Holm-adjusted CI)", "Holm p of gain",
                     "share of gain", "ρ"]),
        *([("\n" + table(pairs, pair_columns))] if pairs else []),
        "\n" + " ".join(notes), ""])


def multiplier_table(v: Verdict) -> str:
    names = list(dict.fromkeys(m.yardstick for m in v.multipliers))
    labels = [v.item(name).label for name in names]
    unknown = DensityRatio(per_sequence=None, per_flop=None)
    # a pair besides the baseline's is the answer's (its leader against the runner-up), named as such
    rows = [[spec if against == v.baseline else f"{spec} against `{against}`"]
            + [multiplier_text(next((m for m in v.multipliers if (m.objective, m.against) == (spec, against)
                                     and m.yardstick == name), None)) for name in names]
            + ([ratio_text(density.per_sequence), ratio_text(density.per_flop)] if against == v.baseline else ["", ""])
            for spec, against in dict.fromkeys((m.objective, m.against) for m in v.multipliers)
            for density in [v.signal_density_ratio.get(spec, unknown)]]
    return (f"**Compute multiplier against `{v.baseline}`** on the neutral yardsticks with curves: the factor of "
            f"compute `{v.baseline}` needs to reach each objective's value at the budget, read off its mean curve "
            "over the FLOP checkpoints (linear in log-FLOPs); where it never gets there, both curves are read at its "
            "own final value (the ELECTRA paper's reading). Intervals: the log-multiplier ± t × the SD of a bootstrap "
            "over seeds and test examples; an end is open where neither reading reached it within the run. Only "
            "pairs where both beat their controls are read; where their untrained controls differ (a bidirectional "
            "and a causal backbone), off their gains over their own controls (each curve less its control's mean, "
            "resampled with it), as their comparison is judged. Beside it, the signal-density ratio: supervised positions "
            "per sequence, and per FLOP (measured over the runs, every FLOP an objective spends counted), over the "
            "baseline's: what the multiplier would be if every supervised position were worth the same.\n\n"
            + table(rows, ["objective", *labels, "density ratio per sequence", "density ratio per FLOP"]))


def ratio_text(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}×"


READERS = {"smoothing": "whole window", "filtering": "left context"}


def gain_cells(gain: Gain | None) -> list[str]:
    if gain is None:
        return ["", "", "", ""]
    share = "" if gain.share_of_gain is None else f"{gain.share_of_gain:.2f}"
    rise = "" if gain.rise is None else f"{gain.rise:.2f}"
    return [tested_text(gain), p_text(gain.p_holm), share, rise]


def setup_section(results: Results) -> str:
    rows = [[key, f"`{value}`" if key == "command" else value]
            for key, value in setup_table(results.setup, results.bayes).items()]
    return "## 1. Setup\n\n" + table(rows, ["", ""])


def schedule_section(results: Results) -> str:
    """Under a sequence-length schedule, the positions that flowed per phase beside what the final length throughout
    would have given for the same FLOPs (bench.training.config's accounting)."""
    schedule, measured_by_spec = results.seq_len_accounting, results.seq_len_measured
    if not schedule or not measured_by_spec:
        return ""
    final = schedule["final_seq_len"]
    pair = lambda tokens, supervised: f"{tokens:.3g} / {supervised:.3g}"  # noqa: E731
    phases = next(iter(measured_by_spec.values()))
    rows = []
    for spec, measured in measured_by_spec.items():
        throughout = schedule["objectives"][spec]["final_throughout"]
        tokens, supervised = (sum(p[key] for p in measured) for key in ("tokens", "supervised_positions"))
        rows.append([spec, *(pair(p["tokens"], p["supervised_positions"]) for p in measured), pair(tokens, supervised),
                     pair(throughout["tokens"], throughout["supervised_positions"]),
                     f"{tokens / throughout['tokens']:.2f}× / {supervised / throughout['supervised_positions']:.2f}×"])
    return (f"\n\n### Sequence-length schedule\n\n`--seq-len {schedule['schedule']}`: token positions / supervised "
            "positions that flowed in each phase (means over seeds), beside what T = "
            f"{final} throughout gives for the same FLOPs (predicted from each objective's FLOPs per sequence), "
            "and the schedule's multiple of it.\n\n"
            + table(rows, ["objective", *(f"T = {p['seq_len']} ({p['share']:.3g} of FLOPs)" for p in phases),
                           "schedule, total", f"T = {final} throughout", "ratio"]))


def objective_schedule_section(results: Results) -> str:
    """Under an objective schedule (objectives.schedule), each piece's share as it ran: where it started and ended
    in FLOPs, against the share asked for (a piece ends at the first step that reaches its end), means over seeds."""
    rows = []
    for spec, runs in by_objective(results.runs).items():
        phased = [run.phases for run in runs if any("objective" in phase for phase in run.phases)]
        if not phased:
            continue
        asked, spent = 0.0, [0.0] * len(phased)
        for index, phases in enumerate(zip(*phased)):
            flops = [phase["flops"] for phase in phases]
            start = sum(spent) / len(spent)
            spent = [before + now for before, now in zip(spent, flops)]
            asked += phases[0]["share"]
            rows.append([spec if index == 0 else "", phases[0]["objective"], phases[0]["seq_len"],
                         f"{phases[0]['share']:.3g}", f"{sum(p['steps'] for p in phases) / len(phases):.1f}",
                         f"{start:.4g}", f"{sum(spent) / len(spent):.4g}",
                         f"{asked * results.budget_flops:.4g}"])
    if not rows:
        return ""
    return ("\n\n### Objective schedules\n\nEach piece trains the same backbone, optimizer and learning-rate schedule "
            "in turn; it starts at the first step whose FLOPs before it reach its start (means over seeds).\n\n"
            + table(rows, ["schedule", "piece", "T", "share of FLOPs", "steps", "from FLOPs", "to FLOPs",
                           "its end asked"]))


def analytic_count(row: dict) -> str:
    """The analytic supervised positions of a row, marked when they are only an upper bound (whole-word masking)."""
    return ("≤ " if row.get("upper_bound") else "") + f"{row['supervised_positions']:g}"


def density_section(results: Results) -> str:
    measured = {o.objective: o.compute.supervised_per_sequence for o in results.objectives}
    conventions = all("executed_flops_per_sequence" in row for row in results.positions)  # older: dense only
    rows = [[row["objective"], row["attention"], analytic_count(row),
             f"{measured[row['objective']]:.2f}" if row["objective"] in measured else "",
             f"{row['ratio_to_ar']:.3f}", row["parts"],
             *([f"{row['dense_flops_per_sequence'] / row['executed_flops_per_sequence']:.3f}×"] if conventions
               else [])] for row in results.positions]
    batches = "every training batch of the last phase" if results.seq_len_accounting else "every training batch"
    charged = results.setup.get("flops", "dense")
    buys = (f" The last column is how many more sequences a FLOP budget buys when causal attention is "
            f"charged only for the {TILE} × {TILE} blocks a tiled kernel computes (`--flops executed`) than for the "
            f"dense T × T (`--flops dense`); this comparison charged {charged}.") if conventions else ""
    return (f"## 2. Signal density\n\nLoss-bearing positions per sequence of T = {results.seq_len} tokens: the "
            f"analytic count beside the mean measured over {batches}; the ratio is to AR's T − 1.{buys}\n\n"
            + table(rows, ["objective", "attention", "analytic", "measured", "ratio to ar",
                           "[MASK] / random / kept, or parts", *(["budget buys, executed ÷ dense"] if conventions
                                                                 else [])]))


def compute_section(results: Results) -> str:
    rows, seconds = [], {"train": 0.0, "evaluations": 0.0}
    for o in results.objectives:
        c = o.compute
        rows.append([o.objective, o.seeds, f"{c.flops_per_step:.4g}", f"{c.flops_per_token:.4g}",
                     f"{c.flops_per_supervised:.4g}", f"{c.steps:.1f}", f"{c.tokens:.4g}",
                     f"{c.supervised_positions:.4g}", f"{c.flops:.4g}", f"{c.cooldown_flops:.4g}",
                     f"{c.train_seconds:.1f}",
                     f"{c.checkpoint_seconds:.1f}", f"{c.final_seconds:.1f}", f"{c.tokens_per_second:,.0f}"])
        seconds["train"] += c.train_seconds * o.seeds
        seconds["evaluations"] += (c.checkpoint_seconds + c.final_seconds) * o.seeds
    total = seconds["train"] + seconds["evaluations"]
    cost = (f" The evaluations took {seconds['evaluations']:,.0f} s of the runs' {total:,.0f} s "
            f"({100 * seconds['evaluations'] / total:.0f} %); on several processes the others wait at a barrier "
            "while rank 0 runs the final probes and tasks." if total > 0 else "")
    return ("## 3. Compute\n\nMeans over seeds. FLOPs are the suite's analytic count of every matrix product each "
            "objective executes (forward + backward, generator included); training stops at the first step that "
            "reaches the budget. Each curve point before the budget is a finished run: a branch that cools the "
            "learning rate down to zero at that checkpoint, as a run with that budget would, evaluated and then "
            "dropped; its FLOPs are counted apart (cool-down FLOPs), not charged against the budget. Wall time is "
            "split into the training steps, the FLOP checkpoints (cool-down branches, held-out loss, curve probes "
            "and tasks, checkpointing) and the final probes and tasks."
            f"{cost}\n\n"
            + table(rows, ["objective", "seeds", "FLOPs / step", "FLOPs / token", "FLOPs / supervised", "steps",
                           "tokens", "supervised positions", "total FLOPs", "cool-down FLOPs", "training s",
                           "checkpoint branches and evals s",
                           "final evals s", "tokens / s"]))


def diverged_section(results: Results) -> str:
    if not results.diverged:
        return ""
    rows = [[d["objective"], d["seed"], d["step"], "" if d["last_finite_loss"] is None else
             f"{d['last_finite_loss']:.4f}"] for d in results.diverged]
    return ("\n\n### Diverged runs\n\nThese runs stopped when their loss became NaN or infinite; they are left out "
            "of every table below. Rerun them with a lower learning rate.\n\n"
            + table(rows, ["objective", "seed", "step", "last finite loss"]))


def loss_table(results: Results) -> str:
    note = ("mean ± half-width of the 95 % t-interval over seeds" if results.seeds >= 2 else
            "one seed per objective: run with `--seeds 2` or more for confidence intervals and tests")
    rows = [[o.objective, o.seeds, fmt(o.loss, 4), "; ".join(f"{key} {fmt(value)}" for key, value in o.metrics.items())]
            for o in results.objectives]
    return ("## 4. Results at equal compute\n\nEach objective's own held-out loss at the budget (" + note + "). "
            "The losses measure different tasks (a masked-token, a next-token, a replaced-token loss), so they "
            "compare seeds and budgets of one objective, not objectives with each other: the two yardsticks below "
            "do that, and only they are tested.\n\n"
            + table(rows, ["objective", "seeds", "held-out loss", "other held-out metrics"]))


def floor_table(results: Results) -> str:
    rows = [[o.objective, metric, "" if item.unigram is None else f"{item.unigram:.4f}", fmt(item.value, 4),
             f"{item.floor:.4f}", fmt(item.excess, 4), fmt(item.closed, 2)]
            for o in results.objectives for metric, item in o.floors.items()]
    if not rows:
        return ""
    return ("\n\n### Distance to the Bayes floor\n\nThe best loss any model could reach on exactly these "
            "evaluation batches, computed by exact inference in the language that generated them (for masked "
            "tokens the predictor also knows which positions were chosen, which no model does, so the floor is "
            "a lower bound rather than always reachable). Only the excess is comparable across objectives, and only "
            "in kind: each floor belongs to its own task. An objective without a floor here (MLM's span masking "
            "or sentence pairs) has a corruption the exact inference here cannot express; span corruption's "
            "counts its sentinels and EOS as targets, its unigram giving each its share of them; ELECTRA's "
            "floor is its generator's, since its discriminator's best loss depends on the generator. The unigram "
            "loss is the best loss without context; \"closed\" is the share of the learnable range, unigram → "
            "floor, that the model has covered.\n\n"
            + table(rows, ["objective", "metric", "unigram", "held-out", "Bayes floor", "excess", "closed"])
            + objective_notes(results))


def objective_notes(results: Results) -> str:
    """What each objective says of its own metrics (Objective.report_note: ELECTRA's discriminator against its
    trivial answer, say), one paragraph per objective that has something to say."""
    lines = []
    for o in results.objectives:
        cls = REGISTRY.get(o.objective.partition(":")[0], Objective)  # a results.json of an objective since gone
        closed = {metric: fmt(floor.closed, 2) for metric, floor in o.floors.items() if floor.closed}
        note = cls.report_note({name: fmt(value) for name, value in o.metrics.items()}, closed)
        if note:
            lines.append(f"`{o.objective}`: {note}")
    return ("\n\n" + "\n\n".join(lines)) if lines else ""




def probe_table(results: Results) -> str:
    probed = [(o.objective, o.probes) for o in results.objectives if o.probes]
    if not probed:
        return ""
    probed += [(f"*{u.control}*", u.probes) for u in results.untrained if u.probes]
    readers = dict.fromkeys(p.sees for _, p in probed)
    input_only = (results.bayes or {}).get("input_only") or {}
    ceilings = (results.bayes or {}).get("ceilings") or {}

    def cells(values: dict, digits: int = 3) -> list[str]:
        return [fmt(values.get(key)) if isinstance(values.get(key), Stat) else
                "" if values.get(key) is None else f"{values[key]:.{digits}f}" for key in PROBE_SCORES]

    rows = [[name, READERS.get(p.sees, p.sees), *cells({key: getattr(p, key) for key in PROBE_SCORES}),
             f"{p.probe_flops:.3g}"] for name, p in probed]
    rows += [["*input only*", READERS.get(sees, sees), *cells(input_only.get(sees, {})), ""] for sees in readers]
    rows += [["Bayes ceiling", READERS.get(sees, sees),
              *cells({"hidden_state": ceilings.get(f"hidden_state_{sees}"),
                      "replaced_word": ceilings.get(f"replaced_word_{sees}"),
                      "replaced_word_finetuned": ceilings.get(f"replaced_word_{sees}")}), ""] for sees in readers]
    return ("\n\n### Probes (diagnostics)\n\nEach question copies one objective's training input or task, so it "
            "shows how well that objective did its own homework and ranks nobody. Linear probes on each backbone's "
            "final features, read in the objective's own attention mode (raw accuracies on the test windows, mean ± "
            "95 % t-interval over seeds; the verdict divides them by the ceiling that applies). *Hidden state*: the "
            "state of a position whose word is hidden ([MASK] for a reader of the whole window, masked LM's input; "
            "a causal reader is read at the position before, next-state prediction). *Replaced word*: is the word "
            "shown its own or a replacement drawn from the language's word frequencies (ELECTRA's task)? The "
            "fine-tuned probe trains the backbone on the replaced-word question. Beside them, the untrained "
            "controls, what the input alone gives (the most frequent state; a probe on the shown word) and the "
            "Bayes ceiling. Probe FLOPs are not charged to the budget.\n\n"
            + table(rows, ["", "reads", "hidden state", "replaced word", "replaced word (fine-tuned)", "probe FLOPs"]))


def native_text(summary: DownstreamSummary) -> str:
    """The neutral tasks' average read each family's own way, per objective and control: how far the one read
    moves each backbone."""
    found = {reader: value for reader, value in summary.native_average.items() if value is not None}
    if not found:
        return ""
    return (" The neutral tasks' average on the native read (frozen; mean ± 95 % t-interval over seeds): "
            + "; ".join(f"{reader} {fmt(value)}" for reader, value in found.items()) + ".")


def downstream_table(results: Results) -> str:
    summary = results.downstream
    if not summary:
        return ""
    text = ["\n\n### Downstream tasks\n\nEvery final backbone on every labelled task, with one recipe for all: a "
            "frozen linear probe on its features, and fine-tuning of the backbone with a head that starts from that "
            "probe, at each rate of a small grid, the rate chosen on the dev split; only the chosen model is scored "
            "on the test split. Every backbone represents a sequence by the mean of its tokens' states, a causal one's "
            "included. Scores are on the test split, mean ± 95 % "
            "t-interval over seeds (the verdict's intervals add the test set's sampling); downstream FLOPs are not "
            f"charged to the budget. Recipe: {results.setup.get('downstream', '')}. A task's Bayes ceiling is the "
            "accuracy expected of the exact posterior of the language that generated its test examples, for a "
            "reader of the whole window or of the left context; *input only* is what the input alone gives; "
            "*copies* names the training signal a task's question copies (a pair objective's own task, a [MASK] "
            "in its inputs): such a task diagnoses and does not rank. *Native read* is a diagnostic that ranks "
            "nobody: the frozen probe on each family's own read, its last layer alone and a sequence at its last "
            "token (a causal backbone, GPT's read) or at [BOS] (a bidirectional one, BERT's and ELECTRA's [CLS]), "
            "where the one read mixes every layer and pools every backbone by the mean." + native_text(summary)]
    for task in summary.tasks:
        about = task_about(task.description)
        edge = [row.objective for row in task.rows if row.rate_at_edge]
        if edge:
            about += (f". The rate chosen on dev lies at the edge of the grid for {', '.join(edge)}: a wider "
                      "--finetune-lrs may score higher")
        rows = [[row.objective, fmt(row.frozen), fmt(row.finetuned), fmt(row.native),
                 ", ".join(f"{fmt(stat)} {key}" for key, stat in row.metrics.items()) if len(row.metrics) > 1
                 else "", ", ".join(f"{rate} ×{count}" for rate, count in row.rates.items()),
                 f"{row.flops.frozen:.3g} / {row.flops.finetune:.3g}"] for row in task.rows]
        text.append(f"\n**`{task.name}`** ({about})\n\n"
                    + table(rows, ["objective", "frozen probe", "fine-tuned", "native read (diagnostic)",
                                   "fine-tuned, each metric",
                                   "rate chosen on dev (× seeds)", "FLOPs frozen / fine-tune"]))
    return "\n".join(text)


def task_about(task: dict) -> str:
    """A downstream task as described (Task.describe): level, classes, metric, source, ceilings, what it copies."""
    about = (f"{task['level']} level, {task['classes']} classes, metric {task['metric']}; {task['source']}; "
             f"majority-class accuracy {task['majority_accuracy']:.3f}" if "source" in task else "")
    if task.get("ceilings"):
        about += "; Bayes ceiling " + ", ".join(f"{READERS.get(k, k)} {v:.3f}" for k, v in task["ceilings"].items())
    if task.get("input_only") is not None:
        about += f"; input only {task['input_only']:.3f}"
    if task.get("copies"):
        about += f"; copies {', '.join(task['copies'])}"
    return about
