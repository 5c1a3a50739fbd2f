"""One tuning budget for every objective, chosen on validation data: `python -m bench.tune [bench.compare's flags]`.

Rates picked by each objective's own loss are not picked alike (the losses are not comparable), and a rate picked on
a seed that is also evaluated, or on the split that is reported, flatters whoever it picked. Here:
- every objective gets the same number of pretraining trials: the peak rate for each (TRIAL_RATES), and for ELECTRA
  its rate together with λ and its generator's width, as many trials as the others (each objective declares its
  trials: Objective.tuning_trials);
- every trial trains each of TUNING_SEEDS, which no comparison evaluates (they run seeds 0..N-1), to the full
  budget: one seed picks within its own noise, and a pick's margin over its runner-up is only read against the
  seeds' spread (in standard errors of the paired difference);
- the trial is chosen by the neutral tasks read frozen, the comparison's main yardstick, on their *dev* split (their
  test split is never read), averaged over the tasks and the seeds, among the trials that learned their own task on
  every seed (bench.analysis.results.LEARNED_TASK: the rule by which a comparison ranks an objective at all), or
  among all of them where none did;
- whether the pick holds at TRANSFER times the budget: the picked setting and its neighbours in rate, trained again
  on the same seeds at that budget and read the same way (--transfer 0 skips it);
- the chosen trial's backbones and every untrained control (each tuning seed's) are then fine-tuned on each task at
  every rate of FINETUNE_RATES, and the dev split, averaged over the seeds, picks each reader's rate per task (each
  seed's own pick is kept beside it, so the report shows whether one seed would have picked the same).
Then, for ELECTRA, whose discriminator must close half the gap from its labels' entropy to the Bayes reference on
every seed before it is ranked (bench.analysis.results.LEARNED_TASK), the budget ladder: its picked setting trained on
the tuning seeds at the setting's budget and at twice, four times ... it, up to --ladder-max FLOPs (default
MAX_LADDER), until every seed closes that half: the smallest budget at which it learns its task here, or none up to
the top. A pick at an edge of its grid is reported as such: the grid should then be widened. With --write-defaults
(the default setting only) the picks become the default comparison's (bench/common/tuned.json): its objectives and peak
rates, and the one fine-tuning rate per reader and task each backbone is then fine-tuned at.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from backbone import ConfigError
from bench import compare
from bench.analysis.results import LEARNED_TASK, own_task
from bench.common.cli import run
from bench.common.environment import code_revision
from bench.common.files import write_atomic, write_json
from bench.common.stopping import stop_on_signals
from bench.common.tuned import DEFAULTS_FILE
from bench.orchestration.config import Config
from bench.orchestration.jobs import executed
from bench.orchestration.pipeline import loss_references
from bench.orchestration.planning import make_plan
from bench.orchestration.tuned_setting import setting_of
from bench.report.tuning import tuning_report
from bench.training.batches import build_run_objective
from bench.training.distributed import make_fabric
from bench.training.recipe import run_name
from bench.training.state import Context, Work, restore, setup_run
from bench.yardsticks.downstream import Downstream, frozen_probe
from objectives import Objective, parse_spec

TUNING_SEEDS = (1000, 1001, 1002)  # never a comparison's seeds
TRANSFER = 4.0  # the pick checked again at this multiple of the budget
# 2× apart around the rates small models take; at the grid before (1e-3 to 3.2e-2) ar and span picked its lowest
TRIAL_RATES = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2)
TUNED_OBJECTIVES = "mlm,ar,electra"  # what the default tunes: ELECTRA's λ is one of its trials
# down to 1e-5, at which the fine-tuning steps barely move the backbone: a pick there is the limit of fine-tuning
# less and less, the frozen probe's head, beyond which no other model lies; it is no edge to widen
FINETUNE_RATES = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
BARELY_MOVES = 1e-5
MAX_LADDER = 1e13  # the bound: beyond it a CPU run is hours


def trials(spec: str) -> list[tuple[str, float]]:
    """(spec to train, peak rate) of every trial of an objective, as its class declares them
    (Objective.tuning_trials; a schedule of objectives tunes its rate alone)."""
    kind = Objective if ">" in spec else parse_spec(spec)[0]
    return kind.tuning_trials(spec, TRIAL_RATES)


@dataclass
class FrozenOnDev:
    """A trial's yardstick: the tasks' frozen probe on their dev split (validation_view), nothing fine-tuned."""

    downstream: Downstream
    result_key = "downstream"
    seconds_key = "downstream_seconds"

    def at_checkpoint(self, objective: Objective) -> None:
        return None

    def at_end(self, objective: Objective, progress: bool = False, desc: str = "", reader: str | None = None) -> dict:
        return {task.name: {"frozen": frozen_probe(objective, task, self.downstream.config)[0]}
                for task in self.downstream.tasks}


def validation_view(downstream: Downstream, rates: tuple[float, ...]) -> Downstream:
    """The same tasks with their dev split in the test split's place, fine-tuned at every rate of `rates`: whatever
    this reads, it reads on validation data."""
    tasks = [replace(task, test=task.dev) for task in downstream.tasks]
    return Downstream(tasks, replace(downstream.config, lrs=rates, tuned=()))


def validation_score(record, neutral: list[str]) -> float:
    """The neutral tasks' frozen average on their dev split (validation_view), one seed's: what picks a trial."""
    return statistics.fmean(record.downstream[name]["frozen"]["score"] for name in neutral)


def margin(best: dict, other: dict) -> dict | None:
    """The pick's lead over another trial, seed by seed (the same seeds, so the difference is paired): its mean, its
    standard error over the seeds and the lead in standard errors; None where either diverged on a seed."""
    if None in best["per_seed"] or None in other["per_seed"]:
        return None
    differences = [a - b for a, b in zip(best["per_seed"], other["per_seed"])]
    mean = statistics.fmean(differences)
    se = statistics.stdev(differences) / len(differences) ** 0.5 if len(differences) > 1 else float("nan")
    return {"over": {"objective": other["trial"], "lr": other["lr"]}, "difference": mean, "se": se,
            "in_se": mean / se if se > 0 else float("inf") if mean > 0 else float("nan")}


def edge(grid: list[float], chosen: float) -> str | None:
    return "lowest" if chosen == min(grid) else "highest" if chosen == max(grid) else None


def tune(config: Config, ladder_max: float = MAX_LADDER, transfer: float = TRANSFER) -> dict:
    fabric = make_fabric(config.hardware.accelerator, config.hardware.devices, config.hardware.num_nodes,
                         config.hardware.strategy, config.hardware.precision, launch=False)
    out = config.output.out
    plan = make_plan(config.with_flags(out=out / "trials"), fabric)
    if plan.downstream is None:
        raise ConfigError("bench.tune picks by the neutral tasks' dev split: give --downstream tasks")
    validation = validation_view(plan.downstream, FINETUNE_RATES)
    plan = replace(plan, probe=None, downstream=FrozenOnDev(validation))
    tried = {spec: trials(spec) for spec in plan.specs}
    trained_on = {signal for objective in plan.objectives for signal in objective.signals}
    neutral = [task.name for task in validation.tasks if not set(task.copies) & trained_on]
    if not neutral:
        raise ConfigError("bench.tune picks by the neutral tasks: every --downstream task copies an objective's "
                          "training signal")
    budget = plan.train.budget_flops
    references = own_task_references(plan, [trained for spec in plan.specs for trained, _ in tried[spec]])
    scored = trained_rows(fabric, plan, [trial for spec in plan.specs for trial in tried[spec]], budget, neutral,
                          config.output.resume, references)
    found: dict = {"setting": setting_of(config), "revision": code_revision(), "seeds": list(TUNING_SEEDS),
                   "finetune_rates": list(FINETUNE_RATES), "objectives": {}, "controls": {}}
    for spec in plan.specs:
        rows = [scored[trial] for trial in tried[spec]]
        pool = candidates(spec, rows)
        best = max(pool, key=lambda row: row["validation"])
        rates = [row["lr"] for row in rows if row["trial"] == best["trial"]]
        others = sorted((row for row in pool if row is not best), key=lambda row: -row["validation"])
        backbones = [picked_backbone(fabric, plan, best["trial"], best["lr"], budget, seed) for seed in TUNING_SEEDS]
        found["objectives"][spec] = {"trials": rows, "picked": {"objective": best["trial"], "lr": best["lr"]},
                                     "at_edge": edge(rates, best["lr"]),
                                     "margin": margin(best, others[0]) if others else None,
                                     **finetune_picks(fine_tuned_on_dev(validation, backbones))}
    for name, spec in plan.control_specs().items():
        untrained = []
        for seed in TUNING_SEEDS:
            with torch.random.fork_rng(devices=[]):  # the backbone a run of this seed starts from, as control_run
                fabric.seed_everything(seed, verbose=False)
                untrained.append(build_run_objective(spec, plan.train, plan.corpus).to(fabric.device))
        found["controls"][name] = finetune_picks(fine_tuned_on_dev(validation, untrained))
    if transfer:
        found["transfer"] = transfer_check(fabric, plan, found, tried, budget * transfer, neutral,
                                           config.output.resume, references)
    if "electra" in found["objectives"]:
        chosen = found["objectives"]["electra"]["picked"]
        found["electra_ladder"] = ladder(fabric, plan, chosen["objective"], chosen["lr"], config.output.resume,
                                         ladder_max)
    return found


def trained_rows(fabric, plan, tried: list[tuple[str, float]], budget: float, neutral: list[str],
                 resume: bool, references: dict | None = None) -> dict[tuple[str, float], dict]:
    """Each trial trained on every tuning seed at `budget` (all at once, as the pool allows), read frozen on dev."""
    train = replace(plan.train, budget_flops=budget, eval_points=1, probe_every_eval=False)
    works = [Work(trained, seed, replace(train, lr=rate),
                  trial_dir(plan.out, trained, rate, seed, budget, plan.train.budget_flops), reuse=resume)
             for trained, rate in tried for seed in TUNING_SEEDS]
    outcomes = iter(executed(fabric, works, plan))
    rows = {}
    for trained, rate in tried:
        runs = [next(outcomes) for _ in TUNING_SEEDS]
        rows[(trained, rate)] = trial_row(trained, rate, runs, neutral, (references or {}).get(trained))
    return rows


def transfer_check(fabric, plan, found: dict, tried: dict, budget: float, neutral: list[str],
                   resume: bool, references: dict | None = None) -> dict:
    """Whether each pick still wins at `budget`: the picked setting and its neighbours in rate (the same setting's
    trials either side on the grid), trained on the tuning seeds at that budget and read on dev as the trials were,
    the winner again among those that learned their own task."""
    compared = {}
    for spec, tuned in found["objectives"].items():
        chosen = tuned["picked"]
        same = [rate for trained, rate in tried[spec] if trained == chosen["objective"]]
        at = same.index(chosen["lr"])
        compared[spec] = [(chosen["objective"], rate) for rate in same[max(0, at - 1):at + 2]]
    scored = trained_rows(fabric, plan, [trial for trials_ in compared.values() for trial in trials_], budget,
                          neutral, resume, references)
    checks = {}
    for spec, trials_ in compared.items():
        rows = [scored[trial] for trial in trials_]
        chosen = found["objectives"][spec]["picked"]
        best = max(candidates(spec, rows), key=lambda row: row["validation"])
        mine = next(row for row in rows if (row["trial"], row["lr"]) == (chosen["objective"], chosen["lr"]))
        others = [row for row in rows if row is not mine and row["validation"] is not None]
        checks[spec] = {"picked": chosen, "rows": rows, "holds": best is mine,
                        "margins": [m for row in others if (m := margin(mine, row)) is not None]}
    return {"budget": budget, "checks": checks}


def picked_backbone(fabric, plan, trained: str, lr: float, budget: float, seed: int) -> Objective:
    """A trial's final weights, read back from its run folder."""
    train = replace(plan.train, lr=lr, budget_flops=budget, eval_points=1, probe_every_eval=False)
    run = setup_run(fabric, Work(trained, seed, train,
                                 trial_dir(plan.out, trained, lr, seed, budget, plan.train.budget_flops)),
                    Context(plan.corpus))
    restore(fabric, run)
    return run.objective


