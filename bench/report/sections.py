"""The numbered sections of report.md (setup, signal density, compute, results at equal compute), each a function of
the Results (bench.analysis.summaries). The answer and verdict are bench.report.verdict_tables'; the probes' and
downstream tasks' tables, bench.report.yardstick_tables'."""

from __future__ import annotations

from backbone.flops import TILE
from bench.analysis.results import LEARNED_TASK, TRAINED_DISCRIMINATOR_AUC, by_objective
from bench.analysis.summaries import Results
from bench.report.setup import setup_table
from bench.report.tables import fmt, table
from objectives import REGISTRY, Objective


def setup_section(results: Results) -> str:
    rows = [[key, f"`{value}`" if key == "command" else value]
            for key, value in setup_table(results.setup, results.bayes).items()]
    return "## 1. Setup\n\n" + table(rows, ["", ""])


def schedule_section(results: Results) -> str:
    """Under a sequence-length schedule, the positions that flowed per phase beside what the final length throughout
    would have given for the same FLOPs (bench.training.recipe's accounting)."""
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


def own_task_table(results: Results) -> str:
    """What each objective's own task leaves to learn, in nats per sequence, and the share each seed closed: the one
    rule ("learned its task") the answer applies, beside what there was to learn."""
    rows = [[o.objective, t.metric, f"{t.trivial:.4f}", f"{t.bayes:.4f}", "" if t.positions is None else
             f"{t.positions:g}", "" if t.learnable_per_sequence is None else f"{t.learnable_per_sequence:.2f}",
             fmt(t.closed, 2), " ".join(f"{share:.2f}" for share in t.closed_each), "yes" if t.learned else "no"]
            for o in results.objectives if (t := o.own_task) is not None]
    if not rows:
        return ""
    unknown = [o.objective for o in results.objectives if o.own_task is None]
    return ("\n\n### What each objective's own task leaves to learn\n\nThe loss of the task's trivial answer (the "
            "unigram loss; for ELECTRA's discriminator, its labels' entropy: the loss of answering \"all original\" at "
            "the replaced fraction), its Bayes loss (exact inference in the language; for the discriminator, the Bayes "
            "reference for the same generator), and the learnable nats per sequence between them: the gap times the "
            "positions the loss is taken at per sequence. An objective has learned its task when every seed's run "
            f"closed at least {LEARNED_TASK:g} of the gap; one that has not is ranked nowhere in the answer."
            + (" On text no Bayes reference exists: ELECTRA's discriminator is read by the ROC AUC of \"replaced\" "
               "its released code reports in pretraining, from chance (0.5) to what trained discriminators reach "
               f"({TRAINED_DISCRIMINATOR_AUC:g}, the low end of their reported range), the same rule on every text "
               "report; the AUC also depends on how good its generator is (a weak one's samples are easy to tell)."
               if any(o.own_task and o.own_task.metric == "discriminator_auc" for o in results.objectives) else "")
            + (f" {', '.join(f'`{name}`' for name in unknown)}: no Bayes reference for its task, so whether it "
               "learned is not known." if unknown else "") + "\n\n"
            + table(rows, ["objective", "loss", "trivial", "Bayes", "positions per sequence",
                           "learnable nats per sequence", "share closed", "per seed", "learned on every seed"]))


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
