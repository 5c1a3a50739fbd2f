"""Build what the GPU experiment carries to a lent device (README: GPUs and clusters; scripts/gpu-experiment.sh):
a real-text corpus made offline from Debian documentation packages, its labelled tasks, a tokenizer trained on it,
and wheels of every package the device image lacks, together at most 64 MiB (what travels besides the git tree).

    python scripts/build_gpu_bundle.py --out build/gpu-bundle          # apt-get download + pip download: network
    python scripts/build_gpu_bundle.py --out DIR --from-extracted TREE --no-wheels   # offline, from extracted docs

The bundle is built, never committed: the documentation's licenses (each recorded in sources.json and copied to
licenses/) allow copying it, not this repository adopting it. The build is a function of the package versions it
names (apt and pip pin them in sources.json), so a fresh machine with the same Debian release gets the same files.

data.tar.xz holds data/ (the unpacked files stay in --work):

- data/corpus.jsonl: every source's HTML and text pages, markup stripped, one record per page ("text", "source"),
  paragraphs deduplicated across all sources (a paragraph seen twice is kept once, where it was first seen);
- data/source.jsonl: HELD_OUT paragraphs per source, removed from the corpus, labelled by their package: which
  documentation a passage comes from (the topic task of examples/docs_corpus.py's library.jsonl, on these sources);
- data/order.jsonl, data/continues.jsonl, data/replaced.conll: examples/docs_corpus.py's order, continuation and
  replaced-word tasks, made from the same held-out passages by the same functions;
- data/tokenizer.json: the suite's WordPiece (bench.data.text.train_tokenizer) trained on the corpus;
- data.tar.xz: data/ packed (what travels; scripts/gpu-experiment.sh unpacks it beside itself);
- wheels/: the missing packages' wheels for the device's Python (--python), pyarrow without the parts datasets
  never loads (Flight, S3, headers, tests), so that it fits;
- sources.json: each source package's version, license and counts, every carried file's size and sha256, the
  wheels, and the build's seconds.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html.parser
import importlib.util
import json
import random
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CARRY_LIMIT = 64 * 2**20  # bytes of ignored files that travel with the working tree to a lent device
# Debian 12's documentation, chosen for distinct subjects (the source task) and licenses that allow copying:
# the Python language and library (PSF), PostgreSQL (PostgreSQL licence), Git (GPL-2), Bash (GPL-3 / GFDL),
# the Debian Reference (GPL-2+) and SQLite (public domain)
PACKAGES = ("python3.11-doc", "postgresql-doc-15", "git-doc", "bash-doc", "debian-reference-en", "sqlite3-doc")
# where a copyright file is not machine-readable (no License: fields of its own), its license by name
LICENSES = {"python3.11-doc": "PSF-2.0 (the Python Software Foundation License), see licenses/"}
HELD_OUT = 600  # paragraphs per source kept out of the corpus for the tasks
TEXT_SUFFIXES = (".html", ".htm", ".txt", ".rst")
VOCAB_SIZE = 8192
# What the device image is taken to have already (torch and what its wheel pulls in, and the scientific stack a
# CUDA PyTorch image carries); an earlier lease found lightning-fabric, datasets and their dependencies missing.
DEVICE_HAS = {"torch", "filelock", "fsspec", "jinja2", "markupsafe", "mpmath", "networkx", "setuptools", "sympy",
              "typing-extensions", "numpy", "scipy", "matplotlib", "contourpy", "cycler", "fonttools", "kiwisolver",
              "pillow", "pyparsing", "python-dateutil", "scikit-learn", "joblib", "threadpoolctl", "packaging"}
# pyarrow's members datasets never loads on local files: dropped from its wheel (and its RECORD) to fit the carry
PYARROW_UNUSED = re.compile(r"^pyarrow/(include/|tests/|.*flight.*|.*_s3fs.*|libarrow_s3\.so.*|.*\.(pyx|pxd|pxi)$"
                            r"|.*_pyarrow_cpp_tests.*)")

spec = importlib.util.spec_from_file_location("docs_corpus", ROOT / "examples" / "docs_corpus.py")
docs_corpus = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs_corpus)


class Prose(html.parser.HTMLParser):
    """An HTML page's prose: text outside scripts, styles, code blocks and navigation, a blank line at every block
    element, so that docs_corpus.paragraphs cuts it where the page does."""
    SKIP = {"script", "style", "pre", "code", "nav", "head", "table"}
    BLOCKS = {"p", "div", "li", "dd", "dt", "h1", "h2", "h3", "h4", "h5", "h6", "section", "br", "tr", "blockquote"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        if tag in self.BLOCKS:
            self.parts.append("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skipping:
            self.skipping -= 1
        if tag in self.BLOCKS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data.replace("\n", " "))


def page_text(path: Path) -> str:
    raw = (gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()).decode(
        "utf-8", errors="replace")
    if kind(path) in (".html", ".htm"):
        parser = Prose()
        parser.feed(raw)
        return "".join(parser.parts)
    return raw


def kind(path: Path) -> str:
    """A page's format: its suffix, under .gz where it is compressed (bash-doc's manual)."""
    return Path(path.stem).suffix if path.suffix == ".gz" else path.suffix


def download(packages: tuple[str, ...], into: Path) -> dict[str, Path]:
    """Each package's .deb (apt-get download, no root), extracted with dpkg-deb -x; reused when already there."""
    into.mkdir(parents=True, exist_ok=True)
    trees = {}
    for package in packages:
        debs = sorted(into.glob(f"{package}_*.deb"))
        if not debs:
            done = subprocess.run(["apt-get", "download", package], cwd=into, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"apt-get download {package} failed: {done.stderr.strip().splitlines()[-1:]}")
            debs = sorted(into.glob(f"{package}_*.deb"))
        tree = into / package
        if not tree.exists():
            subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(tree)], check=True)
        trees[package] = tree
    return trees


