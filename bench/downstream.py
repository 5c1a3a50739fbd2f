"""Add downstream tasks to a finished comparison, without retraining: its final backbones and untrained controls
through the same recipe as `bench.compare --downstream` (bench.yardsticks.downstream), then results.json and
report.md rewritten.

    python -m bench.downstream --run reports/X                     # the tasks the comparison was given
    python -m bench.downstream --run reports/X --tasks hf:glue:rte  # add a task later, without retraining
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from backbone import Backbone, ConfigError, resolve_model
from bench.analysis.results import Measured, build_results, load_results
from bench.common.cli import Parser, run
from bench.common.files import read_json, write_json
from bench.data.corpus import data_source, speller, synthetic_language
from bench.data.text import vocab_for_tokenizer
from bench.orchestration.planning import read_settings
from bench.report.markdown import write_report
from bench.training.recipe import parse_seq_len, run_name
from bench.training.records import ControlRecord
from bench.yardsticks.downstream import Downstream, add_finetune_flags, describe_recipe, finetune_config
from bench.yardsticks.examples import TaskContext
from bench.yardsticks.tasks import load_tasks, parse_task_list
from objectives import Objective, Vocab, build_objective

# --- python -m bench.downstream --run DIR ------------------------------------------------------------------------

def context_for_run(out: Path, settings: dict) -> TaskContext:
    """The window, vocabulary and tokenizer (or embedded language) the comparison in `out` trained with, without
    reading its corpus again: bench.compare saved the tokenizer beside config.json."""
    # the model's max_seq_len: the longest length of a sequence-length schedule
    recorded = settings["config"]
    (source, rest) = data_source(recorded["data"]["data"])
    seq_len = parse_seq_len(recorded["model"]["seq_len"]).longest
    if source == "synthetic":
        options, _, language = synthetic_language(rest)
        return TaskContext(seq_len, Vocab.for_words(options.words), language=language)
    path = out / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"{out} has no tokenizer.json (a comparison on text written before downstream tasks "
                          "existed); rerun the comparison")
    tokenizer = Tokenizer.from_file(str(path))
    if source == "synthetic:text":  # the embedded tasks are spelled as the corpus was
        options, _, language = synthetic_language(rest)
        return TaskContext(seq_len, vocab_for_tokenizer(tokenizer), tokenizer, language, speller(options.words))
    return TaskContext(seq_len, vocab_for_tokenizer(tokenizer), tokenizer=tokenizer)


def run_objective(spec: str, settings: dict, context: TaskContext) -> Objective:
    """A run's objective as built before its first step (bench.training.batches.build_run_objective, from what
    config.json recorded): its weights are whatever the generator's state makes them."""
    backbone = Backbone(resolve_model(settings["config"]["model"]["model"], context.vocab.size,
                                      max_seq_len=context.seq_len))
    return build_objective(spec, backbone, context.vocab)


def load_run_objective(run_dir: Path, spec: str, settings: dict, context: TaskContext) -> Objective:
    """A run's objective with the weights of its final checkpoint."""
    objective = run_objective(spec, settings, context)
    state = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=True)
    objective.load_state_dict(state["model"])
    return objective


def control_objective(control: ControlRecord, settings: dict, context: TaskContext) -> Objective:
    """An untrained control's backbone (bench.training.runs.control_run), rebuilt from its seed: the seeding and
    construction a run's setup uses, so nothing of it needs to be stored."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(control.seed)  # what Fabric's seed_everything does to torch's generator
        return run_objective(control.read_as, settings, context)


def build_parser() -> Parser:
    parser = Parser(prog="python -m bench.downstream",
                    description="Evaluate the final backbones of a finished comparison on labelled tasks (frozen "
                                "probe and fine-tuning, the rate chosen on dev), then rewrite its results.json and "
                                "report.md with the scores in the verdict. Reproduces what `bench.compare "
                                "--downstream` wrote for the same tasks and recipe.",
                    epilog="exit status: 0 done; 2 a mistake in the input (one line on stderr, nothing written)")
    parser.add_argument("--run", type=Path, required=True, help="a folder bench.compare wrote (config.json, "
                                                                "results.json, runs/*/checkpoint.pt)")
    parser.add_argument("--tasks", default=None, help="task specs as for `bench.compare --downstream` (default: the "
                                                      "tasks the comparison was run with)")
    add_finetune_flags(parser.add_argument, defaults_from_run=True)
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    out = args.run.absolute()
    for name in ("config.json", "results.json"):
        if not (out / name).is_file():
            raise ConfigError(f"{out} holds no finished comparison (no {name}); run bench.compare --out {out} first")
    settings, measured = read_settings(out), Measured.from_results(load_results(read_json(out / "results.json")))
    saved = settings["derived"].get("downstream") or {}
    if args.tasks is None and not saved.get("tasks"):
        raise ConfigError(f"{out} was run without --downstream; name the tasks with --tasks")
    context = context_for_run(out, settings)
    downstream = Downstream(load_tasks(parse_task_list(args.tasks) if args.tasks else saved["tasks"], context),
                            finetune_config(args.finetune_steps, args.finetune_lrs, saved))
    runs, controls = measured.runs, measured.controls
    if not runs:
        raise ConfigError(f"{out} has no finished run to evaluate")
    folders = [out / "runs" / run_name(run.objective, run.seed) for run in runs]
    for folder in folders:  # every mistake before anything is written
        if not (folder / "checkpoint.pt").is_file():
            raise ConfigError(f"{folder} has no checkpoint.pt: the final weights are needed (checkpoints stay where "
                              "the comparison ran; they are not committed)")
    evaluated_runs, evaluated_controls = [], []
    for record, folder in tqdm(list(zip(runs, folders)), desc="runs", unit="run", disable=args.quiet):
        objective = load_run_objective(folder, record.objective, settings, context)
        evaluated = downstream.at_end(objective, progress=not args.quiet, desc=folder.name, reader=record.objective)
        evaluated_runs.append(replace(record, downstream={**(record.downstream or {}), **evaluated}))
        write_json(folder / "downstream.json", evaluated_runs[-1].downstream)
    for control in tqdm(controls, desc="untrained controls", unit="control", disable=args.quiet):
        folder = out / "runs" / run_name(control.control, control.seed)
        evaluated = downstream.at_end(control_objective(control, settings, context), progress=not args.quiet,
                                      desc=folder.name, reader=control.control)
        evaluated_controls.append(replace(control, downstream={**(control.downstream or {}), **evaluated}))
        write_json(folder / "downstream.json", evaluated_controls[-1].downstream)
    measured = replace(measured, runs=evaluated_runs, controls=evaluated_controls)
    # tasks evaluated before keep their description; a recipe used for other tasks stays on record beside this one
    described = {t["task"]: t for t in [*(measured.tasks or []), *downstream.describe()]}
    recipe, before = describe_recipe(downstream, evaluated_runs), measured.setup.get("downstream")
    kept = [name for name in described if name not in {task.name for task in downstream.tasks}]
    setup = {**measured.setup, "downstream": recipe if not (before and kept) else f"{before}; then, by "
             f"bench.downstream --run: {recipe}"}
    rebuilt = build_results(replace(measured, setup=setup, tasks=list(described.values())))
    print(f"report: {write_report(out, rebuilt)}")


if __name__ == "__main__":
    run(main)
