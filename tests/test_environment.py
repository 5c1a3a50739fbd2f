from importlib import metadata

from bench.environment import KEY_PACKAGES, describe, package_versions, version_changes, version_note


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
