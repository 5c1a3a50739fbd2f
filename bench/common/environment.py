"""What a comparison ran on: the versions of the packages its numbers depend on, recorded in config.json and the
report, and compared when a folder is rerun (--config) or continued (--resume).

A comparison's numbers can move with the torch version (kernels, reduction orders), and its data with datasets and
tokenizers, so a rerun on other versions is allowed but says so: one warning line, and the report names the
versions of both. `pip install -e . -c constraints.txt` installs those the committed reports were
made with."""

from __future__ import annotations

import functools
import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path

# The packages whose versions can move a comparison's numbers: the model and its kernels, the training loop, the
# data pipeline and tokenizer, and the statistics and metrics computed from the runs.
KEY_PACKAGES = ("torch", "lightning-fabric", "datasets", "tokenizers", "numpy", "scipy", "scikit-learn")


def package_versions() -> dict[str, str]:
    """python and each key package's installed version, in a fixed order ("not installed" for a missing one)."""
    versions = {"python": platform.python_version()}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def describe(versions: dict[str, str]) -> str:
    """'python 3.11.7, torch 2.13.0+cpu, ...' for a report's setup."""
    return ", ".join(f"{name} {version}" for name, version in versions.items())


def version_changes(recorded: dict[str, str], current: dict[str, str]) -> list[str]:
    """'torch 2.13.0+cpu → 2.14.1' for each package whose version differs from the recorded one."""
    return [f"{name} {recorded.get(name, 'unrecorded')} → {version}" for name, version in current.items()
            if recorded.get(name) != version]


def version_note(folder: object, recorded: dict[str, str] | None, current: dict[str, str]) -> str | None:
    """What --config and --resume say (one warning line) and the report repeats when this run's versions differ
    from those `folder` recorded, or when it recorded none; None when they agree."""
    if recorded is None:
        changes = f"it recorded none; this run has {describe(current)}"
    else:
        changes = "; ".join(version_changes(recorded, current))
        if not changes:
            return None
    return (f"{folder} was made with other package versions ({changes}), so numbers may differ in the last digits; "
            "`pip install -e . -c constraints.txt` installs the committed reports' versions")


@functools.lru_cache(maxsize=None)
def code_revision(where: Path = Path(__file__).parent) -> str:
    """The code a run is trained with: the git commit, and where the working tree differs from it outside reports/
    (regenerating a committed report rewrites tracked files, which is not a code change), a hash of that difference
    and of the untracked files, so that two uncommitted states never pass for one; "unknown" outside a git checkout.
    Read once per process: the modules are loaded once too."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=30).stdout
    try:
        revision = git("rev-parse", "--short", "HEAD").strip()
        if not revision:
            return "unknown"
        digest, outside = hashlib.sha256(), ("--", ":(top,exclude)reports")
        difference = git("diff", "HEAD", *outside)
        digest.update(difference.encode())
        top = Path(git("rev-parse", "--show-toplevel").strip())
        untracked = git("ls-files", "--others", "--exclude-standard", "--full-name", *outside).split()
        for name in sorted(untracked):  # new files count too: a module not yet committed is code
            digest.update(name.encode() + (top / name).read_bytes())
        dirty = difference or untracked
        return revision + (f"+dirty.{digest.hexdigest()[:8]}" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
