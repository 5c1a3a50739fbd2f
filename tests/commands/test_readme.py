"""The README is a page of recipes, held to its contract: short; the two quick-start commands verbatim; every flag it
mentions accepted by the command it is given to; every relative link in it and in docs/ pointing at a file that
exists; no measured number (those live in the reports it links to) and, in docs/ too, no wall time, no interval of a
measurement and no commit hash. No training: parsers are built, never run."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import shlex
from functools import cache
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINES = 300
# the quick-start contract: what a new user types first, and what CI (.ci/run) runs
QUICK_START = ("pip install -e . && python -m bench.compare", 'pip install -e ".[test]" && python -m pytest')

# the commands whose flags are checked, and where their parsers are built
BENCH_COMMANDS = {"bench.compare": "bench.compare", "bench.downstream": "bench.downstream",
                  "bench.positions": "bench.positions", "bench.perf": "bench.perf",
                  "bench.export": "bench.export.__main__", "bench.tune": "bench.tune",
                  "docs_corpus.py": ROOT / "examples" / "docs_corpus.py",
                  # scripts/gpu-experiment.sh passes its flags on to bench.gpu_experiment, whose command it is
                  "bench.gpu_experiment": "bench.gpu_experiment",
                  "build_gpu_bundle.py": ROOT / "scripts" / "build_gpu_bundle.py"}
SCRIPTS = {"docs_corpus.py": "docs_corpus.py", "gpu-experiment.sh": "bench.gpu_experiment",
           "build_gpu_bundle.py": "build_gpu_bundle.py"}  # a script a line runs -> the command whose flags it takes
# other programs a page may show; their flags are theirs, not the suite's, and are not checked
EXTERNAL = ("torchrun", "srun", "sbatch", "pip", "lm_eval", "bash", ".ci/run", "fabric", "python3", "pytest")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
MENTION = re.compile(r"bench\.(?:compare|downstream|positions|perf|export|tune|gpu_experiment)\b|docs_corpus\.py|"
                     r"build_gpu_bundle\.py|"
                     r"(?<![\w./-])(?:torchrun|srun|lm_eval)\b")
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


# --- reading a page ------------------------------------------------------------------------------------------------

def code_blocks(text: str) -> list[str]:
    return [block.split("\n", 1)[1].rsplit("```", 1)[0] for block in FENCE.findall(text)]


def prose(text: str) -> str:
    """The page without its fenced code blocks (each left as a blank line, so paragraphs stay apart)."""
    return FENCE.sub("\n", text)


def paragraphs(text: str) -> list[str]:
    return [part for part in re.split(r"\n[ \t]*\n", prose(text)) if part.strip()]


def command_lines(block: str) -> list[str]:
    """A shell block's commands: continuation lines joined, comments dropped, split at &&, ;, | and newlines."""
    joined = re.sub(r"\\\n", " ", block)
    lines = [re.sub(r"(^|\s)#.*$", "", line) for line in joined.splitlines()]
    return [part.strip() for line in lines for part in re.split(r"&&|;|\|", line) if part.strip()]


def split_words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:  # an unbalanced quote in prose: words are enough to find flags
        return command.split()


def command_of(words: list[str]) -> tuple[str | None, int]:
    """The suite's command a command line runs (`python -m bench.X`, under torchrun or srun too, or the docs corpus
    script) and the index of the word that names it; (None, -1) for anything else."""
    for index, word in enumerate(words):
        if word in BENCH_COMMANDS and index > 0 and words[index - 1] == "-m":
            return word, index
        for script, command in SCRIPTS.items():
            if word.endswith(script):
                return command, index
    return None, -1


def command_lines_of(text: str) -> list[tuple[str, list[str]]]:
    """(command, its arguments) for every line of a page's code blocks that runs one of the suite's commands."""
    found = []
    for block in code_blocks(text):
        for line in command_lines(block):
            words = split_words(line)
            command, at = command_of(words)
            if command is not None:
                found.append((command, words[at + 1:]))
    return found


