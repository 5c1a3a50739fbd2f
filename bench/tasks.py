"""Labelled downstream tasks as padded token windows: one code path for local files, the hub, CoNLL tagging and the
embedded language's own tasks.

    --downstream "reviews.csv,label=sentiment, hf:glue:mrpc, conll:ner/, synthetic:component"

A SPEC is a source and then KEY=VALUE options; in a list, a piece with "=" and no ":" continues the previous spec
(as in --objectives):
- PATH or file:PATH: a .csv/.tsv/.jsonl/.json/.parquet file, or a folder of them, read with `datasets`. A folder
  whose files are named train.*, dev.* (or validation.*) and test.* gives its own splits; otherwise test and dev are
  drawn from the examples with a fixed seed (shares `test`, `dev`).
- hf:NAME[:CONFIG]: a Hugging Face hub dataset (the network is needed to download it). GLUE tasks (hf:glue:sst2,
  hf:glue:mnli, ...) know their fields and metric; since GLUE hides its test labels, the labelled validation split
  is the test split and dev is drawn from train.
- conll:PATH: token tagging from CoNLL-style files (the token first and its tag last on each line, a blank line
  between sentences), scored by span F1 when the tags are BIO, else by accuracy.
- synthetic:tagging|component|order|same-source: the embedded language's tasks, sampled afresh from the true
  distribution (they need --data synthetic): hidden-state tagging, mixture-component classification, whether two
  halves are in their original order (SOP), whether two halves come from the same sequence (NSP); the pairs are made
  as mlm:pair=sop and mlm:pair=nsp make theirs, from windows in the middle of a sequence (times T .. 2T − 1).

Every text is tokenized with the comparison's own tokenizer and ends with [EOS] like a pretraining document; a pair
is "a [EOS] b [EOS]". Examples are truncated to the window and padded with [PAD] after their last token. Every user
mistake is a ConfigError naming the file and the fix, raised before anything is written.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import datasets
import torch
from tokenizers import Tokenizer
from torch import Tensor

from backbone import ConfigError
from bench import synthetic
from bench.data import file_kind, hub_reachable, quiet_datasets
from bench.seeds import derive_seed
from objectives import IGNORE, Vocab, parse_options, split_specs
from objectives.pairs import Pairs, make_pairs, pair_layout

FORMATS = {".csv": "csv", ".tsv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
SPLIT_NAMES = {"train": ("train",), "dev": ("dev", "validation", "valid", "val"), "test": ("test",)}
SPLIT_SEED = 0
SYNTHETIC_TASKS = ("tagging", "component", "order", "same-source")
PAIR_TASK_OF = {"order": "sop", "same-source": "nsp"}  # the embedded pair tasks ask what these objectives train on
PAIR_POSTERIORS = {"order": synthetic.order_posterior, "same-source": synthetic.same_source_posterior}
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
METRICS = ("accuracy", "f1", "macro_f1", "mcc", "span_f1")


@dataclass(frozen=True)
class TaskOptions:
    text: str = "text"  # field of the (first) text
    text_pair: str = ""  # field of the second text of a pair task; empty: single texts
    label: str = "label"
    dev: str = ""  # a file, or the share of train drawn as dev (default 0.1)
    test: str = ""  # a file, or the share of the examples drawn as test (default 0.2)
    metric: str = ""  # accuracy, f1 (binary: class id 1 is positive), macro_f1, mcc, span_f1
    train: int = 0  # keep at most this many training examples (0: all)
    size: int = 1024  # synthetic tasks: training examples (dev a quarter of it, test half)


@dataclass
class Split:
    tokens: Tensor  # (N, T) int64, [PAD] after each example's last token
    lengths: Tensor  # (N,) tokens before the padding
    labels: Tensor  # (N,) class ids, or (N, T) for tagging with IGNORE where nothing is scored

    def __len__(self) -> int:
        return len(self.tokens)

    def rows(self, index: Tensor | slice) -> "Split":
        return Split(self.tokens[index], self.lengths[index], self.labels[index])


@dataclass
class Task:
    name: str  # the spec as given
    level: str  # "sequence" (one label per example) or "token" (one per word)
    metrics: tuple[str, ...]  # computed on the test split; the task's score is their mean
    label_names: list[str]
    train: Split
    dev: Split
    test: Split
    source: str  # where the examples and splits came from, for the report
    pair: bool = False
    first_position: bool = False  # "[BOS] a [EOS] b [EOS]" pairs: bidirectional backbones read them at [BOS]
    # the embedded language's tasks: the Bayes classifier's expected accuracy on the test split, by exact inference in
    # the language that generated it (no model can beat it in expectation); None where the truth is unknown
    bayes_ceiling: float | None = None

    @property
    def classes(self) -> int:
        return len(self.label_names)

    @property
    def seed(self) -> int:
        """Fine-tuning batches of this task are drawn from it: the same for every objective, seed and rate."""
        return derive_seed(SPLIT_SEED, zlib.crc32(self.name.encode()))

    def majority_accuracy(self) -> float:
        """The trivial baseline: always answer the most frequent training label, scored on the test split."""
        train, test = (split.labels[split.labels != IGNORE] for split in (self.train, self.test))
        return (test == train.bincount(minlength=self.classes).argmax()).double().mean().item()

    def describe(self) -> dict:
        return {"task": self.name, "level": self.level, "metric": " & ".join(self.metrics), "classes": self.classes,
                "train": len(self.train), "dev": len(self.dev), "test": len(self.test), "source": self.source,
                "majority_accuracy": self.majority_accuracy(), "bayes_ceiling": self.bayes_ceiling}


@dataclass
class TaskContext:
    """What tasks are tokenized with: the comparison's window, vocabulary, and tokenizer or embedded language."""

    seq_len: int
    vocab: Vocab
    tokenizer: Tokenizer | None = None
    language: synthetic.Language | None = None
    spell: Callable[[int], str] | None = None  # synthetic:text: words are spelled, then tokenized with `tokenizer`


