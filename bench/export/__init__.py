"""Trained backbones in the Hugging Face ecosystem: `python -m bench.export RUN_FOLDER --out DIR` writes a folder
that `transformers` loads, with the run's tokenizer, whose outputs equal the suite's own (docs/export.md).

    export_run(run_folder, out)            one finished run -> out (ELECTRA's generator in out/generator)
    export_comparison(comparison, out)     every finished run of a comparison -> out/NAME-seedN
    export_objective(objective, context, out)   an objective in memory (what the two above call)

Only safetensors is needed to write an export; loading it takes transformers (the `export` extra).
"""

from __future__ import annotations

from pathlib import Path

from bench.export.mapping import folders_for, last_piece
from bench.export.runs import FinishedRun, finished_run, finished_runs, load_objective
from bench.export.writing import write_exports
from bench.yardsticks.examples import TaskContext
from objectives import Objective


def provenance(run: FinishedRun | None, objective: Objective) -> dict:
    """What config.json records of where the weights came from."""
    record = {"objective": objective.spec(), "exported_piece": last_piece(objective).spec()}
    if run is not None:
        record.update({"run": str(run.folder), "seed": run.seed})
    return record


def export_objective(objective: Objective, context: TaskContext, out: Path, run: FinishedRun | None = None) -> Path:
    """Export `objective` (its backbone as its last piece reads it) with `context`'s tokenizer to `out`."""
    out = Path(out).expanduser().absolute()
    write_exports({out: folders_for(objective, objective.spec())}, {out: context}, {out: provenance(run, objective)})
    return out


def export_runs(runs: list[FinishedRun], outs: list[Path]) -> list[Path]:
    """Each run to its folder: every run is read and mapped before anything is written."""
    outs = [Path(out).expanduser().absolute() for out in outs]
    targets, contexts, records = {}, {}, {}
    for run, out in zip(runs, outs):
        objective, context = load_objective(run)
        targets[out], contexts[out] = folders_for(objective, run.spec), context
        records[out] = provenance(run, objective)
    write_exports(targets, contexts, records)
    return outs


def export_run(run_folder: Path, out: Path) -> Path:
    """A finished run (COMPARISON/runs/NAME-seedN) to `out`."""
    return export_runs([finished_run(Path(run_folder))], [out])[0]


def export_comparison(comparison: Path, out: Path) -> list[Path]:
    """Every finished run of the comparison in `comparison` to out/NAME-seedN."""
    runs = finished_runs(Path(comparison))
    return export_runs(runs, [Path(out) / run.folder.name for run in runs])


__all__ = ["export_comparison", "export_objective", "export_run", "export_runs"]