def flag_uses(text: str) -> list[tuple[str, str]]:
    """(command, flag) for every flag a page mentions that belongs to one of the suite's commands.

    In a code block, a flag belongs to the command its line runs (a wrapper's own flags, torchrun's before `-m`, are
    the wrapper's). In prose, an inline code span that is a command line is read the same way; any other flag belongs
    to the command last named before it in its paragraph (`bench.perf`, `torchrun`, ...), else to bench.compare."""
    uses = [(command, flag) for command, arguments in command_lines_of(text) for word in arguments
            if word.startswith("--") for flag in FLAG.findall(word)]
    for paragraph in paragraphs(text):
        current: str | None = "bench.compare"
        for index, piece in enumerate(re.split(r"(`[^`]*`)", paragraph)):
            if index % 2:  # an inline code span
                span = piece.strip("`").strip()
                words = split_words(span)
                command, at = command_of(words)
                named = MENTION.findall(span)
                if command is not None:  # a command line: its flags are its command's
                    current = command
                    uses += [(command, flag) for word in words[at + 1:] if word.startswith("--")
                             for flag in FLAG.findall(word)]
                    continue
                if named:  # `bench.positions`, `bench.compare --quiet`, `torchrun ...`
                    current = named[-1] if named[-1] in BENCH_COMMANDS else None
                elif words and (words[0] in EXTERNAL or words[0].endswith(EXTERNAL)):
                    continue  # another program's command line: its flags are its own
                uses += [(current, flag) for flag in FLAG.findall(span) if current]
                continue
            for found in re.finditer(f"{MENTION.pattern}|{FLAG.pattern}", piece):
                word = found.group()
                if word.startswith("--"):
                    if current:
                        uses.append((current, word))
                else:
                    current = word if word in BENCH_COMMANDS else None  # torchrun, srun, lm_eval: not checked
    return uses


# --- the commands' parsers -----------------------------------------------------------------------------------------

class Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def parser_built_by(main) -> argparse.ArgumentParser:
    """The parser a `main` builds for itself, caught as it starts parsing (nothing after that runs)."""
    def capture(parser, *args, **kwargs):
        raise Captured(parser)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture):
        try:
            try:
                main([])
            except TypeError:  # a script's main() reads sys.argv itself
                main()
        except Captured as caught:
            return caught.parser
    raise AssertionError(f"{main} returned without parsing its arguments")


@cache
def parser_of(command: str) -> argparse.ArgumentParser:
    where = BENCH_COMMANDS[command]
    if isinstance(where, Path):
        spec = importlib.util.spec_from_file_location(where.stem, where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return module.build_parser() if hasattr(module, "build_parser") else parser_built_by(module.main)


def options(command: str) -> frozenset[str]:
    return frozenset(flag for action in parser_of(command)._actions for flag in action.option_strings)



# --- measured numbers ----------------------------------------------------------------------------------------------

# Numbers that are facts of the method, not measurements, and may stand in the README's prose even though the rule
# below would flag them. Each with its reason; add one here only with one.
METHOD_FACTS = {
    "3.10": "the oldest Python the suite supports (pyproject.toml's requires-python), a version",
    "76.8": "0.15 × 512, MLM's expected supervised positions at T = 512 under the Bernoulli rule (arithmetic)",
    "61.6": "0.8 × 77, the expected [MASK] positions of BERT's 80/10/10 split at T = 512 (arithmetic)",
    "1.31e11": "10^6 steps × 256 × 512, BERT's token positions (the paper's setup, arithmetic)",
    "4.26e10": "the token positions of BERT's sequence-length schedule (the paper's setup, arithmetic)",
    "61.44": "0.8 × 76.8, the expected [MASK] positions under the Bernoulli rule at T = 512 (arithmetic)",
    "7.68": "0.1 × 76.8, the expected random and kept positions under the Bernoulli rule at T = 512 (arithmetic)",
}


def paper_numbers() -> set[float]:
    """The published numbers the suite quotes, each with its source in docs/sources.md (tests/commands/test_presets.py
    holds the presets' to it): a page may quote them too, since they are the papers', not this suite's."""
    text = prose((ROOT / "docs" / "sources.md").read_text())
    return {float(number) for number in re.findall(r"(?<![\w.])\d*\.\d+(?:e[+-]?\d+)?|(?<![\w.])\d+e\d+", text)}


# What a pasted report, a benchmark line or a wall time looks like. The README links to reports; it never quotes them.
MEASURED = {
    "a decimal with 3 or more significant digits": re.compile(r"(?<![\w.])\d*\.\d+(?:e[+-]?\d+)?(?![\w.])"),
    "a count with thousands separators": re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\d])"),
    "a number ± its interval": re.compile(r"\d\s*±\s*[-+]?\d"),
    "a multiplier with its interval, as N× (lo–hi)": re.compile(r"\d\s*×\s*\("),
    "a wall time": re.compile(r"\b\d+(?:\.\d+)?\s*(?:h|hours?|min|minutes?|s|sec|seconds?)\b(?![-/])"),
    "a measured p-value (p = ...)": re.compile(r"\bp\s*=\s*\d?\.\d"),
}
COMMIT = re.compile(r"(?<![\w/#.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/.-])")