def parse_task_list(text: str) -> list[str]:
    """Split "a.csv,label=y,hf:glue:sst2" into specs, as --objectives is split (objectives.split_specs)."""
    specs = split_specs(text)
    if not specs:
        raise ConfigError("--downstream names no task")
    return specs


def load_task(spec: str, context: TaskContext) -> Task:
    """A spec -> Task with train/dev/test splits; every user mistake raises ConfigError."""
    source, _, option_text = spec.partition(",")
    options = parse_options(f"task {source}", option_text, TaskOptions)
    if options.metric and options.metric not in METRICS:
        raise ConfigError(f"{spec}: unknown metric {options.metric!r}; choose one of {', '.join(METRICS)}")
    scheme, _, rest = source.partition(":")
    if scheme == "synthetic":
        return synthetic_task(spec, rest, options, context)
    if scheme == "conll":
        return conll_task(spec, rest, options, context)
    if context.tokenizer is None:
        raise ConfigError(f"{spec}: text tasks need a text corpus and its tokenizer (--data text:..., hf:... or "
                          "synthetic:text); on --data synthetic use synthetic:" + "|".join(SYNTHETIC_TASKS))
    if scheme == "hf":
        return hub_task(spec, rest, options, context)
    return file_task(spec, rest if scheme == "file" else source, options, context)


def load_tasks(specs: list[str], context: TaskContext) -> list[Task]:
    with quiet_datasets():  # labelled sets are small: a progress bar would only bury a one-line error
        tasks = [load_task(spec, context) for spec in specs]
    names = [task.name for task in tasks]
    if len(set(names)) != len(names):
        raise ConfigError(f"a task is listed twice in --downstream ({', '.join(names)})")
    return tasks


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
    splits = {split: _encode(context, texts, pairs, torch.tensor([index[label] for label in labels]))
              for split, (texts, pairs, labels) in columns.items()}
    metrics = (options.metric,) if options.metric else default_metrics
    if "span_f1" in metrics:
        raise ConfigError(f"{spec}: span_f1 scores tagging tasks (conll:PATH), not classification")
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


