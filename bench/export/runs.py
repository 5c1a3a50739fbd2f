"""The runs an export reads: a finished run's folder (COMPARISON/runs/NAME-seedN, with result.json and the final
checkpoint.pt), or every finished run of a comparison, and the objective rebuilt with its final weights exactly as
`python -m bench.downstream --run` rebuilds it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backbone import ConfigError
from bench.downstream import context_for_run, load_run_objective
from bench.orchestration.planning import read_settings
from bench.training.records import ControlRecord, RunRecord
from bench.training.runs import finished_result
from bench.yardsticks.examples import TaskContext
from objectives import Objective


@dataclass(frozen=True)
class FinishedRun:
    folder: Path
    comparison: Path  # the folder with config.json
    spec: str
    seed: int


def finished_run(folder: Path) -> FinishedRun:
    """The run in `folder`, or one ConfigError line that says what is missing."""
    folder = folder.expanduser().absolute()
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder; give a run's folder (COMPARISON/runs/NAME-seedN)")
    comparison = folder.parent.parent
    if folder.parent.name != "runs" or not (comparison / "config.json").is_file():
        hint = " (a comparison: add --all)" if (folder / "config.json").is_file() else ""
        raise ConfigError(f"{folder} is not a run of a comparison{hint}: expected COMPARISON/runs/NAME-seedN beside "
                          "COMPARISON/config.json")
    if not (folder / "result.json").is_file():
        raise ConfigError(f"{folder} has no result.json: the run has not finished, and only a finished run's final "
                          "weights are exported")
    result = finished_result(folder)
    if not isinstance(result, RunRecord):
        raise ConfigError(f"{folder} is an untrained control ({result.control}), not a run")
    if not (folder / "checkpoint.pt").is_file():
        raise ConfigError(f"{folder} has no checkpoint.pt: the final weights are needed (checkpoints stay where the "
                          "comparison ran; they are not committed)")
    return FinishedRun(folder, comparison, result.objective, result.seed)


def finished_runs(comparison: Path) -> list[FinishedRun]:
    """Every trained run of a comparison (its untrained controls have no weights to export)."""
    comparison = comparison.expanduser().absolute()
    if not (comparison / "config.json").is_file() or not (comparison / "runs").is_dir():
        raise ConfigError(f"{comparison} holds no comparison (config.json and runs/); --all takes the folder "
                          "bench.compare --out wrote")
    # a folder without result.json is a run that has not finished (finished_run says so); controls are skipped
    folders = sorted(p for p in (comparison / "runs").iterdir() if p.is_dir() and not is_control(p))
    if not folders:
        raise ConfigError(f"{comparison} has no trained run")
    return [finished_run(folder) for folder in folders]


def is_control(folder: Path) -> bool:
    """An untrained control's folder: a result without an objective (a run's names the control beside it)."""
    return isinstance(finished_result(folder), ControlRecord)


def load_objective(run: FinishedRun) -> tuple[Objective, TaskContext]:
    """The run's objective with its final weights, and the window, vocabulary and tokenizer it trained with."""
    settings = read_settings(run.comparison)
    context = context_for_run(run.comparison, settings)
    try:
        objective = load_run_objective(run.folder, run.spec, settings, context)
    except ConfigError:
        raise
    except Exception as error:  # torch's own words, first line: a broken file, or weights of another shape
        raise ConfigError(f"{run.folder / 'checkpoint.pt'} could not be loaded as {run.spec!r}: "
                          f"{str(error).splitlines()[0][:200]}") from None
    return objective.eval(), context