def ladder_budgets(budget: float, top: float = MAX_LADDER) -> list[float]:
    """The setting's budget doubled until `top`, which ends the ladder (none above the setting's: no ladder)."""
    if top < budget:
        return []
    budgets = [budget]
    while budgets[-1] * 2 < top:
        budgets.append(budgets[-1] * 2)
    return budgets + [top] if budgets[-1] < top else budgets


def ladder(fabric, plan, spec: str, lr: float, resume: bool, top: float = MAX_LADDER) -> list[dict]:
    """ELECTRA's picked setting on TUNING_SEEDS at each budget of ladder_budgets, until every seed's discriminator
    closed at least LEARNED_TASK of its gap (held-out, at the budget; no yardstick is read): each rung's shares."""
    plain = replace(plan, probe=None, downstream=None)  # its own task only: the held-out evaluation at the end
    rows = []
    for budget in ladder_budgets(plan.train.budget_flops, top):
        train = replace(plan.train, lr=lr, budget_flops=budget, eval_points=1, probe_every_eval=False)
        works = [Work(spec, seed, train, plan.out / "ladder" / f"{run_name(spec, seed)}-{budget:g}", reuse=resume)
                 for seed in TUNING_SEEDS]
        outcomes = executed(fabric, works, plain)
        closed = [None if diverged else record.curve[-1].metrics.get("discriminator_closed")
                  for record, diverged in outcomes]
        learned = all(share is not None and share >= LEARNED_TASK for share in closed)
        rows.append({"budget": budget, "top": top, "seeds": list(TUNING_SEEDS), "closed": closed,
                     "learned": learned})
        if learned:
            break
    return rows


