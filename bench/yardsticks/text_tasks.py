"""Tasks from text: local files (a folder's own splits or seeded ones), hub datasets (GLUE's fields and metrics), and
CoNLL token tagging.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import datasets
import torch

from backbone import ConfigError
from bench.data.text import file_kind, hub_reachable
from bench.yardsticks.examples import SPLIT_SEED, Task, TaskContext, TaskOptions, encode, encode_tagged
from bench.yardsticks.metrics import METRICS
from objectives import IGNORE

FORMATS = {".csv": "csv", ".tsv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
UNSCORED = "_"  # a CoNLL tag that leaves its token unscored (CoNLL-U's "unspecified"): read as context only
SPLIT_NAMES = {"train": ("train",), "dev": ("dev", "validation", "valid", "val"), "test": ("test",)}

# GLUE: (first text field, second or None, metrics; the task's score is their mean, as the GLUE leaderboard averages
# F1 and accuracy for MRPC and QQP), and the labelled split that stands in for the hidden test split.
GLUE = {
    "cola": ("sentence", None, ("mcc",), "validation"),
    "sst2": ("sentence", None, ("accuracy",), "validation"),
    "mrpc": ("sentence1", "sentence2", ("f1", "accuracy"), "validation"),
    "qqp": ("question1", "question2", ("f1", "accuracy"), "validation"),
    "mnli": ("premise", "hypothesis", ("accuracy",), "validation_matched"),
    "qnli": ("question", "sentence", ("accuracy",), "validation"),
    "rte": ("sentence1", "sentence2", ("accuracy",), "validation"),
    "wnli": ("sentence1", "sentence2", ("accuracy",), "validation"),
}

HUB_REPOS = {"glue": "nyu-mll/glue"}  # short names users type -> hub repositories (tests point these at folders)

# --- local files --------------------------------------------------------------------------------------------------

def _read(files: list[Path], where: str) -> datasets.Dataset:
    kind = file_kind(files, FORMATS, where)
    extra = {"delimiter": "\t"} if files[0].suffix == ".tsv" else {}
    try:
        return datasets.load_dataset(kind, data_files=[str(p) for p in files], split="train", **extra)
    except Exception as error:  # datasets wraps a parser's error in several ways; the first line says what broke
        cause = error.__cause__ or error
        message = str(cause).splitlines()[0][:200] if str(cause) else type(cause).__name__
        raise ConfigError(f"{where}: could not read it as {files[0].suffix[1:]}: {message}; check that the file is "
                          "what its extension says") from None


def _split_files(folder: Path) -> dict[str, list[Path]]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in FORMATS and not p.name.startswith("."))
    if not files:
        raise ConfigError(f"folder {folder} holds no {', '.join(FORMATS)} files")
    named = {split: [p for p in files if p.stem.lower().split("-")[0].split("_")[0] in names]
             for split, names in SPLIT_NAMES.items()}
    if named["train"]:
        return {split: paths for split, paths in named.items() if paths}
    return {"all": files}


def _share(value: str, default: float, key: str, spec: str) -> float | None:
    """A share option, or None when it names a file."""
    if not value:
        return default
    try:
        share = float(value)
    except ValueError:
        return None
    if not 0 < share < 1:
        raise ConfigError(f"{spec}: {key}={value} must be a share in (0, 1) or a file")
    return share


def file_task(spec: str, path_text: str, options: TaskOptions, context: TaskContext) -> Task:
    path = Path(path_text).expanduser()
    if not path.exists():
        raise ConfigError(f"{spec}: no such file or folder: {path}")
    parts = _split_files(path) if path.is_dir() else {"all": [path]}
    tables = {split: _read(files, str(path)) for split, files in parts.items()}
    for key in ("dev", "test"):
        value = getattr(options, key)
        if value and _share(value, 0, key, spec) is None:
            file = Path(value).expanduser()
            if not file.is_file():
                raise ConfigError(f"{spec}: {key}={value} is neither a share in (0, 1) nor an existing file")
            tables[key] = _read([file], str(file))
    pool = tables.pop("all", None)
    if pool is not None:
        tables["train"] = pool
    fields = [options.text] + ([options.text_pair] if options.text_pair else []) + [options.label]
    for split, table in tables.items():
        missing = [f for f in fields if f not in table.column_names]
        if missing:
            key = {options.text: "text", options.text_pair: "text_pair", options.label: "label"}[missing[0]]
            raise ConfigError(f"{spec}: the {split} examples have no {missing[0]!r} field (fields: "
                              f"{', '.join(table.column_names)}); name it with {key}=FIELD")
    described = f"{path}" + ("" if pool is None else " (one pool)")
    return text_task(spec, tables, options, context, described, default_metrics=("accuracy",))


# --- the hub --------------------------------------------------------------------------------------------------------

def hub_task(spec: str, name_text: str, options: TaskOptions, context: TaskContext) -> Task:
    name, _, config = name_text.partition(":")
    if not name:
        raise ConfigError(f"{spec}: hf: needs a dataset name, e.g. hf:glue:sst2")
    repo = HUB_REPOS.get(name, name)
    glue = GLUE.get(config) if name in ("glue", "nyu-mll/glue") else None
    if name in ("glue", "nyu-mll/glue") and glue is None:
        raise ConfigError(f"{spec}: GLUE task {config!r} is not supported (STS-B is a regression task); choose one "
                          f"of {', '.join(GLUE)}")
    if not Path(repo).exists() and not hub_reachable():
        raise ConfigError(f"{spec} needs the Hugging Face hub, which cannot be reached from here (offline?); "
                          "download the task elsewhere and pass its files as PATH")
    try:
        loaded = datasets.load_dataset(repo, config or None)
    except Exception as error:  # not found, no such config, a broken download: one line, the hub's own words
        raise ConfigError(f"{spec}: {str(error).splitlines()[0][:200]}") from None
    if glue:  # GLUE's own field names, unless the user named others
        text, pair, metrics, test_split = glue
        options = replace(options, text=text if options.text == TaskOptions.text else options.text,
                          text_pair=options.text_pair or (pair or ""))
        tables = {"train": loaded["train"], "test": loaded[test_split]}
    else:
        metrics = ("accuracy",)
        if "train" not in loaded:
            raise ConfigError(f"{spec} has no train split (splits: {', '.join(loaded)})")
        labelled = [s for s in ("test", "validation") if s in loaded
                    and options.label in loaded[s].column_names and min(loaded[s][options.label]) >= 0]
        tables = {"train": loaded["train"]}
        if labelled:
            tables["test"] = loaded[labelled[0]]
        if len(labelled) == 2:
            tables["dev"] = loaded["validation"]
    test_from = (f"its {glue[3]} split (GLUE's test labels are hidden)" if glue else
                 "drawn from train" if "test" not in tables else
                 f"its {'test' if tables['test'] is loaded.get('test') else 'validation'} split")
    return text_task(spec, tables, options, context, f"hub {repo}" + (f" ({config})" if config else "")
                     + f"; test: {test_from}", default_metrics=metrics)

# --- text tasks: labels, splits, tokens -----------------------------------------------------------------------------

def _label_names(table: datasets.Dataset, column: str) -> list[str] | None:
    feature = table.features.get(column)
    return list(feature.names) if isinstance(feature, datasets.ClassLabel) else None


def text_task(spec: str, tables: dict[str, datasets.Dataset], options: TaskOptions, context: TaskContext,
              source: str, default_metrics: tuple[str, ...]) -> Task:
    """Draw the missing held-out splits, map labels to ids (the training labels define the classes), tokenize."""
    names = _label_names(tables["train"], options.label)
    columns = {split: _column_values(table, options, names) for split, table in tables.items()}
    columns = _draw_splits(spec, columns, options)
    present = sorted({label for label in columns["train"][-1]}, key=_natural)
    if len(present) < 2:
        raise ConfigError(f"{spec}: every training example has the label {present[0]!r}; a task needs at least "
                          "2 classes (is label= the right field?)")
    # a dataset's own class names keep their order (GLUE's positive class is id 1); plain values are sorted
    label_names = names if names is not None else present
    index = {label: i for i, label in enumerate(label_names)}
    for split in ("dev", "test"):
        unseen = sorted({label for label in columns[split][-1]} - set(index), key=_natural)
        if unseen:
            raise ConfigError(f"{spec}: the {split} split has label {unseen[0]!r}, which never appears in training; "
                              "fix the label or give a training split that holds every class")
    if not any(text.strip() for text in columns["train"][0]):
        raise ConfigError(f"{spec}: every training text in the {options.text!r} field is empty; name the text field "
                          "with text=FIELD")
    splits = {split: encode(context, texts, pairs, torch.tensor([index[label] for label in labels]))
              for split, (texts, pairs, labels) in columns.items()}
    metrics = (options.metric,) if options.metric else default_metrics
    tagging = [name for name in metrics if METRICS[name].tagging_only]
    if tagging:
        raise ConfigError(f"{spec}: {tagging[0]} scores tagging tasks (conll:PATH), not classification")
    if len(label_names) > 2 and "f1" in metrics:
        raise ConfigError(f"{spec}: binary f1 needs 2 classes, this task has {len(label_names)}; use macro_f1")
    sizes = ", ".join(f"{split} {len(splits[split])}" for split in ("train", "dev", "test"))
    return Task(spec, "sequence", metrics, label_names, splits["train"], splits["dev"], splits["test"],
                f"{source}; {sizes}", pair=bool(options.text_pair))


def _natural(label: str) -> tuple:
    """Sort "2" before "10", and numbers before words."""
    try:
        return (0, float(label), "")
    except ValueError:
        return (1, 0.0, label)


def _column_values(table: datasets.Dataset, options: TaskOptions, names: list[str] | None) -> tuple[list, list, list]:
    texts = ["" if t is None else str(t) for t in table[options.text]]
    pairs = ["" if t is None else str(t) for t in table[options.text_pair]] if options.text_pair else None
    raw = table[options.label]
    labels = [names[v] if names is not None and isinstance(v, int) and 0 <= v < len(names) else str(v) for v in raw]
    keep = [i for i, value in enumerate(raw) if value is not None and not (names is not None and value == -1)]
    if len(keep) < len(raw):  # unlabelled rows (GLUE's -1, missing values) are no examples
        texts, labels = [texts[i] for i in keep], [labels[i] for i in keep]
        pairs = None if pairs is None else [pairs[i] for i in keep]
    return texts, pairs, labels


def _draw_splits(spec: str, columns: dict[str, tuple], options: TaskOptions) -> dict[str, tuple]:
    """Draw test (from all examples) and dev (from the rest) with a fixed seed where no file gives them; cap train."""
    generator = torch.Generator().manual_seed(SPLIT_SEED)

    def take(values: tuple, index: list[int]) -> tuple:
        return tuple(None if column is None else [column[i] for i in index] for column in values)

    for split, key, default in (("test", "test", 0.2), ("dev", "dev", 0.1)):
        if split in columns:
            continue
        train = columns["train"]
        count = len(train[0])
        share = _share(getattr(options, key), default, key, spec)
        held = max(1, round(share * count))
        if count - held < 2:
            raise ConfigError(f"{spec}: {count} training examples are too few to draw a {split} split from; give "
                              f"more examples or a {key}=FILE")
        order = torch.randperm(count, generator=generator).tolist()
        columns[split], columns["train"] = take(train, sorted(order[:held])), take(train, sorted(order[held:]))
    if options.train:
        columns["train"] = take(columns["train"], list(range(min(options.train, len(columns["train"][0])))))
    for split in ("train", "dev", "test"):
        if not columns[split][0]:
            raise ConfigError(f"{spec}: the {split} split holds no labelled example")
    return columns


# --- CoNLL tagging ----------------------------------------------------------------------------------------------------

def _read_conll(path: Path) -> list[tuple[list[str], list[str]]]:
    sentences, words, tags = [], [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; CoNLL files hold one token and its tag per line") from None
    for number, line in enumerate(lines, 1):
        columns = line.split()
        if not columns or columns[0] == "-DOCSTART-":
            if words:
                sentences.append((words, tags))
            words, tags = [], []
            continue
        if len(columns) < 2:
            raise ConfigError(f"{path}:{number}: {line.strip()!r} has no tag; CoNLL lines hold a token and its tag "
                              "(the last column), separated by whitespace")
        words.append(columns[0])
        tags.append(columns[-1])
    if words:
        sentences.append((words, tags))
    if not sentences:
        raise ConfigError(f"{path} holds no tagged token")
    return sentences


def conll_task(spec: str, path_text: str, options: TaskOptions, context: TaskContext) -> Task:
    if context.tokenizer is None:
        raise ConfigError(f"{spec}: tagging real text needs a text corpus and its tokenizer (--data text:...); on "
                          "--data synthetic use synthetic:tagging")
    path = Path(path_text).expanduser()
    if not path.exists():
        raise ConfigError(f"{spec}: no such file or folder: {path}")
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")) if path.is_dir() \
        else [path]
    named = {split: [p for p in files if any(p.name.lower().startswith(n) or f".{n}" in p.name.lower() or
                                            f"_{n}" in p.name.lower() or f"-{n}" in p.name.lower() for n in names)]
             for split, names in SPLIT_NAMES.items()}
    if named["train"] and named["test"]:
        sentences = {split: [s for p in paths for s in _read_conll(p)] for split, paths in named.items() if paths}
        source = f"{path} (train/dev/test files)"
    else:
        sentences = {"train": [s for p in files for s in _read_conll(p)]}
        source = f"{path} (one pool)"
    as_columns = {split: ([w for w, _ in rows], None, [t for _, t in rows]) for split, rows in sentences.items()}
    as_columns = _draw_splits(spec, as_columns, options)
    tags = sorted({tag for sentence_tags in as_columns["train"][2] for tag in sentence_tags} - {UNSCORED})
    if not tags:
        raise ConfigError(f"{spec}: every training token is {UNSCORED!r} (unscored); tagging needs tagged tokens")
    if len(tags) < 2:
        raise ConfigError(f"{spec}: every training token has the tag {tags[0]!r}; tagging needs at least 2 tags")
    index = {tag: i for i, tag in enumerate(tags)}
    for split in ("dev", "test"):
        unseen = sorted({t for sentence_tags in as_columns[split][2] for t in sentence_tags} - set(index) - {UNSCORED})
        if unseen:
            raise ConfigError(f"{spec}: the {split} split has tag {unseen[0]!r}, which never appears in training; "
                              "fix the tag or give a training split that holds every tag")
    bio = all(tag == "O" or tag[:2] in ("B-", "I-") for tag in tags)
    metrics = (options.metric,) if options.metric else (("span_f1",) if bio else ("accuracy",))
    if metrics == ("span_f1",) and not bio:
        raise ConfigError(f"{spec}: span_f1 needs BIO tags (O, B-X, I-X); these are not (e.g. {tags[0]!r})")
    index[UNSCORED] = IGNORE
    splits = {split: encode_tagged(context, words, [[index[t] for t in sentence_tags] for sentence_tags in tagged])
              for split, (words, _, tagged) in as_columns.items()}
    sizes = ", ".join(f"{split} {len(splits[split])} sentences" for split in ("train", "dev", "test"))
    return Task(spec, "token", metrics, tags, splits["train"], splits["dev"], splits["test"], f"{source}; {sizes}")