def _encode(context: TaskContext, texts: list[str], pairs: list[str] | None, labels: Tensor) -> Split:
    """Tokenize; a single text is "a [EOS]", a pair "a [EOS] b [EOS]", the longer side truncated first."""
    tokenizer, window, eos = context.tokenizer, context.seq_len, Vocab.EOS
    first = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    second = [e.ids for e in tokenizer.encode_batch(pairs, add_special_tokens=False)] if pairs is not None else None
    rows = []
    for i, a in enumerate(first):
        if second is None:
            rows.append(a[:window - 1] + [eos])
            continue
        b = second[i]
        room = window - 2
        keep_a = min(len(a), max(room // 2, room - len(b)))
        keep_b = min(len(b), room - keep_a)
        rows.append(a[:keep_a] + [eos] + b[:keep_b] + [eos])
    return _pad(rows, labels, window)


def _pad(rows: list[list[int]], labels: Tensor, window: int) -> Split:
    tokens = torch.full((len(rows), window), Vocab.PAD, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, :len(row)] = torch.tensor(row, dtype=torch.long)
    return Split(tokens, torch.tensor([len(row) for row in rows], dtype=torch.long), labels)


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
    tags = sorted({tag for sentence_tags in as_columns["train"][2] for tag in sentence_tags})
    if len(tags) < 2:
        raise ConfigError(f"{spec}: every training token has the tag {tags[0]!r}; tagging needs at least 2 tags")
    index = {tag: i for i, tag in enumerate(tags)}
    for split in ("dev", "test"):
        unseen = sorted({t for sentence_tags in as_columns[split][2] for t in sentence_tags} - set(index))
        if unseen:
            raise ConfigError(f"{spec}: the {split} split has tag {unseen[0]!r}, which never appears in training; "
                              "fix the tag or give a training split that holds every tag")
    bio = all(tag == "O" or tag[:2] in ("B-", "I-") for tag in tags)
    metrics = (options.metric,) if options.metric else (("span_f1",) if bio else ("accuracy",))
    if metrics == ("span_f1",) and not bio:
        raise ConfigError(f"{spec}: span_f1 needs BIO tags (O, B-X, I-X); these are not (e.g. {tags[0]!r})")
    splits = {split: _encode_tagged(context, words, [[index[t] for t in sentence_tags] for sentence_tags in tagged])
              for split, (words, _, tagged) in as_columns.items()}
    sizes = ", ".join(f"{split} {len(splits[split])} sentences" for split in ("train", "dev", "test"))
    return Task(spec, "token", metrics, tags, splits["train"], splits["dev"], splits["test"], f"{source}; {sizes}")


def _encode_tagged(context: TaskContext, sentences: list[list[str]], tags: list[list[int]]) -> Split:
    """Each word's first piece carries its tag (the rest are not scored, as in BERT's NER); truncated to the window."""
    window = context.seq_len
    encodings = context.tokenizer.encode_batch(sentences, is_pretokenized=True, add_special_tokens=False)
    rows, labels = [], torch.full((len(sentences), window), IGNORE, dtype=torch.long)
    for i, encoding in enumerate(encodings):
        ids, seen = encoding.ids[:window - 1], set()
        for position, word in enumerate(encoding.word_ids[:window - 1]):
            if word is not None and word not in seen:
                seen.add(word)
                labels[i, position] = tags[i][word]
        rows.append(ids + [Vocab.EOS])
    return _pad(rows, labels, window)


# --- the embedded language's tasks ------------------------------------------------------------------------------------

def synthetic_task(spec: str, name: str, options: TaskOptions, context: TaskContext) -> Task:
    if name not in SYNTHETIC_TASKS:
        raise ConfigError(f"{spec}: unknown embedded task {name!r}; choose one of {', '.join(SYNTHETIC_TASKS)}")
    if context.language is None:
        raise ConfigError(f"{spec}: the embedded language's tasks need --data synthetic or synthetic:text")
    if context.spell is not None and name in PAIR_TASK_OF:
        raise ConfigError(f"{spec}: the pair tasks need --data synthetic (their Bayes ceiling reads the words as "
                          "tokens); on synthetic:text use synthetic:tagging or synthetic:component")
    if options.size < 8:
        raise ConfigError(f"{spec}: size={options.size} is too small; use 8 or more")
    language, window, first = context.language, context.seq_len, context.vocab.first_ordinary
    K, S, _ = language.emission.shape
    sizes = {"train": options.size, "dev": max(2, options.size // 4), "test": max(2, options.size // 2)}
    splits, ceiling = {}, None
    for number, (split, count) in enumerate(sizes.items()):
        # seeds of their own: never the corpus's samples (seeds 2·seed and 2·seed + 1 of the small integers)
        seed = derive_seed(1 + SYNTHETIC_TASKS.index(name), number)
        # Pairs are cut from the middle of a sequence: a window that opens one starts with words that say so (the
        # chain's first states), a cue a swapped pair breaks and any encoder reads next to [BOS]; with it the order
        # task rewarded every model for the window's start rather than for the order of its segments.
        start = window if name in PAIR_TASK_OF else 0
        drawn = synthetic.sample(language, count, start + window, seed)
        tokens, lengths = drawn.words[:, start:] + first, torch.full((count,), window, dtype=torch.long)
        if context.spell is not None:
            # The words spelled and tokenized as synthetic:text writes them, cut to the window. No ceiling: the cut
            # falls at a word piece, and a truncated window's component evidence is not the sampled window's.
            splits[split] = _spelled(name, drawn, context)
        elif name == "tagging":
            # No ceiling: a causal backbone's feature at a position has read only the words up to it (its ceiling is
            # the filtering accuracy), the others the whole window (smoothing); one number would hold one of them to
            # the wrong limit (synthetic.state_posteriors gives both).
            splits[split] = Split(tokens, lengths, drawn.states)
        elif name == "component":
            splits[split] = Split(tokens, lengths, drawn.components)
            if split == "test":  # every backbone's sequence feature has read the whole window
                ceiling = synthetic.component_posterior(language, drawn.words).amax(-1).mean().item()
        else:
            splits[split], pairs = _synthetic_pairs(name, tokens, lengths, context.vocab,
                                                    torch.Generator().manual_seed(seed))
            if split == "test":  # from the pairs as shown: words in shown order and where the separator falls
                posterior = PAIR_POSTERIORS[name](language, pairs.content - first, pairs.first_length, start)
                ceiling = synthetic.binary_ceiling(posterior)
    level, labels = ("token", [f"{k}.{s}" for k in range(K) for s in range(S)]) if name == "tagging" \
        else ("sequence", [str(k) for k in range(K)] if name == "component" else ["no", "yes"])
    sizes_text = ", ".join(f"{split} {count}" for split, count in sizes.items())
    spelled = " and spelled as synthetic:text" if context.spell else ""
    return Task(spec, level, (options.metric or "accuracy",), labels, splits["train"], splits["dev"],
                splits["test"], f"sampled from the embedded language{spelled}; {sizes_text}",
                pair=name in PAIR_TASK_OF, first_position=name in PAIR_TASK_OF, bayes_ceiling=ceiling)


def _spelled(name: str, drawn: synthetic.Sample, context: TaskContext) -> Split:
    """A tagging or component task on the words of `drawn` as synthetic:text spells them: a tag on each word's first
    piece (as CoNLL tasks are read), or the component of the whole text."""
    words = [[context.spell(word) for word in row] for row in drawn.words.tolist()]
    if name == "tagging":
        return _encode_tagged(context, words, drawn.states.tolist())
    return _encode(context, [" ".join(row) for row in words], None, drawn.components)


def _synthetic_pairs(name: str, tokens: Tensor, lengths: Tensor, vocab: Vocab,
                     generator: torch.Generator) -> tuple[Split, Pairs]:
    """Each sampled window as "[BOS] a [EOS] b [EOS]", made exactly as mlm:pair=sop (order) or mlm:pair=nsp
    (same-source) makes its pairs (objectives.pairs): the label says whether b follows a in the same sequence. order's
    negatives swap a and b; same-source's take b from another window. Each label is a fair coin. The pairs before
    the layout come back too: their content in shown order is what the Bayes ceiling is computed from."""
    pairs = make_pairs(PAIR_TASK_OF[name], tokens, generator)
    laid_out, _, _ = pair_layout(pairs, vocab)
    return Split(laid_out, lengths, pairs.is_next), pairs