def license_of(copyright_text: str) -> str:
    """The licenses a Debian copyright file names (its License: fields), in order, once each."""
    names = dict.fromkeys(m.strip() for m in re.findall(r"^License:\s*(.+)$", copyright_text, re.M))
    return ", ".join(names) or copyright_text.strip().splitlines()[0][:120]


def source_pages(package: str, tree: Path) -> tuple[list[list[str]], str, str]:
    """A package's pages as lists of paragraphs (in path order: the build is a function of the files), its
    copyright file and the version dpkg recorded (from the .deb name where extracted by hand)."""
    docs, share = tree / "usr" / "share" / "doc", tree / "usr" / "share"
    pages = []
    # not Sphinx's _sources/ (the pages' reST again, markup and all) nor _static/; links point at other packages
    # (under usr/share: the Debian Reference keeps its pages in usr/share/debian-reference)
    for path in sorted(p for p in share.rglob("*") if p.is_file() and kind(p) in TEXT_SUFFIXES
                       and not p.is_symlink() and not any(part.startswith("_") for part in p.relative_to(share).parts)):
        found = docs_corpus.paragraphs(page_text(path))
        if found:
            pages.append(found)
    own = docs / package / "copyright"
    copyright_file = own if own.is_file() else next(iter(sorted(docs.glob("*/copyright"))), None)
    if copyright_file is None:
        sys.exit(f"{package}: no usr/share/doc/*/copyright in the package; its license is unknown, so it is not used")
    return pages, copyright_file.read_text(errors="replace"), copyright_file.parent.name