def significant_digits(number: str) -> int:
    mantissa = number.lower().split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa)


def measured_numbers(text: str, rules: tuple[str, ...], papers: frozenset[float] = frozenset(),
                     tables: bool = True) -> list[str]:
    """Every piece of prose (code blocks aside: commands and their flags are recipes) that one of the rules flags,
    but the method facts and the papers' numbers given."""
    found = []
    body = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", prose(text))  # a link's target is a path, not a number
    for name in rules:
        for match in MEASURED[name].finditer(body):
            value = match.group()
            if value in METHOD_FACTS:
                continue
            if name.startswith("a decimal") and (significant_digits(value) < 3 or float(value) in papers
                                                 or re.search(r"arXiv\s+$", body[:match.start()])):
                continue
            line = body[:match.start()].count("\n")
            found.append(f"{name}: {value!r} in {body.splitlines()[line].strip()!r}")
    for row in (line for line in body.splitlines() if line.lstrip().startswith("|") and tables):
        if re.search(r"\d\.\d", row):
            found.append(f"a table of decimals: {row.strip()!r}")
    return found


# --- the tests -----------------------------------------------------------------------------------------------------

def test_the_readme_is_a_page_of_recipes():
    lines = README.read_text().count("\n")
    assert lines < MAX_LINES, f"README.md has {lines} lines; depth belongs in docs/ (under {MAX_LINES})"


@pytest.mark.parametrize("command", QUICK_START)
def test_the_quick_start_commands_stand_verbatim(command):
    assert any(command in line for block in code_blocks(README.read_text()) for line in block.splitlines()), \
        f"the quick-start command {command!r} is not in a code block of README.md"


def test_ci_runs_the_readme_test_command():
    assert QUICK_START[1] in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.name)
def test_every_flag_exists_in_the_command_it_is_given_to(page):
    uses = flag_uses(page.read_text())
    unknown = sorted({f"{command} {flag}" for command, flag in uses if flag not in options(command)})
    assert not unknown, f"{page.name} mentions flags its commands do not have: {unknown}"


def test_the_readme_names_flags_of_every_command_it_shows():
    """The reading of a page above finds what it must: a guard against a parser of pages that checks nothing."""
    commands = {command for command, _ in flag_uses(README.read_text())}
    assert {"bench.compare", "bench.positions", "bench.export", "bench.downstream", "docs_corpus.py"} <= commands


