from importlib import metadata

from bench.common.environment import KEY_PACKAGES, describe, package_versions, version_changes, version_note


def test_the_key_packages_versions_are_those_installed():
    versions = package_versions()
    assert list(versions) == ["python", *KEY_PACKAGES]
    assert versions["torch"] == metadata.version("torch") and versions["numpy"] == metadata.version("numpy")
    assert describe({"python": "3.11.7", "torch": "2.13.0+cpu"}) == "python 3.11.7, torch 2.13.0+cpu"


def test_a_note_names_each_package_whose_version_differs():
    recorded = {"python": "3.11.7", "torch": "2.13.0+cpu", "numpy": "2.4.6"}
    current = {"python": "3.11.7", "torch": "2.14.1", "numpy": "2.4.6", "scipy": "1.17.1"}
    assert version_changes(recorded, current) == ["torch 2.13.0+cpu → 2.14.1", "scipy unrecorded → 1.17.1"]
    note = version_note("reports/example", recorded, current)
    assert note.startswith("reports/example was made with other package versions (torch 2.13.0+cpu → 2.14.1; "
                           "scipy unrecorded → 1.17.1)") and "constraints.txt" in note and "\n" not in note
    assert version_note("reports/example", current, current) is None
    assert "it recorded none; this run has python 3.11.7, torch 2.14.1" in version_note("old", None, current)


def test_the_code_revision_names_every_uncommitted_state_apart_but_not_a_regenerated_report(tmp_path):
    import subprocess

    from bench.common.environment import code_revision
    repository = tmp_path / "repository"
    (repository / "bench").mkdir(parents=True)
    (repository / "reports").mkdir()
    for path in ("bench/compare.py", "reports/report.md"):
        (repository / path).write_text("first\n")
    git = lambda *args: subprocess.run(["git", "-C", str(repository), *args], check=True,  # noqa: E731
                                       capture_output=True)
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "files")
    here = repository / "bench"
    revision = lambda: code_revision.__wrapped__(here)  # noqa: E731  (uncached: the tree changes in between)
    clean = revision()
    assert len(clean) >= 7 and "+dirty" not in clean
    (repository / "reports" / "report.md").write_text("regenerated\n")
    assert revision() == clean
    (repository / "bench" / "compare.py").write_text("changed\n")
    changed = revision()
    assert changed.startswith(clean + "+dirty.")
    (repository / "bench" / "compare.py").write_text("changed again\n")
    assert revision() not in (clean, changed)
    (repository / "bench" / "compare.py").write_text("first\n")
    (repository / "bench" / "new.py").write_text("a module not yet committed\n")
    assert revision().startswith(clean + "+dirty.")
    assert code_revision.__wrapped__(tmp_path) == "unknown"