def trial_dir(out: Path, trained: str, rate: float, seed: int, budget: float, setting_budget: float) -> Path:
    """A trial's run folder, the budget named where it is not the setting's (the transfer check, the ladder)."""
    at = "" if budget == setting_budget else f"-at{budget:g}"
    return out / f"{run_name(trained, seed)}-lr{rate:g}{at}"


def own_task_references(plan, specs: list[str]) -> dict[str, tuple[dict, dict]]:
    """Per trained spec, the Bayes floors and unigram losses a comparison's
    bench.orchestration.pipeline.bayes_references gives it, from which own_task reads whether a trial learned its task;
    none on text, where only ELECTRA's discriminator has a rule (its AUC), which needs no reference."""
    if plan.corpus.language is None:
        return {}
    return {spec: loss_references(build_run_objective(spec, plan.train, plan.corpus), plan.corpus, plan.train)
            for spec in dict.fromkeys(specs)}


def trial_row(trained: str, rate: float, runs: list, neutral: list[str],
              references: tuple[dict, dict] | None = None) -> dict:
    """A trial over the tuning seeds: each seed's dev average (None where it diverged), their mean (None if any
    diverged: a setting that diverges on a seed is not picked), each task's mean, and each seed's share of its own
    task's range closed with whether every seed learned it (the comparisons' rule; None where the task has no
    reference)."""
    per_seed = [None if diverged else validation_score(record, neutral) for record, diverged in runs]
    finished = [record for record, diverged in runs if not diverged]
    tasks = {name: statistics.fmean(record.downstream[name]["frozen"]["score"] for record in finished)
             for name in (finished[0].downstream if finished else {})}
    floors, unigram = references or ({}, {})
    task = own_task(finished, floors, unigram, None) if finished and len(finished) == len(runs) else None
    return {"trial": trained, "lr": rate, "per_seed": per_seed,
            "validation": None if None in per_seed else statistics.fmean(per_seed),
            "se": None if None in per_seed or len(per_seed) < 2 else
            statistics.stdev(per_seed) / len(per_seed) ** 0.5, "tasks": tasks,
            "closed": None if task is None else task.closed_each, "learned": None if task is None else task.learned}


