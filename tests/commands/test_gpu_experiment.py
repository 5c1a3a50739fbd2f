"""scripts/gpu-experiment.sh as a lent device runs it, but on the CPU (--dry-run: a tiny shape and budget), on a
bundle scripts/build_gpu_bundle.py builds offline from documentation trees made here: the same script, code path and
files, so that a lease is never spent on a typo; then a second lease with --resume adds to the same folder."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# end to end: each test runs the command, or builds the bundle it reads, as a subprocess (the first lease ~45 s)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SUBJECTS = {"alpha-doc": "database table query index row column transaction", "beta-doc":
            "shell variable command pipe script expansion quote", "gamma-doc": "commit branch merge tree tag remote"}
COMMON = "the a of to and is in it that for with as this can be on by an are".split()


def page(rng: random.Random, subject: list[str]) -> str:
    """An HTML page of prose paragraphs in the subject's words, with markup and a code block the build strips."""
    paragraphs = [" ".join(rng.choice(subject if rng.random() < 0.3 else COMMON) for _ in range(rng.randint(12, 40)))
                  + "." for _ in range(6)]
    return ("<html><head><style>p {}</style></head><body><h1>Title</h1>" + "".join(f"<p>{p}</p>" for p in paragraphs)
            + "<pre>code that is left out of the corpus entirely, every word of it</pre></body></html>")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    rng, trees = random.Random(0), tmp_path_factory.mktemp("trees")
    for package, words in SUBJECTS.items():
        docs = trees / package / "usr" / "share" / "doc" / package
        docs.mkdir(parents=True)
        (docs / "copyright").write_text(f"Files: *\nLicense: GPL-2+\n\nLicense: GPL-2+\n {package} text\n")
        for i in range(12):
            (docs / f"page{i}.html").write_text(page(rng, words.split()))
        (docs / "_sources").mkdir()
        (docs / "_sources" / "page0.txt").write_text("Sphinx's reST of a page: never read")
    out = tmp_path_factory.mktemp("built") / "bundle"
    subprocess.run([sys.executable, "scripts/build_gpu_bundle.py", "--out", str(out), "--work", str(out.parent / "work"),
                    "--from-extracted", str(trees),
                    "--no-wheels", "--held-out", "30", "--vocab-size", "120"], cwd=ROOT, check=True,
                   capture_output=True, text=True)
    return out


def test_the_bundle_holds_the_corpus_tasks_tokenizer_and_licenses(bundle):
    sources = json.loads((bundle / "sources.json").read_text())
    assert set(sources["sources"]) == set(SUBJECTS)
    assert all(facts["license"] == "GPL-2+" and facts["held_out"] == 30 for facts in sources["sources"].values())
    data = bundle.parent / "work" / "data"  # what data.tar.xz holds, unpacked
    assert sorted(path.name for path in bundle.iterdir()) == ["data.tar.xz", "licenses", "sources.json"]
    corpus = [json.loads(line) for line in (data / "corpus.jsonl").read_text().splitlines()]
    task = [json.loads(line) for line in (data / "source.jsonl").read_text().splitlines()]
    text = " ".join(row["text"] for row in corpus)
    assert "<p>" not in text and "code that is left out" not in text and "Sphinx" not in text
    assert not {row["text"] for row in task} & {p for row in corpus for p in row["text"].split("\n\n")}
    assert {row["label"] for row in task} == set(SUBJECTS)
    assert (bundle / "licenses" / "alpha-doc.copyright").is_file() and (bundle / "data.tar.xz").is_file()
    assert sources["carried_bytes"] < 64 * 2**20


def lease(bundle: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BUNDLE": str(bundle), "OUT": str(out), "PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
           "DATA": str(bundle.parent / "unpacked")}
    done = subprocess.run(["bash", "scripts/gpu-experiment.sh", "--dry-run", "--measure-seconds", "2", "--limit",
                           "300", "--target-seeds", "3", *flags], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def first_lease(bundle, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("lease")
    return out, lease(bundle, out, "--lease", "first")


def test_the_dry_run_measures_trains_evaluates_and_says_which_lease_made_each_run(first_lease):
    out, done = first_lease
    experiment = out / "gpu-experiment"
    leases = json.loads((experiment / "leases.json").read_text())
    assert leases[0]["exit"] == 0 and leases[0]["seeds"] == 2
    assert set(leases[0]["measured"]) == {"mlm", "ar", "electra"} and "budget point" in done.stdout
    point = experiment / leases[0]["point"]
    report = (point / "report.md").read_text()
    assert "## Devices and leases" in report and "| mlm-seed1 | first |" in report
    assert "| electra-seed0 | first |" in report and "discriminator_auc" in report  # ELECTRA's own task, on text
    assert not list(experiment.rglob("*.pt"))  # checkpoints stay behind: they would not travel back
    assert "[budget-" in (experiment / "report.md").read_text()


def test_a_second_lease_adds_seeds_to_the_same_point(bundle, first_lease, tmp_path):
    shutil.copytree(first_lease[0] / "gpu-experiment", tmp_path / "gpu-experiment")
    lease(bundle, tmp_path, "--lease", "second", "--resume")
    experiment = tmp_path / "gpu-experiment"
    leases = json.loads((experiment / "leases.json").read_text())
    point = experiment / leases[0]["point"]
    assert [lease["point"] for lease in leases] == [point.name] * 2 and leases[1]["seeds"] == 3
    assert leases[1]["finished"] and all("seed2" in run for run in leases[1]["finished"])
    report = (point / "report.md").read_text()
    assert "| mlm-seed2 | second |" in report and "| mlm-seed0 | first |" in report


def test_a_folder_of_an_earlier_experiment_needs_resume(bundle, tmp_path):
    (tmp_path / "gpu-experiment").mkdir()
    (tmp_path / "gpu-experiment" / "leases.json").write_text("[]")
    env = {**os.environ, "BUNDLE": str(bundle), "OUT": str(tmp_path), "PYTHON": sys.executable,
           "DATA": str(bundle.parent / "unpacked")}
    done = subprocess.run(["bash", "scripts/gpu-experiment.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        f"error: --out {tmp_path / 'gpu-experiment'} holds an earlier experiment: add --resume to continue it")


def test_the_plan_sets_the_hosts_feed_beside_the_devices_need_and_predicts_each_phase(bundle, first_lease, tmp_path):
    from bench.gpu_experiment import OBJECTIVES, main

    assert main(["--plan", str(tmp_path / "plan.md"), "--data", str(bundle.parent / "unpacked" / "data")]) == 0
    page = (tmp_path / "plan.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| ") and line.split(" | ")[0][2:] in OBJECTIVES]
    assert [row.split(" | ")[0][2:] for row in rows] == list(OBJECTIVES) and all(row.endswith("x |") for row in rows)
    assert "| training: mlm, ar, electra x 2 seeds |" in page and "The budget point it would choose" in page