def build_data(trees: dict[str, Path], out: Path, data: Path, held_out: int, vocab_size: int) -> dict:
    """corpus.jsonl, the tasks and the tokenizer into `data`, the licenses into out/licenses; what each source
    gave."""
    from bench.data.text import train_tokenizer

    data.mkdir(parents=True, exist_ok=True)
    (out / "licenses").mkdir(exist_ok=True)
    seen: set[str] = set()
    corpus, task, sources = [], [], {}
    for package, tree in trees.items():
        pages, copyright_text, doc_name = source_pages(package, tree)
        (out / "licenses" / f"{package}.copyright").write_text(copyright_text)
        kept_pages = []
        for paragraphs in pages:  # deduplicated across every source, first seen kept
            fresh = [p for p in paragraphs if p not in seen]
            seen.update(fresh)
            if fresh:
                kept_pages.append(fresh)
        # the held-out passages: every k-th paragraph, spread over the package's pages, none of them in the corpus
        flat = [p for page in kept_pages for p in page]
        step = max(1, len(flat) // held_out) if flat else 1
        chosen = set(flat[::step][:held_out])
        task += [{"text": p, "label": package} for p in flat[::step][:held_out]]
        pages_left = [[p for p in page if p not in chosen] for page in kept_pages]
        corpus += [{"text": "\n\n".join(page), "source": package} for page in pages_left if page]
        sources[package] = {"documentation": doc_name, "license": LICENSES.get(package) or license_of(copyright_text),
                            "pages": len(kept_pages), "paragraphs": len(flat), "held_out": len(chosen),
                            "words": sum(len(p.split()) for p in flat)}
    random.Random(0).shuffle(task)
    write_jsonl(data / "corpus.jsonl", corpus)
    write_jsonl(data / "source.jsonl", task)
    write_jsonl(data / "order.jsonl", docs_corpus.order_task([row["text"] for row in task]))
    write_jsonl(data / "continues.jsonl", docs_corpus.continues_task(task))
    docs_corpus.write_conll(data / "replaced.conll", docs_corpus.replaced_task([row["text"] for row in task]))
    # trained on the corpus's pages (the tasks' passages are not among them), once here rather than on the device
    tokenizer = train_tokenizer((row["text"] for row in corpus), vocab_size)
    (data / "tokenizer.json").write_text(tokenizer.to_str())
    return sources


def write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)


def pack_data(data: Path, out: Path) -> Path:
    """`data` as out/data.tar.xz (members data/NAME), in name order with fixed times and owners: the same bytes on
    every build."""
    target = out / "data.tar.xz"

    def fixed(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        return info

    with tarfile.open(target, "w:xz", preset=6) as tar:
        for path in sorted(data.rglob("*")):
            tar.add(path, arcname=str(Path("data") / path.relative_to(data)), recursive=False, filter=fixed)
    return target


def missing_packages(device_has: set[str]) -> list[str]:
    """name==version of the suite's dependencies (this environment's versions) the device image lacks."""
    from importlib import metadata

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    def requires(name: str) -> list[str]:
        found = []
        for requirement in metadata.distribution(name).requires or []:
            if ";" in requirement and "extra" in requirement.split(";", 1)[1]:
                continue
            found.append(norm(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)))
        return found

    needed, stack = set(), requires("objective-bench")
    while stack:
        name = stack.pop()
        if name in needed or name in device_has:
            continue
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:  # a dependency for other platforms or Pythons (tomli, colorama)
            continue
        needed.add(name)
        stack += requires(name)
    return sorted(f"{name}=={metadata.version(name)}" for name in needed)


def download_wheels(pins: list[str], python: str, into: Path) -> list[str]:
    """Binary wheels for the device (manylinux x86_64, CPython `python`); a package published only as source
    (seqeval) is built into a wheel here, pure Python. pyarrow is slimmed (PYARROW_UNUSED)."""
    into.mkdir(parents=True, exist_ok=True)
    platform = ["--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_17_x86_64", "--platform",
                "manylinux2014_x86_64"]
    for pin in pins:
        name = pin.split("==")[0]
        if any(name.replace("-", "_") == wheel.name.split("-")[0].lower() for wheel in into.glob("*.whl")):
            continue
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "--python-version", python, "--implementation", "cp", *platform, "-d", str(into), pin],
                              capture_output=True, text=True)
        if done.returncode != 0:
            built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into), pin],
                                   capture_output=True, text=True)
            if built.returncode != 0:
                sys.exit(f"no wheel for {pin}: {done.stderr.strip().splitlines()[-1:]}")
    for wheel in into.glob("pyarrow-*.whl"):
        slim(wheel)
    return sorted(wheel.name for wheel in into.glob("*.whl"))