def candidates(spec: str, rows: list[dict]) -> list[dict]:
    """The trials the pick is made among: those that finished on every seed and learned their own task on every
    seed, the rule by which a comparison ranks an objective at all (a backbone that failed its task is ranked nowhere,
    however it scores on dev); every finished trial where none learned it (ELECTRA at small budgets: the report then
    flags it). Every trial diverging is a mistake."""
    scored = [row for row in rows if row["validation"] is not None]
    if not scored:
        raise ConfigError(f"bench.tune: every trial of {spec} diverged on some seed; try lower rates")
    return [row for row in scored if row.get("learned")] or scored


def fine_tuned_on_dev(validation: Downstream, backbones: list[Objective]) -> list[dict[str, dict[str, float]]]:
    """Per backbone (one per tuning seed), {task: {rate: dev score}}: fine-tuned on each task at every rate."""
    return [{task: value["finetuned"]["dev"] for task, value in validation.at_end(objective).items()}
            for objective in backbones]


def finetune_picks(per_seed: list[dict[str, dict[str, float]]]) -> dict:
    """Per task the fine-tuning rate with the best dev score averaged over the seeds (the first of equals), where it
    lies on the grid, and the rate each seed's own dev split would have picked."""
    dev = {task: {rate: statistics.fmean(seed[task][rate] for seed in per_seed) for rate in per_seed[0][task]}
           for task in per_seed[0]}
    picks = {task: float(max(scores, key=scores.get)) for task, scores in dev.items()}
    return {"finetune": picks, "finetune_dev": dev,
            "finetune_each_seed": {task: [float(max(seed[task], key=seed[task].get)) for seed in per_seed]
                                   for task in dev},
            "finetune_at_edge": {task: side for task, rate in picks.items()
                                 if (side := edge([float(r) for r in dev[task]], rate))
                                 and not (side == "lowest" and rate <= BARELY_MOVES)}}


