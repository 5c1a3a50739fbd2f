"""scripts/regenerate_reports.py: a command for every committed report, the one the report records."""

import importlib.util
import shlex
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"


def script(name: str = "regenerate_reports"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed() -> list[str]:
    return sorted(str(page.parent.relative_to(REPORTS))
                  for page in [*REPORTS.glob("*/report.md"), *REPORTS.glob("presets/*/report.md")])


def test_every_committed_report_has_a_command():
    assert sorted(script().REPORTS) == committed()


@pytest.mark.parametrize("name", committed())
def test_each_command_is_the_one_its_report_records(name):
    # but for --resume (an interrupted regeneration adds it) and --jobs (one was made one run after another while
    # the pool could not carry its corpus; a regeneration gives every report the default's thread count)
    pages = [REPORTS / name / "report.md", *sorted((REPORTS / name).glob("*/report.md"))]  # a preset's variants
    line = next(line for page in pages for line in page.read_text().splitlines() if line.startswith("| command"))
    recorded = shlex.split(line.split("|")[2].strip().strip("`"))
    for flag, takes_value in (("--resume", False), ("--jobs", True)):
        if flag in recorded:
            at = recorded.index(flag)
            del recorded[at:at + 1 + takes_value]
    if name == "tuning" and "--out" not in recorded:  # bench.tune's default --out is reports/tuning
        recorded[-1:-1] = ["--out", "reports/tuning"]
    assert recorded == ["python", *script().command(name)]


def test_names_are_checked_and_listed(capsys):
    regenerate = script()
    regenerate.main(["--list", "tuning", "example", "frontier"])
    assert capsys.readouterr().out.splitlines() == [
        "python -m bench.tune --write-defaults --ladder-max 4e12 --out reports/tuning --quiet",
        "python -m bench.compare --out reports/example --quiet",
        "python -m bench.compare --objectives 'mlm,ar,electra,ar>mlm@0.25' --budgets 1e11,4e11,1.6e12 "
        "--no-probe-curves --out reports/frontier --quiet"]
    with pytest.raises(SystemExit) as exit_info:
        regenerate.main(["exmaple"])
    assert exit_info.value.code == 2 and ("no committed report exmaple; choose from tuning, example, tuning-span, "
                                          "span, frontier") in capsys.readouterr().err


def test_an_interrupted_regeneration_resumes_and_a_finished_report_is_kept(tmp_path, monkeypatch, capsys):
    regenerate, ran, failing = script(), [], [True]
    real_run = regenerate.subprocess.run

    def git(*args: str) -> None:
        real_run(["git", *args], cwd=tmp_path, check=True)

    def run(args, **kwargs):  # bench.compare's part recorded (its last flag) and answered; git's run for real
        if args[0] != regenerate.sys.executable:
            return real_run(args, **kwargs)
        ran.append(args[-1])
        if failing[0]:
            raise regenerate.subprocess.CalledProcessError(4, args)
        revision = real_run(["git", "rev-parse", "--short", "HEAD"], cwd=tmp_path, capture_output=True, text=True)
        (tmp_path / "reports" / "example" / "budget-1").mkdir(parents=True)
        for page in ("report.md", "budget-1/report.md"):  # a sweep's pages, each with its setup table
            (tmp_path / "reports" / "example" / page).write_text(f"| git revision        | {revision.stdout.strip()}"
                                                                  " |\n")

    for setting in (["init", "-q"], ["config", "user.email", "a@b"], ["config", "user.name", "a"]):
        git(*setting)
    (tmp_path / "reports" / "example").mkdir(parents=True)
    (tmp_path / "reports" / "example" / "report.md").write_text("| git revision        | 43dbf32 |\n")
    git("add", ".")
    git("commit", "-qm", "one")
    monkeypatch.setattr(regenerate, "ROOT", tmp_path)
    monkeypatch.setattr(regenerate.subprocess, "run", run)
    (tmp_path / "stray.py").write_text("")  # outside reports/: the reports would record an uncommitted revision
    with pytest.raises(SystemExit, match="commit or stash first"):
        regenerate.main(["example"])
    (tmp_path / "stray.py").unlink()
    with pytest.raises(SystemExit, match="^stopped: python -m bench.compare --out reports/example --quiet exited "
                                         "with status 4; run this again to continue$"):
        regenerate.main(["example"])
    assert ran == ["--quiet"] and not (tmp_path / "reports" / "example").exists()  # begun afresh
    failing[0] = False
    regenerate.main(["example"])  # the same revision: continued
    regenerate.main(["example"])  # finished: kept
    assert ran == ["--quiet", "--resume"] and "made with this code already" in capsys.readouterr().out
    git("add", "reports")
    git("commit", "-qm", "two: the report committed")
    shutil.rmtree(tmp_path / ".git" / "regenerate-reports")  # as on a fresh clone
    regenerate.main(["example"])  # made at "one", whose code "two" has: kept
    assert ran == ["--quiet", "--resume"]
    (tmp_path / "code.py").write_text("changed")
    git("add", "code.py")
    git("commit", "-qm", "three: the code changed")
    regenerate.main(["example"])  # made again
    assert ran == ["--quiet", "--resume", "--quiet"]


def test_the_rerender_check_tells_a_page_this_code_writes_from_one_it_would_not(tmp_path, capsys):
    import json

    from bench.analysis.results import load_results
    from bench.report.markdown import write_report
    from tests.helpers import GOLDEN

    check = script("rerender_reports").main
    page = write_report(tmp_path / "golden", load_results(json.loads(GOLDEN.read_text())))
    assert check([str(tmp_path)]) == 0 and "golden/report.md: same" in capsys.readouterr().out
    page.write_text(page.read_text().replace("## Verdict", "## The verdict"))  # as an edit by hand would
    assert check([str(tmp_path)]) == 1 and "golden/report.md: DIFFERS" in capsys.readouterr().out
    data = json.loads(page.with_name("results.json").read_text())
    page.with_name("results.json").write_text(json.dumps({**data, "schema": 1}))
    assert check([str(tmp_path)]) == 1 and "refused (results.json of schema 1" in capsys.readouterr().out
