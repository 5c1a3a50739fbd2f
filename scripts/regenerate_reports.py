"""Regenerate every committed report (README: reports/) with the command it records, at this checkout's revision and
on this machine, so that they all come from one revision and one kind of processor (a CPU's last digits depend on
it: bench.orchestration.pipeline.cpu_model). Hours of CPU (the runs of the reports made at 43dbf32 took 29,000 s
together, most of them two at a time on 2 cores): run it in a clone of its own, then copy that clone's reports/ into the
checkout that commits them, leaving out the runs' checkpoints (*.pt).

    python scripts/regenerate_reports.py [--list] [NAME ...]     NAME: a folder under reports/ (default: every one)

Run it again after an interruption: a finished report whose pages record revisions with this checkout's code (no
difference outside reports/, so committing the reports keeps them) is kept, an unfinished one continues (--resume,
which its command then records), any other starts over. Which ones were begun here is kept under .git/, outside the
tree the reports' revision is read from.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = "/tmp/docs"  # examples/docs_corpus.py's output, where the docs reports' commands name it
DOCS_TASKS = f"{DOCS}/library.jsonl,{DOCS}/order.jsonl,{DOCS}/continues.jsonl,text_pair=text_pair"
PRESETS = ("bert-table8", "corruption-rate", "electra-efficiency", "electra-table5", "masking-units", "mlm-vs-clm",
           "nsp-sop", "seq-len-schedule", "static-vs-dynamic")
# span corruption's comparison runs at the rate its own tuning picked: read when its command is made, after
# reports/tuning-span is regenerated before it
SPAN_RATE = "SPAN_RATE"
# folder under reports/ -> its command's flags besides --out and --quiet (bench.compare's, but for the tunings'): the
# tuning first, since it writes the default's settings (bench/common/tuned.json): commit that before the others run
REPORTS: dict[str, list[str]] = {
    # ELECTRA's ladder to 4e12, 8x the default's budget: to 1e13 it is a third of the tuning's time
    "tuning": ["--write-defaults", "--ladder-max", "4e12"],
    "example": [],
    "tuning-span": ["--objectives", "span"],
    "span": ["--objectives", "span", "--lr", SPAN_RATE],
    "frontier": ["--objectives", "mlm,ar,electra,ar>mlm@0.25", "--budgets", "1e11,4e11,1.6e12", "--no-probe-curves"],
    **{f"presets/{name}": ["--preset", name] for name in PRESETS},
    "downstream-docs": ["--data", f"text:{DOCS}/corpus.jsonl", "--vocab-size", "2048", "--budget", "2e12",
                        "--downstream", f"{DOCS_TASKS},conll:{DOCS}/hidden,conll:{DOCS}/replaced.conll,"
                                        "copies=replaced_token"],
    "presets/mlm-vs-clm-docs": ["--preset", "mlm-vs-clm", "--data", f"text:{DOCS}/corpus.jsonl", "--vocab-size",
                                "2048", "--downstream", DOCS_TASKS],
}


REVISION = re.compile(r"^\| git revision +\| ([^ |]+)", re.MULTILINE)  # a report's setup table


def made_at(folder: Path) -> set[str]:
    """The revisions a report's pages record (a sweep's budgets and a preset's variants each have one)."""
    return {found for page in folder.rglob("report.md") for found in REVISION.findall(page.read_text())}


def with_this_code(revisions: set[str]) -> bool:
    """Whether there are revisions and each differs from HEAD only inside reports/ (an uncommitted one, recorded
    with a hash, or one this clone lacks, does not)."""
    return bool(revisions) and all(subprocess.run(["git", "diff", "--quiet", revision, "HEAD", "--", ".",
                                                   ":(exclude)reports"], cwd=ROOT, capture_output=True).returncode == 0
                                   for revision in revisions)


def command(name: str) -> list[str]:
    flags = [span_rate() if flag == SPAN_RATE else flag for flag in REPORTS[name]]
    return ["-m", "bench.tune" if name.startswith("tuning") else "bench.compare", *flags, "--out", f"reports/{name}",
            "--quiet"]


def span_rate() -> str:
    picked = json.loads((ROOT / "reports" / "tuning-span" / "results.json").read_text())["objectives"]["span"]["picked"]
    return f"{picked['lr']:g}"


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def regenerate(names: list[str]) -> None:
    if git("status", "--porcelain", "--", ".", ":(exclude)reports"):
        sys.exit("the checkout differs from its commit outside reports/: commit or stash first, or the reports "
                 "record an uncommitted revision")
    revision, state = git("rev-parse", "--short", "HEAD"), ROOT / git("rev-parse", "--git-dir") / "regenerate-reports"
    state.mkdir(exist_ok=True)
    if any(DOCS in " ".join(REPORTS[name]) for name in names):
        subprocess.run([sys.executable, "examples/docs_corpus.py", "--out", DOCS], cwd=ROOT, check=True)
    for name in names:
        folder, started = ROOT / "reports" / name, state / f"{name.replace('/', '--')}.started"
        revisions = made_at(folder) if (folder / "report.md").exists() else set()  # its last page: finished
        if with_this_code(revisions):
            print(f"reports/{name}: made with this code already ({', '.join(sorted(revisions))})", flush=True)
            continue
        resume = started.exists() and started.read_text() == revision
        if not resume:
            shutil.rmtree(folder, ignore_errors=True)
            started.write_text(revision)
        print(f"reports/{name}: python {shlex.join(command(name))}{' --resume' if resume else ''}", flush=True)
        subprocess.run([sys.executable, *command(name), *(["--resume"] if resume else [])], cwd=ROOT, check=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python scripts/regenerate_reports.py", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", metavar="NAME", help="folders under reports/ (default: every one, in "
                                                                 f"this order: {', '.join(REPORTS)})")
    parser.add_argument("--list", action="store_true", help="print each report's command and stop")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in REPORTS]
    if unknown:
        parser.error(f"no committed report {', '.join(unknown)}; choose from {', '.join(REPORTS)}")
    names = args.names or list(REPORTS)
    if args.list:
        print("\n".join(f"python {shlex.join(command(name))}" for name in names))
        return
    try:
        regenerate(names)
    except subprocess.CalledProcessError as error:
        sys.exit(f"stopped: python {shlex.join(error.cmd[1:])} exited with status {error.returncode}; run this "
                 "again to continue")
    except KeyboardInterrupt:  # the comparison got the same SIGINT and saved its runs
        sys.exit("interrupted; run this again to continue")


if __name__ == "__main__":
    main()