def slim(wheel: Path) -> None:
    """pyarrow's wheel without PYARROW_UNUSED's members, its RECORD rewritten to match (pip checks the hashes of
    the files a RECORD lists); a wheel slimmed before is left as it is."""
    with zipfile.ZipFile(wheel) as source:
        if not any(PYARROW_UNUSED.match(name) for name in source.namelist()):
            return
    rewritten = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for info in source.infolist():
            if PYARROW_UNUSED.match(info.filename):
                continue
            data = source.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = [line for line in data.decode().splitlines() if not PYARROW_UNUSED.match(line.split(",")[0])]
                data = ("\n".join(lines) + "\n").encode()
            z.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
    rewritten.replace(wheel)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-bundle",
                        help="the bundle, exactly what is carried to the device (ignored by git): data.tar.xz, "
                             "wheels/, licenses/, sources.json")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "gpu-bundle-work",
                        help="the downloaded packages, their extracted trees and the unpacked data (not carried)")
    parser.add_argument("--packages", default=",".join(PACKAGES), help="Debian documentation packages, comma-separated")
    parser.add_argument("--from-extracted", type=Path, default=None,
                        help="a folder holding one extracted package tree per subfolder (PACKAGE/usr/share/doc/...) "
                             "instead of apt-get download: offline, as the tests build a bundle")
    parser.add_argument("--held-out", type=int, default=HELD_OUT, help="paragraphs per source held out for the tasks")
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE, help="the tokenizer's vocabulary")
    parser.add_argument("--python", default="3.12", help="the device's Python, MAJOR.MINOR, for its wheels")
    parser.add_argument("--device-has", default=",".join(sorted(DEVICE_HAS)),
                        help="packages the device image has already (no wheel carried), comma-separated")
    parser.add_argument("--no-wheels", action="store_true", help="build the data only (the tests, a CPU machine)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_extracted is not None:
        if not args.from_extracted.is_dir():
            sys.exit(f"--from-extracted {args.from_extracted}: no such folder")
        trees = {p.name: p for p in sorted(args.from_extracted.iterdir()) if p.is_dir()}
    else:
        trees = download(tuple(p for p in args.packages.split(",") if p), args.work / "debs")
    if (args.work / "data").exists():
        shutil.rmtree(args.work / "data")
    sources = build_data(trees, args.out, args.work / "data", args.held_out, args.vocab_size)
    packed = pack_data(args.work / "data", args.out)
    wheels, pins = [], []
    if not args.no_wheels:
        pins = missing_packages({p.strip().lower() for p in args.device_has.split(",")})
        wheels = download_wheels(pins, args.python, args.out / "wheels")
        (args.out / "wheels" / "requirements.txt").write_text("".join(f"{pin}\n" for pin in pins))
    carried = [packed, *sorted((args.out / "wheels").glob("*.whl")), *sorted((args.out / "licenses").glob("*"))]
    total = sum(path.stat().st_size for path in carried)
    manifest = {"sources": sources, "python": None if args.no_wheels else args.python, "wheels": wheels,
                "pins": pins, "files": {str(p.relative_to(args.out)): {"bytes": p.stat().st_size, "sha256": sha256(p)}
                                        for p in carried},
                "carried_bytes": total, "build_seconds": round(time.monotonic() - start, 1)}
    (args.out / "sources.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for package, facts in sources.items():
        print(f"{package}: {facts['pages']} pages, {facts['paragraphs']} paragraphs, {facts['words']:,} words, "
              f"{facts['held_out']} held out; license {facts['license'][:80]}")
    print(f"carried: {total / 2**20:.1f} MiB ({packed.stat().st_size / 2**20:.1f} MiB data, {len(wheels)} wheels) in "
          f"{manifest['build_seconds']:.0f} s -> {args.out}")
    if total > CARRY_LIMIT:
        biggest = sorted(carried, key=lambda p: -p.stat().st_size)[:3]
        sys.exit(f"the bundle is {total / 2**20:.1f} MiB, over the {CARRY_LIMIT // 2**20} MiB carry limit; largest: "
                 + ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB" for p in biggest))


if __name__ == "__main__":
    main()
