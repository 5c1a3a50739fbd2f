"""Labelled downstream tasks as padded token windows: one code path for local files, the hub, CoNLL tagging and the
embedded language's own tasks.

    --downstream "reviews.csv,label=sentiment, hf:glue:mrpc, conll:ner/, synthetic:topic"

A SPEC is a source and then KEY=VALUE options; in a list, a piece with "=" and no ":" continues the previous spec
(as in --objectives):
- PATH or file:PATH: a .csv/.tsv/.jsonl/.json/.parquet file, or a folder of them, read with `datasets`. A folder
  whose files are named train.*, dev.* (or validation.*) and test.* gives its own splits; otherwise test and dev are
  drawn from the examples with a fixed seed (shares `test`, `dev`).
- hf:NAME[:CONFIG]: a Hugging Face hub dataset (the network is needed to download it). GLUE tasks (hf:glue:sst2,
  hf:glue:mnli, ...) know their fields and metric; since GLUE hides its test labels, the labelled validation split
  is the test split and dev is drawn from train.
- conll:PATH: token tagging from CoNLL-style files (the token first and its tag last on each line, a blank line
  between sentences), scored by span F1 when the tags are BIO, else by accuracy. A token tagged "_" (CoNLL-U's
  "unspecified") is read as context and never scored: a task can ask about some positions of a passage only.
- synthetic:states|component|order|same-source: the embedded language's tasks, sampled afresh from the true
  distribution (they need --data synthetic): the hidden state of each position whose word alone leaves it open (every
  word shown), mixture-component classification, whether two halves are in their original order (SOP), whether two
  halves come from the same sequence (NSP); the pairs are made as mlm:pair=sop and mlm:pair=nsp make theirs, from
  windows in the middle of a sequence (times T .. 2T − 1). states and component are the neutral default there.
- copies=SIGNAL[+SIGNAL]: the training signals (objectives.SIGNALS) a task's question copies, so that it diagnoses
  the objectives that have them and ranks nobody (a [MASK] in a task's inputs is found without it).

A file or folder task is named in reports by its file (or folder) name, `library` for /data/library.jsonl, its path in
its source; two of one name keep their specs as names. Every text is tokenized with the comparison's own tokenizer and ends with [EOS] like a pretraining document; a pair
is "a [EOS] b [EOS]". Examples are truncated to the window and padded with [PAD] after their last token. Every user
mistake is a ConfigError naming the file and the fix, raised before anything is written.
"""

from __future__ import annotations

from pathlib import Path

from backbone import ConfigError
from bench.data.text import quiet_datasets
from bench.yardsticks.embedded_tasks import SYNTHETIC_TASKS, synthetic_task
from bench.yardsticks.examples import Task, TaskContext, TaskOptions
from bench.yardsticks.metrics import METRICS
from bench.yardsticks.text_tasks import conll_task, file_task, hub_task
from objectives import SIGNALS, parse_options, split_specs


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
    copies = tuple(filter(None, options.copies.split("+")))
    unknown = [name for name in copies if name not in SIGNALS]
    if unknown:
        raise ConfigError(f"{spec}: copies={'+'.join(unknown)} names no training signal; choose from "
                          f"{', '.join(SIGNALS)}")
    task = build_task(spec, source, options, context)
    task.copies = tuple(dict.fromkeys([*task.copies, *copies]))
    scheme, _, rest = source.partition(":")
    if scheme not in ("synthetic", "hf"):  # a file or folder: named by it, its path kept in its source and spec
        task.name, task.spec = Path(rest if scheme in ("conll", "file") else source).stem or spec, spec
    return task


# the options only one kind of source reads: given to the other kind they would be ignored, and a number read under
# a setting the user did not get is silently wrong
TEXT_ONLY = ("text", "text_pair", "label", "dev", "test", "train")
SYNTHETIC_ONLY = ("size",)


def build_task(spec: str, source: str, options: TaskOptions, context: TaskContext) -> Task:
    scheme, _, rest = source.partition(":")
    unread = [name for name in (TEXT_ONLY if scheme == "synthetic" else SYNTHETIC_ONLY)
              if getattr(options, name) != getattr(TaskOptions(), name)]
    if unread:
        kind = ("the embedded language's tasks (they are sampled: size= sets their splits)" if scheme == "synthetic"
                else "tasks read from files or the Hub")
        raise ConfigError(f"{spec}: {', '.join(name + '=' for name in unread)} does nothing for {kind}")
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
    specs = [task.spec or task.name for task in tasks]
    if len(set(specs)) != len(specs):
        raise ConfigError(f"a task is listed twice in --downstream ({', '.join(specs)})")
    names = [task.name for task in tasks]
    for task in tasks:  # two files of one name (a/train.csv, b/train.csv) keep their specs as names
        if names.count(task.name) > 1:
            task.name = task.spec
    return tasks
