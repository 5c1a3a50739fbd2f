"""bench.tune's report: the trials, the picks on validation data, the fine-tuning rates and ELECTRA's budget ladder,
worded from the tuning's results.json."""

from __future__ import annotations

from bench.analysis.results import LEARNED_TASK


def tuning_report(found: dict, barely_moves: float) -> str:
    """The tuning's report (bench.tune's results.json): every trial's validation score over the seeds, the picks with
    their margins, whether they hold at a larger budget, and any pick at an edge; `barely_moves`: the fine-tuning rate
    below which a pick is no edge to widen."""
    trials = max((len(tuned["trials"]) for tuned in found["objectives"].values()), default=0)  # equal for all
    seeds = ", ".join(map(str, found["seeds"]))
    lines = ["# Tuning on validation data", "", "|              |    |", "|--------------|----|",
             f"| command      | `{found['command']}` |", f"| git revision | {found['revision']} |", "",
             f"Every objective: {trials} pretraining trials at the comparison's setting, each trained on seeds "
             f"{seeds} (never evaluated) and read frozen on the neutral tasks' dev split (their test split is never "
             "read); the highest average over the tasks and the seeds picks the trial among those that learned "
             f"their own task on every seed (closed at least {LEARNED_TASK:g} of the range from its trivial answer "
             "to its Bayes reference, the rule by which a comparison ranks an objective; among all trials where "
             "none did), and its margin over the runner-up among them is given in standard errors of the "
             "seed-by-seed difference (the same seeds, so the difference is paired): below 2, the pick is within "
             "its noise. ELECTRA's trials vary its peak rate with λ and its generator's width. The picked "
             "backbones and every untrained control (one per seed) are then fine-tuned on each task's train split "
             "at every rate of "
             f"{', '.join(f'{r:g}' for r in found['finetune_rates'])}, the dev split averaged over the seeds "
             f"picking each one's rate (at {barely_moves:g} the steps barely move a backbone: a pick there means "
             "fine-tuning less and less did better, down to the frozen probe's head, and is no edge to widen). "
             "Setting: " + ", ".join(f"{k} {v}" for k, v in found["setting"].items()) + ".", ""]
    for spec, tuned in found["objectives"].items():
        lines += [f"## `{spec}`", ""] + trial_table(tuned["trials"], tuned["picked"])
        lines += ["", margin_text(tuned.get("margin")), edge_text(tuned["at_edge"], "the picked peak rate") + " "
                  + finetune_text(tuned), ""]
    lines += ["## Untrained controls", ""]
    lines += [f"- {name}: {finetune_text(tuned)}" for name, tuned in found["controls"].items()]
    return "\n".join(lines + transfer_text(found.get("transfer")) + ladder_text(found.get("electra_ladder"))) + "\n"


def trial_table(rows: list[dict], chosen: dict) -> list[str]:
    tasks = list(next((row["tasks"] for row in rows if row["tasks"]), {}))
    own = any(row.get("closed") is not None for row in rows)  # a tuning from before it was kept has no column
    lines = ["| trial | peak rate | dev average (± se) | per seed | " + " | ".join(tasks) + " |"
             + (" own task closed, per seed |" if own else ""),
             "|---|---|---|---|" + "---|" * len(tasks) + ("---|" if own else "")]
    for row in rows:
        mark = " **(picked)**" if (row["trial"], row["lr"]) == (chosen["objective"], chosen["lr"]) else ""
        score = "diverged" if row["validation"] is None else f"{row['validation']:.4f} ± {row['se']:.4f}"
        seeds = ", ".join("diverged" if value is None else f"{value:.4f}" for value in row["per_seed"])
        lines.append(f"| `{row['trial']}`{mark} | {row['lr']:g} | {score} | {seeds} | "
                     + " | ".join(f"{row['tasks'].get(t, float('nan')):.4f}" for t in tasks) + " |"
                     + (f" {own_task_text(row)} |" if own else ""))
    return lines


def own_task_text(row: dict) -> str:
    if row.get("closed") is None:
        return "no reference"
    return " ".join(f"{share:.2f}" for share in row["closed"]) + ("" if row["learned"] else " (not learned)")


def margin_text(found: dict | None) -> str:
    if found is None:
        return ("No other trial finished on every seed, and learned its own task on every seed where the pick did: no "
                "runner-up, so no margin.")
    over = found["over"]
    return (f"Margin over the runner-up (`{over['objective']}` at {over['lr']:g}): {found['difference']:+.4f} "
            f"({found['in_se']:.1f} standard errors of the paired difference" +
            ("; within its noise)." if found["in_se"] < 2 else ")."))


def transfer_text(found: dict | None) -> list[str]:
    """The transfer section: each pick against its neighbours in rate at the larger budget."""
    if not found:
        return []
    lines = ["", f"## Do the picks hold at {found['budget']:.3g} FLOPs?", "",
             "Each picked setting and its neighbours in rate, trained again on the same seeds at this budget and "
             "read on dev as the trials were.", ""]
    for spec, check in found["checks"].items():
        lines += [f"### `{spec}`", ""] + trial_table(check["rows"], check["picked"])
        leads = "; ".join(f"over {m['over']['lr']:g}: {m['difference']:+.4f} ({m['in_se']:.1f} se)"
                          for m in check["margins"])
        lines += ["", ("The pick still wins" if check["holds"] else "The pick does **not** hold: another rate wins")
                  + (f" ({leads})." if leads else "."), ""]
    return lines


def ladder_text(rungs: list[dict] | None) -> list[str]:
    """The ladder's section: each budget with each seed's share of the gap closed, and what it says."""
    if not rungs:
        return []
    lines = ["", "## When ELECTRA learns its own task", "",
             f"Its picked setting trained on seeds {', '.join(map(str, rungs[0]['seeds']))} (never evaluated) at the "
             f"setting's budget and doubled budgets up to {rungs[-1]['top']:g} FLOPs, until every seed's discriminator "
             f"closes at least {LEARNED_TASK:g} of the gap from its labels' entropy to the Bayes reference "
             "discriminator, on held-out windows at the budget (the rule by which a comparison ranks it).", "",
             "| budget (FLOPs) | share of the gap closed, per seed | every seed ≥ half |", "|---|---|---|"]
    for rung in rungs:
        shares = ", ".join("diverged" if share is None else f"{share:.2f}" for share in rung["closed"])
        lines.append(f"| {rung['budget']:.3g} | {shares} | {'yes' if rung['learned'] else 'no'} |")
    last = rungs[-1]
    lines += ["", f"The smallest budget at which it learns its task on every seed: {last['budget']:.3g} FLOPs."
              if last["learned"] else f"It does not learn its task on every seed at any budget up to "
              f"{last['top']:g} FLOPs."]
    return lines


def edge_text(side: str | None, what: str) -> str:
    return f"{what[:1].upper() + what[1:]} lies inside its grid." if side is None else \
        f"{what[:1].upper() + what[1:]} is the {side} of its grid: widen the grid."


def finetune_text(tuned: dict) -> str:
    picks = "; ".join(f"{task} {rate:g} (dev {tuned['finetune_dev'][task][f'{rate:g}']:.4f}"
                      + (f"; each seed's own pick {', '.join(f'{r:g}' for r in each[task])}"
                         if (each := tuned.get("finetune_each_seed")) else "") + ")"
                      for task, rate in tuned["finetune"].items())
    edges = ", ".join(f"{task} ({side})" for task, side in tuned["finetune_at_edge"].items())
    return f"Fine-tuning rates picked on dev: {picks}." + (f" At an edge of the grid: {edges}." if edges else "")
