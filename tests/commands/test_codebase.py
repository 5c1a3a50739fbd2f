"""The codebase's own hygiene: the vulture whitelist names only things that exist, and with it vulture finds no
unused function of ours; nothing cites a file outside the repository."""

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHITELIST = ROOT / "scripts" / "vulture_whitelist.py"


def test_the_vulture_whitelist_names_what_exists():
    runpy.run_path(str(WHITELIST))  # each line an attribute access: a renamed callback fails here


def test_vulture_finds_no_unused_function_of_ours():
    pytest.importorskip("vulture")
    found = subprocess.run([sys.executable, "-m", "vulture", "bench", "backbone", "objectives", str(WHITELIST),
                            "--min-confidence", "60"], cwd=ROOT, capture_output=True, text=True).stdout
    unused = [line for line in found.splitlines()
              if any(f"unused {kind} " in line for kind in ("function", "method", "property", "class", "import"))]
    assert unused == []


def test_nothing_cites_a_file_outside_the_repository():
    """A fact the code, tests or docs rest on is in the project with its source (docs/sources.md), not in a notes file
    beside the checkout that a reader of the repository does not have. The names are spelled in pieces so that this
    test does not find itself."""
    outside = ("ANCH" + "ORS", "../" + "shared/")
    found = [f"{path.relative_to(ROOT)}: {name}" for folder in ("bench", "tests", "docs")
             for path in sorted((ROOT / folder).rglob("*")) if path.suffix in (".py", ".md", ".json", ".txt")
             for name in outside if name in path.read_text(errors="replace")]
    assert found == []


def test_bench_never_dispatches_on_an_objective_name():
    """What an objective needs of the bench (its trials, floors, probes, head) it declares on its class; a comparison
    with a registered name in bench/ would treat one objective apart. bench/export/hf_model is the exported model's
    own code, run without the suite, whose config names its head."""
    import re

    from objectives import REGISTRY
    names = "|".join(REGISTRY)
    name = rf"""["']({names})["']"""
    compared = re.compile(rf"[=!]=\s*{name}|{name}\s*[=!]=|\bin\s*[(\[{{]\s*{name}")  # ==, != and `in (...)`
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in sorted((ROOT / "bench").rglob("*.py"))
             if "hf_model" not in path.parts
             for number, line in enumerate(path.read_text().splitlines(), 1) if compared.search(line)]
    assert found == []
