"""Data specs -> fixed-length token windows and a vocabulary with reserved special ids.

The one place that turns `--data synthetic[:options]` into a Corpus. Windows are served through Hugging Face
`datasets` (built by `Dataset.from_generator`, cached by fingerprint), and every objective and seed reads the same
windows in the same order: the order is a property of the corpus, not of the run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import datasets
import torch
from torch import Tensor

from backbone import ConfigError
from bench import synthetic
from objectives import Vocab, parse_options

NUM_SENTINELS = 100  # as T5's extra_ids; span corruption needs one per span (23 at T = 512)


@dataclass(frozen=True)
class SyntheticOptions:
    components: int = 4  # mixture components ("genres")
    states: int = 16  # hidden states per component
    words: int = 512  # word types (ordinary tokens)
    successors: int = 4  # non-zero transitions per state
    zipf: float = 1.1  # emission Zipf exponent
    seed: int = 0  # seed of the language and of its samples (not of the runs)
    train: int = 8192  # training windows
    heldout: int = 512  # held-out windows: the first 128 for evaluation, all for the probes


@dataclass
class Corpus:
    name: str  # the data spec, for the report
    description: str
    vocab: Vocab
    seq_len: int
    train: datasets.Dataset  # "tokens" (T ids) [+ "states" (T), "component"] per window
    heldout: datasets.Dataset
    language: synthetic.Language | None = None  # the true distribution, when it is known

    def windows(self, split: str) -> Tensor:
        """(windows, T) int64 token ids of a split, in the corpus's fixed order."""
        return getattr(self, split).with_format("torch")[:]["tokens"]

    def summary(self) -> dict:
        return {"data": self.name, "description": self.description, "vocab_size": self.vocab.size,
                "seq_len": self.seq_len, "train_windows": len(self.train), "heldout_windows": len(self.heldout),
                "train_tokens": len(self.train) * self.seq_len}


def _synthetic_rows(config: dict, num_sequences: int, length: int, seed: int, first_token: int):
    language = synthetic.make_language(synthetic.LanguageConfig(**config))
    sample = synthetic.sample(language, num_sequences, length, seed)
    tokens = sample.words + first_token
    for row in range(num_sequences):
        yield {"tokens": tokens[row].tolist(), "states": sample.states[row].tolist(),
               "component": int(sample.components[row])}


def synthetic_corpus(option_text: str, seq_len: int) -> Corpus:
    options = parse_options("synthetic", option_text, SyntheticOptions)
    for name in ("train", "heldout", "seed"):
        if getattr(options, name) < (0 if name == "seed" else 1):
            raise ConfigError(f"synthetic option {name} must be >= {0 if name == 'seed' else 1}, "
                              f"got {getattr(options, name)}")
    language_fields = {f.name for f in fields(synthetic.LanguageConfig)}
    config = {k: v for k, v in asdict(options).items() if k in language_fields}
    try:
        language = synthetic.make_language(synthetic.LanguageConfig(**config))
    except ValueError as error:
        raise ConfigError(f"synthetic: {error}") from None
    vocab = Vocab.for_words(options.words, NUM_SENTINELS)

    def split(num_sequences: int, sample_seed: int) -> datasets.Dataset:
        kwargs = dict(config=config, num_sequences=num_sequences, length=seq_len, seed=sample_seed,
                      first_token=vocab.first_ordinary)
        return datasets.Dataset.from_generator(_synthetic_rows, gen_kwargs=kwargs)

    # held-out samples use another seed, so they are never training windows
    train, heldout = split(options.train, 2 * options.seed), split(options.heldout, 2 * options.seed + 1)
    description = (f"embedded HMM mixture: {options.components} components x {options.states} states, "
                   f"{options.words} words, {options.successors} successors per state, Zipf {options.zipf}")
    return Corpus("synthetic" + (":" + option_text if option_text else ""), description, vocab, seq_len, train,
                  heldout, language)


def load_corpus(spec: str, seq_len: int) -> Corpus:
    """`synthetic[:key=value,...]` -> Corpus of windows of `seq_len` tokens."""
    scheme, _, option_text = spec.partition(":")
    if seq_len < 2:
        raise ConfigError(f"seq_len must be >= 2, got {seq_len}")
    if scheme == "synthetic":
        with _quiet_datasets():
            return synthetic_corpus(option_text, seq_len)
    raise ConfigError(f"unknown data source {scheme!r} in {spec!r}; available: synthetic[:options]")


class _quiet_datasets:
    """Hide `datasets`' own progress bars while it builds the embedded corpus: it takes a second, not a bar."""

    def __enter__(self) -> None:
        self.enabled = datasets.utils.is_progress_bar_enabled()
        datasets.utils.disable_progress_bars()

    def __exit__(self, *exc) -> None:
        if self.enabled:
            datasets.utils.enable_progress_bars()
