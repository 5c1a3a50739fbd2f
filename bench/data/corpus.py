"""Data specs -> fixed-length token windows and a vocabulary with reserved special ids.

The one place that turns `--data` into a Corpus:
- `synthetic[:options]`: the embedded HMM-mixture language, words as tokens, hidden states kept for the probes;
- `synthetic:text[,options]`: the same language written out as text with multi-piece words, then read like any corpus;
- `text:PATH`: a .txt / .jsonl / .json / .parquet file, folder or glob, read with `datasets.load_dataset`;
- `hf:NAME[:CONFIG]`: a Hugging Face hub dataset, for users with network access.
Text is split into documents (lines, records or rows), a fixed seeded share held out, a WordPiece tokenizer trained
on the training documents (or loaded), and each split tokenized with `Dataset.map(batched=True)` (cached by
fingerprint) and packed into windows of T tokens with [EOS] between documents. Every objective and seed reads the same
windows in the same order: the order is a property of the corpus, not of the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

import datasets
import torch
from tokenizers import Tokenizer
from torch import Tensor

from backbone import ConfigError
from bench.data import synthetic
from bench.data.text import (TextOptions, cache_dir, load_files, load_hub, one_process_at_a_time, pack, quiet_datasets,
                             tokenizer_for, vocab_for_tokenizer)
from bench.common.files import write_atomic
from objectives import Vocab, parse_options

# the documents' held-out split and the training windows' one shuffle (bench.yardsticks.examples' SPLIT_SEED draws
# labelled tasks' splits: another seed for another thing)
HELDOUT_SHARE, HELDOUT_MAX_DOCUMENTS, DOCUMENT_SPLIT_SEED = 0.05, 5000, 0


@dataclass(frozen=True)
class SyntheticOptions:
    # the language (bench.data.synthetic.LanguageConfig, docs/language.md)
    topics: int = 8  # topics (the mixture's components), one per window
    categories: int = 12  # word categories (the syntax's states)
    function: int = 5  # of which closed-class
    closed: int = 8  # words of a closed-class category
    features: int = 3  # values of the agreement feature
    setters: int = 2  # open categories whose words set the feature
    words: int = 1000  # word types (ordinary tokens)
    lexicon: int = 300  # words of an open-class category
    zipf: float = 1.1  # Zipf exponent of each category's words
    topic: float = 1.0  # share of an open category's word choice that is the topic's own
    successors: int = 2  # successors of each category in the syntax
    leak: float = 0.01  # share of each transition and emission row spread uniformly
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
    tokenizer: str = "none: the words are the tokens"
    documents: dict[str, int] = field(default_factory=dict)  # per split
    text_tokenizer: Tokenizer | None = None  # what downstream tasks are tokenized with (text corpora)
    # synthetic:text: the language the text spells and how it spells a word, so the embedded tasks can be sampled,
    # spelled and tokenized as the corpus was (no probes: the tokens are word pieces, not the language's words)
    spelled_language: synthetic.Language | None = None
    spell: Callable[[int], str] | None = None

    def windows(self, split: str, seq_len: int | None = None) -> "Windows | CutWindows":
        """The token windows of a split, in the corpus's fixed order, read from disk on demand; with a `seq_len`
        shorter than the corpus's, each window cut into consecutive windows of that length (a sequence-length
        schedule's shorter phases, bench.training.recipe)."""
        windows = Windows(getattr(self, split))
        if seq_len is None or seq_len == self.seq_len:
            return windows
        if not 2 <= seq_len < self.seq_len:
            raise ConfigError(f"windows of {seq_len} tokens cannot be cut from the corpus's windows of "
                              f"{self.seq_len}")
        return CutWindows(windows, self.seq_len, seq_len)

    def summary(self) -> dict:
        return {"data": self.name, "description": self.description, "vocab_size": self.vocab.size,
                "seq_len": self.seq_len, "train_windows": len(self.train), "heldout_windows": len(self.heldout),
                "train_tokens": len(self.train) * self.seq_len, "heldout_tokens": len(self.heldout) * self.seq_len,
                "tokenizer": self.tokenizer}


class Windows:
    """(windows, T) token ids backed by the memory-mapped Arrow table `datasets` keeps on disk: indexing reads only
    the rows asked for, so a corpus larger than memory trains with a constant footprint."""

    def __init__(self, dataset: datasets.Dataset) -> None:
        self.dataset = dataset.with_format("torch", columns=["tokens"])

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Tensor | slice | list[int]) -> Tensor:
        if isinstance(index, Tensor):
            index = index.tolist()
        return self.dataset[index]["tokens"]