def defaults(found: dict) -> dict:
    """What the default comparison reads (bench/common/tuned.json): objectives, peak rates, fine-tuning rates."""
    picks = {spec: tuned["picked"] for spec, tuned in found["objectives"].items()}
    first = next(iter(picks.values()))
    lr = ",".join([f"{first['lr']:g}", *(f"{p['objective']}={p['lr']:g}" for p in list(picks.values())[1:])])
    finetune = {p["objective"]: found["objectives"][spec]["finetune"] for spec, p in picks.items()}
    return {"made_by": "python -m bench.tune --write-defaults", "report": "reports/tuning/report.md",
            "setting": found["setting"], "objectives": ",".join(p["objective"] for p in picks.values()), "lr": lr,
            "finetune": {**finetune, **{name: tuned["finetune"] for name, tuned in found["controls"].items()}}}


def build_parser():
    """bench.compare's flags (they set the setting tuned; --out is where the trials and the report go, default
    reports/tuning) and --write-defaults."""
    parser = compare.build_parser()
    parser.prog = "python -m bench.tune"
    parser.description = ("Tune every objective with the same number of pretraining trials on a seed no comparison "
                          "evaluates, picked on the neutral tasks' dev split, then each backbone's fine-tuning rate "
                          "per task on dev; write report.md and results.json to --out (default reports/tuning). "
                          "bench.compare's flags set the setting tuned.")
    parser.epilog = None
    add_own_flags(parser.add_argument)
    return parser


def add_own_flags(add) -> None:
    """The flags bench.tune adds to bench.compare's."""
    add("--ladder-max", type=float, default=MAX_LADDER, metavar="FLOPS",
        help="the top of ELECTRA's budget ladder, the smallest budget at which its discriminator learns its task "
             f"(default {MAX_LADDER:g}; below the setting's budget: no ladder)")
    add("--transfer", type=float, default=TRANSFER, metavar="FACTOR",
        help=f"check each pick again at FACTOR times the budget, against its neighbours in rate, on the same seeds "
             f"(default {TRANSFER:g}; 0 skips the check)")
    add("--write-defaults", action="store_true",
        help="make the picks the default comparison's (bench/common/tuned.json): only for a tuning at the default "
             "setting")


def main(argv: list[str] | None = None) -> None:
    given = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(given)  # every flag checked, --help answered
    own = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_own_flags(own.add_argument)
    config = compare.parse_config(own.parse_known_args(given)[1])  # bench.compare's flags alone
    if not compare.given_flag(given, "objectives"):  # the objectives as their papers set them, not the last picks
        config = config.with_flags(objectives=TUNED_OBJECTIVES)
    if config.output.out is None:
        config = config.with_flags(out=Path("reports/tuning"))
    if not args.transfer >= 0:  # written this way so NaN is refused too
        raise ConfigError(f"--transfer {args.transfer:g}: give a positive factor of the budget, or 0 for no check")
    write_defaults = args.write_defaults
    if write_defaults and setting_of(config) != setting_of(Config()):
        raise ConfigError("--write-defaults: only a tuning at the default setting becomes the default's")
    with stop_on_signals():  # for the whole command, as bench.compare: the trials and the fine-tuning after them
        found = {"command": shlex.join(["python", "-m", "bench.tune", *given]),
                 **tune(config, args.ladder_max, args.transfer)}
    out = config.output.out
    write_json(out / "results.json", found)
    write_atomic(out / "report.md", tuning_report(found, BARELY_MOVES))
    print(f"report: {out / 'report.md'}")
    if write_defaults:
        write_atomic(DEFAULTS_FILE, json.dumps(defaults(found), indent=2) + "\n")
        print(f"defaults: {DEFAULTS_FILE}")


if __name__ == "__main__":
    run(main)
