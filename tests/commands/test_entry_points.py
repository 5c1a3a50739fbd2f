"""Every `python -m bench.X` command the README and docs/ show, run as a user runs it: a subprocess of this checkout
at a tiny setting, its exit status 0 and the files it writes checked. Importing a command's module (as the other tests
do) never runs its `__main__` block: bench.perf's once called main() before the functions it needs were defined, and
every test passed while docs/speed.md's command crashed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.commands.test_readme import DOCS, README, command_lines_of

ROOT = Path(__file__).resolve().parents[2]
# the commands this module runs; the one script the pages show (examples/docs_corpus.py) is no `python -m` entry point
TESTED = {"bench.compare", "bench.positions", "bench.tune", "bench.downstream", "bench.export", "bench.perf"}
# run as the pages show them by tests/commands/test_gpu_experiment.py (scripts/gpu-experiment.sh and its bundle)
RUN_ELSEWHERE = {"bench.gpu_experiment", "build_gpu_bundle.py"}
DATA = "synthetic:train=64,heldout=16,words=64,lexicon=8"
TINY = ["--model", "tiny", "--seq-len", "32", "--batch-size", "4", "--budget", "1e8", "--eval-points", "2",
        "--data", DATA, "--quiet", "--seeds", "1", "--downstream", "synthetic:states,size=64", "--finetune-steps", "2",
        "--finetune-lrs", "1e-3", "--no-probes", "--jobs", "1"]


def bench(command: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m bench.COMMAND ARGS` from the repository root, this checkout's code first on the path (not an
    installed copy's), offline; its exit status must be 0."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", f"bench.{command}", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"python -m bench.{command} {' '.join(args)}: exit {done.returncode}\n" + \
        done.stderr[-3000:]
    return done


def test_every_command_the_pages_show_is_run_here():
    shown = {command for page in (README, *DOCS) for command, _ in command_lines_of(page.read_text())}
    assert shown - {"docs_corpus.py"} - RUN_ELSEWHERE == TESTED, \
        "a page shows a `python -m` command this module does not run"


@pytest.fixture(scope="module")
def comparison(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("entry") / "cmp"
    done = bench("compare", *TINY, "--objectives", "mlm,ar", "--out", str(out))
    assert f"report: {out / 'report.md'}" in done.stdout
    return out


@pytest.mark.slow
def test_compare_writes_its_report_results_and_runs(comparison):
    for name in ("report.md", "results.json", "config.json", "loss_vs_flops.png", "gains_forest.png"):
        assert (comparison / name).is_file(), name
    results = json.loads((comparison / "results.json").read_text())
    assert [run["objective"] for run in results["runs"]] == ["mlm", "ar"] and results["answer"]["sentence"]
    for run in ("mlm-seed0", "ar-seed0"):
        written = {path.name for path in (comparison / "runs" / run).iterdir()}
        assert {"result.json", "checkpoint.pt", "curve.jsonl"} <= written, run
    assert (comparison / "runs" / "untrained-bidirectional-seed0" / "result.json").is_file()
    assert "## Answer" in (comparison / "report.md").read_text()


@pytest.mark.slow
def test_downstream_adds_a_task_to_a_finished_comparison(comparison, tmp_path):
    folder = tmp_path / "cmp"
    shutil.copytree(comparison, folder)  # the command rewrites the comparison it is given
    bench("downstream", "--run", str(folder), "--tasks", "synthetic:topic,size=16", "--finetune-steps", "2",
          "--finetune-lrs", "1e-3", "--quiet")
    results = json.loads((folder / "results.json").read_text())
    assert {task["task"] for task in results["downstream"]["tasks"]} == {"synthetic:states,size=64",
                                                                        "synthetic:topic,size=16"}
    assert (folder / "runs" / "mlm-seed0" / "downstream.json").is_file()
    assert "synthetic:topic,size=16" in (folder / "report.md").read_text()


@pytest.mark.slow
def test_export_writes_a_run_and_every_run_of_a_comparison(comparison, tmp_path):
    done = bench("export", str(comparison / "runs" / "mlm-seed0"), "--out", str(tmp_path / "one"))
    assert "ObjectiveBenchForMaskedLM" in done.stdout
    assert {"config.json", "model.safetensors", "tokenizer.json", "modeling_objective_bench.py"} <= \
        {p.name for p in (tmp_path / "one").iterdir()}
    bench("export", str(comparison), "--all", "--out", str(tmp_path / "all"))
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == ["ar-seed0", "mlm-seed0"]
    config = json.loads((tmp_path / "all" / "ar-seed0" / "config.json").read_text())
    assert config["objective_bench"]["objective"] == "ar"
    assert (tmp_path / "all" / "ar-seed0" / "model.safetensors").is_file()


@pytest.mark.slow
def test_positions_prints_the_counts_as_a_table_and_as_json():
    table = bench("positions", "--seq-len", "32", "--model", "tiny", "--vocab-size", "64").stdout
    assert "mlm" in table and "ar" in table
    rows = json.loads(bench("positions", "--seq-len", "32", "--model", "tiny", "--vocab-size", "64", "--json").stdout)
    assert {"mlm", "ar"} <= {row["objective"] for row in rows}


@pytest.mark.slow
def test_tune_writes_its_trials_report_and_picks(tmp_path):
    out = tmp_path / "tuning"
    bench("tune", *[flag for flag in TINY if flag != "--finetune-lrs" and flag != "1e-3"], "--objectives", "mlm",
          "--out", str(out))
    assert (out / "report.md").is_file() and (out / "trials").is_dir()
    results = json.loads((out / "results.json").read_text())
    assert results["objectives"]["mlm"]["picked"]["objective"] == "mlm" and results["setting"]["model"] == "tiny"


@pytest.mark.slow
def test_perf_with_the_comparison_steps_runs_as_docs_speed_shows_it():
    # docs/speed.md's `python -m bench.perf --comparison-steps 60`, at tiny shapes: it once ended in a NameError
    done = bench("perf", "--model", "tiny", "--seq-len", "16", "--batch-size", "2", "--vocab-size", "64",
                 "--repeats", "1", "--new-tokens", "2", "--comparison-steps", "1", "--json")
    names = [row["name"] for row in json.loads(done.stdout)]
    assert names[:4] == ["mlm", "ar", "electra", "span"] and sum("default comparison's shape" in n for n in names) == 3