class CutWindows:
    """Windows of `seq_len` tokens cut from windows of `long_len`: long window i holds short windows
    i·k .. i·k + k − 1, k = floor(long_len / seq_len), in order, and its last long_len mod seq_len tokens are dropped.
    Cutting rather than building a second corpus keeps the same tokens in the same order (no other tokenization,
    packing or sample of the embedded language), so a schedule's short phase reads the text its long phase reads,
    and every window of every length exists in the one corpus the model's max_seq_len was set for."""

    def __init__(self, windows: Windows, long_len: int, seq_len: int) -> None:
        self.windows, self.seq_len = windows, seq_len
        self.per_window = long_len // seq_len

    def __len__(self) -> int:
        return len(self.windows) * self.per_window

    def __getitem__(self, index: Tensor | slice | list[int]) -> Tensor:
        positions = torch.arange(len(self))[index] if isinstance(index, slice) else torch.as_tensor(index)
        if positions.numel() == 0:
            return torch.empty(0, self.seq_len, dtype=torch.long)
        rows = torch.div(positions, self.per_window, rounding_mode="floor")
        unique, inverse = rows.unique(return_inverse=True)  # each long window is read once
        long = self.windows[unique][:, :self.per_window * self.seq_len]
        pieces = long.reshape(len(unique), self.per_window, self.seq_len)
        return pieces[inverse, positions % self.per_window]


def _synthetic_rows(config: dict, num_sequences: int, length: int, seed: int, first_token: int, digest: str):
    # `digest` (synthetic.digest) is unused here but part of datasets' cache key: the options alone would serve
    # windows cached before a change of the language's code
    language = synthetic.make_language(synthetic.LanguageConfig(**config))
    sample = synthetic.sample(language, num_sequences, length, seed)
    tokens = sample.words + first_token
    for row in range(num_sequences):
        yield {"tokens": tokens[row].tolist(), "states": sample.states[row].tolist(),
               "component": int(sample.components[row])}


def synthetic_language(option_text: str) -> tuple[SyntheticOptions, dict, synthetic.Language]:
    """Parse and check the synthetic options; (options, the language's config, the language)."""
    options = parse_options("synthetic", option_text, SyntheticOptions)
    for name in ("train", "heldout", "seed"):
        if getattr(options, name) < (0 if name == "seed" else 1):
            raise ConfigError(f"synthetic option {name} must be >= {0 if name == 'seed' else 1}, "
                              f"got {getattr(options, name)}")
    language_fields = {f.name for f in fields(synthetic.LanguageConfig)}
    config = {k: v for k, v in asdict(options).items() if k in language_fields}
    try:
        return options, config, synthetic.make_language(synthetic.LanguageConfig(**config))
    except ValueError as error:
        raise ConfigError(f"synthetic: {error}") from None


def synthetic_corpus(option_text: str, seq_len: int) -> Corpus:
    options, config, language = synthetic_language(option_text)
    vocab = Vocab.for_words(options.words)

    def split(num_sequences: int, sample_seed: int) -> datasets.Dataset:
        kwargs = dict(config=config, num_sequences=num_sequences, length=seq_len, seed=sample_seed,
                      first_token=vocab.first_ordinary, digest=synthetic.digest(language))
        return datasets.Dataset.from_generator(_synthetic_rows, gen_kwargs=kwargs)

    # held-out samples use another seed, so they are never training windows
    train, heldout = split(options.train, 2 * options.seed), split(options.heldout, 2 * options.seed + 1)
    description = (f"embedded language: {options.topics} topics, {options.categories} word categories "
                   f"({options.function} closed) x {options.features} agreement values, {options.words} words "
                   f"(Zipf {options.zipf}, {options.lexicon} per open category, topic share {options.topic}), "
                   f"{options.successors} successors per category, leak {options.leak}")
    return Corpus("synthetic" + (":" + option_text if option_text else ""), description, vocab, seq_len, train,
                  heldout, language)


def data_source(spec: str) -> tuple[str, str]:
    """The --data grammar, in one place: (source, what follows it), the source one of synthetic, synthetic:text,
    text and hf ("synthetic:text,words=64,lexicon=8" -> ("synthetic:text", "words=64")); any other scheme comes back as given,
    for load_corpus to refuse."""
    scheme, _, rest = spec.partition(":")
    if scheme == "synthetic" and (rest == "text" or rest.startswith("text,")):
        return "synthetic:text", rest[len("text,"):]
    return scheme, rest