def test_the_flag_reader_attributes_flags_to_their_command():
    text = ("```bash\ntorchrun --nnodes 2 -m bench.compare --seeds 3 \\\n    --budget 1e12  # a comment --nope\n"
            "pip install -e . && python -m bench.positions --seq-len 512\n```\n\n"
            "`python -m bench.perf` times a step (`--repeats`); `bench.compare --quiet` and `--resume`.\n\n"
            "Under torchrun start with `--signals-to-handle SIGTERM`. `.ci/run --oldest`\n\nBare `--out`.\n")
    assert sorted(flag_uses(text)) == sorted([
        ("bench.compare", "--seeds"), ("bench.compare", "--budget"), ("bench.positions", "--seq-len"),
        ("bench.perf", "--repeats"), ("bench.compare", "--quiet"), ("bench.compare", "--resume"),
        ("bench.compare", "--out")])


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.name)
def test_every_command_line_parses(page):
    """Each command a page shows is accepted by its command's parser as written: flags, values and their types
    (nothing runs: argparse only reads the words)."""
    refused = []
    for command, arguments in command_lines_of(page.read_text()):
        if "--help" in arguments:
            continue
        try:
            parser_of(command).parse_args(arguments)
        except SystemExit:
            refused.append(f"{command} {' '.join(arguments)}")
    assert not refused, f"{page.name} shows command lines their parsers refuse: {refused}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.name)
def test_every_relative_link_points_at_a_file(page):
    missing = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a web address, or an anchor in the page itself
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{page.name} links to files that do not exist: {missing}"


def test_every_preset_the_readme_runs_or_lists_exists():
    from bench.analysis.presets import PRESETS

    text = README.read_text()
    named = set(re.findall(r"--preset\s+([a-z0-9-]+)", text)) - {"list"}
    assert named <= set(PRESETS), f"README.md runs presets that do not exist: {sorted(named - set(PRESETS))}"
    listed = set(re.findall(r"^- `([a-z0-9-]+)`:", text.split("## Presets", 1)[1].split("\n## ", 1)[0], re.M))
    assert listed == set(PRESETS), f"README.md's preset list differs from the presets: {sorted(listed ^ set(PRESETS))}"


def test_every_python_recipe_of_the_readme_runs(monkeypatch, capsys):
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)
    assert blocks, "README.md shows no Python recipe"
    monkeypatch.chdir(ROOT)  # its paths are the repository's
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_the_readme_quotes_no_measured_number():
    found = measured_numbers(README.read_text(), tuple(MEASURED))
    assert not found, "README.md quotes measured numbers; link to the report instead:\n" + "\n".join(found)


@pytest.mark.parametrize("page", DOCS, ids=lambda page: page.name)
def test_the_docs_quote_no_measurement(page):
    # docs/ may hold tables of settings (default.md's language): a table is not flagged as such there, its numbers are
    found = measured_numbers(page.read_text(), tuple(MEASURED), frozenset(paper_numbers()), tables=False)
    assert not found, f"{page.name} quotes measurements; link to the report instead:\n" + "\n".join(found)


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda page: page.name)
def test_no_page_names_a_commit(page):
    hashes = COMMIT.findall(prose(page.read_text()))
    assert not hashes, f"{page.name} names commits {hashes}: a page describes the code, not its history"


@pytest.mark.parametrize("text, flagged", [
    ("the default took 4 min 35 s on 2 cores", True),
    ("electra 0.826 against mlm 0.818", True),
    ("mean 0.85 ± 0.04", True),
    ("AR needs 0.52× (0.45–0.75) of the compute", True),
    ("MLM leads (p = 0.011)", True),
    ("3,606 tokens/s", True),
    ("| mlm | 0.85 | 0.91 |", True),
    ("5 seeds, 5e11 FLOPs, T = 64, 15 % masked, Holm p < 0.05, 2 layers", False),
    ("0.15 × 512 = 76.8 positions", False),
    ("```\n0.826 ± 0.063 in 4 min 35 s\n```", False),
])
def test_the_measured_number_rule(text, flagged):
    assert bool(measured_numbers(text, tuple(MEASURED))) == flagged