def load_corpus(spec: str, seq_len: int, text: TextOptions = TextOptions()) -> Corpus:
    """A data spec -> Corpus of windows of `seq_len` tokens; every user mistake raises ConfigError."""
    source, rest = data_source(spec)
    if seq_len < 2:
        raise ConfigError(f"seq_len must be >= 2, got {seq_len}")
    Vocab.for_tokenizer(text.vocab_size)  # validates --vocab-size before anything is loaded
    # datasets' progress bars help with a big corpus in a terminal; elsewhere they only bury the one-line errors
    quiet = source == "synthetic" or not sys.stderr.isatty()
    with quiet_datasets() if quiet else contextlib.nullcontext():
        if source == "synthetic:text":
            return synthetic_text_corpus(rest, seq_len, text)
        if source == "synthetic":
            return synthetic_corpus(rest, seq_len)
        if source == "text":
            if not rest:
                raise ConfigError("text: needs a path, e.g. --data text:corpus.txt")
            return text_corpus(spec, load_files(rest, text.text_field), seq_len, text, Path(rest).expanduser())
        if source == "hf":
            return text_corpus(spec, load_hub(rest, text.text_field), seq_len, text, None)
    raise ConfigError(f"unknown data source {source!r} in {spec!r}; available: synthetic[:options], "
                      "synthetic:text[,options], text:PATH, hf:NAME[:CONFIG]")


def text_corpus(spec: str, docs: datasets.Dataset, seq_len: int, options: TextOptions,
                data_path: Path | None) -> Corpus:
    if len(docs) < 2:
        raise ConfigError(f"{spec} holds {len(docs)} non-empty document(s); need at least 2 (one to hold out)")
    heldout = min(HELDOUT_MAX_DOCUMENTS, max(1, round(HELDOUT_SHARE * len(docs))))
    split = docs.train_test_split(test_size=heldout, shuffle=True, seed=DOCUMENT_SPLIT_SEED)
    with one_process_at_a_time(data_path):
        tokenizer, tokenizer_text = tokenizer_for(split["train"], options, data_path)
        train = pack(split["train"], tokenizer, seq_len, options.num_proc)
        test = pack(split["test"], tokenizer, seq_len, options.num_proc)
    vocab = vocab_for_tokenizer(tokenizer)
    if len(train) == 0 or len(test) == 0:
        raise ConfigError(f"{spec} is too small for one window of {seq_len} tokens in each split "
                          f"({len(train)} training, {len(test)} held-out windows); use more text or a shorter "
                          "--seq-len")
    train = train.shuffle(seed=DOCUMENT_SPLIT_SEED)  # consecutive windows come from the same document; mix them once
    tokens = (len(train) + len(test)) * seq_len
    description = f"{len(docs):,} documents, {tokens:,} tokens in windows of {seq_len}"
    return Corpus(spec, description, vocab, seq_len, train, test, None, tokenizer_text,
                  {"train": len(split["train"]), "heldout": len(split["test"])}, tokenizer)


def synthetic_text_corpus(option_text: str, seq_len: int, options: TextOptions) -> Corpus:
    """The embedded language written out as text, each word spelled with 1-4 syllables so that a small WordPiece
    vocabulary splits many words into pieces: exercises the text path and whole-word masking offline. train + heldout
    sequences of 64 words are written, one per line; the held-out documents are then chosen like any text's (5 %)."""
    synthetic_options, _, language = synthetic_language(option_text)
    spell = speller(synthetic_options.words)
    spelling_version = 2  # part of the cache key: a change of spelling must not reuse an old file
    key = hashlib.sha256(json.dumps([spelling_version, asdict(synthetic_options), synthetic.digest(language)],
                                    sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir(None) / f"synthetic-text-{key}" / "corpus.txt"
    with one_process_at_a_time(None):
        if not path.exists():
            total = synthetic_options.train + synthetic_options.heldout
            words = synthetic.sample(language, total, 64, 2 * synthetic_options.seed).words.tolist()
            write_atomic(path, "".join(" ".join(spell(w) for w in line) + "\n" for line in words))
    # fewer pieces than word types, so that many words are split into pieces
    text = replace(options, vocab_size=min(options.vocab_size, synthetic_options.words // 2))
    docs = load_files(str(path), "text")
    corpus = text_corpus("synthetic:text" + ("," + option_text if option_text else ""), docs, seq_len, text, None)
    corpus.description = f"embedded HMM mixture written as text ({path}): " + corpus.description
    corpus.spelled_language, corpus.spell = language, spell
    return corpus


SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in "aeiou")  # 70, two letters each


@dataclass(frozen=True)
class Speller:
    """How synthetic:text writes word w: w in base 70 at a fixed width of two-letter syllables (so every spelling is
    unique), then 0-2 more syllables so that word lengths vary. A dataclass rather than a closure so that a task
    context holding it crosses to the worker processes of --jobs (pickle cannot carry a local function)."""

    width: int

    def __call__(self, word: int) -> str:
        base = len(SYLLABLES)
        digits = [(word // base ** i) % base for i in range(self.width)]
        extra = [(word * 7919 + i * 31) % base for i in range(word % 3)]
        return "".join(SYLLABLES[d] for d in digits + extra)


def speller(num_words: int) -> Speller:
    """The spelling of a language with `num_words` words: as few syllables per word as make every word unique."""
    width = 1
    while len(SYLLABLES) ** width < num_words:
        width += 1
    return Speller(width)
