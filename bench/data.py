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

import codecs
import contextlib
import glob
import hashlib
import json
import os
import socket
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, Iterable

import datasets
import torch
from filelock import FileLock
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from torch import Tensor

from backbone import ConfigError
from bench import synthetic
from bench.files import write_atomic
from objectives import NUM_SENTINELS, SPECIAL_TOKENS, Vocab, parse_options

FORMATS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
HELDOUT_SHARE, HELDOUT_MAX_DOCUMENTS, SPLIT_SEED = 0.05, 5000, 0


@dataclass(frozen=True)
class TextOptions:
    """How text becomes windows (the CLI's --text-field, --vocab-size, --tokenizer, --num-proc)."""

    text_field: str = "text"
    vocab_size: int = 8192
    tokenizer: str | None = None  # a tokenizer.json to load instead of training one
    num_proc: int | None = None


@dataclass(frozen=True)
class SyntheticOptions:
    components: int = 4  # mixture components ("genres")
    states: int = 16  # hidden states, shared by the components
    words: int = 128  # word types (ordinary tokens)
    successors: int = 2  # non-zero transitions per state in each sparse transition table
    zipf: float = 3.0  # emission Zipf exponent
    support: int = 6  # words each state can emit
    genre: float = 0.05  # share of each transition row that is the component's own
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
        schedule's shorter phases, bench.schedule)."""
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


def _synthetic_rows(config: dict, num_sequences: int, length: int, seed: int, first_token: int):
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
                      first_token=vocab.first_ordinary)
        return datasets.Dataset.from_generator(_synthetic_rows, gen_kwargs=kwargs)

    # held-out samples use another seed, so they are never training windows
    train, heldout = split(options.train, 2 * options.seed), split(options.heldout, 2 * options.seed + 1)
    description = (f"embedded HMM mixture: {options.components} components x {options.states} states, "
                   f"{options.words} words, {options.support} per state (Zipf {options.zipf}), {options.successors} "
                   f"successors per state, genre {options.genre}, leak {options.leak}")
    return Corpus("synthetic" + (":" + option_text if option_text else ""), description, vocab, seq_len, train,
                  heldout, language)


def load_corpus(spec: str, seq_len: int, text: TextOptions = TextOptions()) -> Corpus:
    """A data spec -> Corpus of windows of `seq_len` tokens; every user mistake raises ConfigError."""
    scheme, _, rest = spec.partition(":")
    if seq_len < 2:
        raise ConfigError(f"seq_len must be >= 2, got {seq_len}")
    Vocab.for_tokenizer(text.vocab_size)  # validates --vocab-size before anything is loaded
    # datasets' progress bars help with a big corpus in a terminal; elsewhere they only bury the one-line errors
    quiet = scheme == "synthetic" or not sys.stderr.isatty()
    with quiet_datasets() if quiet else contextlib.nullcontext():
        if scheme == "synthetic" and (rest == "text" or rest.startswith("text,")):
            return synthetic_text_corpus(rest[len("text,"):], seq_len, text)
        if scheme == "synthetic":
            return synthetic_corpus(rest, seq_len)
        if scheme == "text":
            if not rest:
                raise ConfigError("text: needs a path, e.g. --data text:corpus.txt")
            return text_corpus(spec, _load_files(rest, text.text_field), seq_len, text, Path(rest).expanduser())
        if scheme == "hf":
            return text_corpus(spec, _load_hub(rest, text.text_field), seq_len, text, None)
    raise ConfigError(f"unknown data source {scheme!r} in {spec!r}; available: synthetic[:options], "
                      "synthetic:text[,options], text:PATH, hf:NAME[:CONFIG]")


def _files(path_text: str) -> list[Path]:
    path = Path(path_text).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in FORMATS and p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
        if not files:
            raise ConfigError(f"folder {path} holds no {', '.join(FORMATS)} files")
    elif any(c in path_text for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(os.path.expanduser(path_text), recursive=True) if Path(p).is_file())
        if not files:
            raise ConfigError(f"no file matches {path_text}")
    elif path.is_file():
        files = [path]
    else:
        raise ConfigError(f"no such file or folder: {path}")
    file_kind(files, FORMATS, path_text)
    for p in files:
        if p.suffix != ".parquet":
            _check_utf8(p)
    return files


def file_kind(files: list[Path], formats: dict[str, str], where: str) -> str:
    """The one `datasets` loader (formats: suffix -> loader) that reads every file of the list; a file of another
    type, a mix of types or an empty file is a ConfigError naming it."""
    kinds = {formats.get(p.suffix) for p in files}
    if None in kinds:
        bad = next(p for p in files if p.suffix not in formats)
        raise ConfigError(f"{bad}: unsupported file type {bad.suffix!r}; use {', '.join(formats)}")
    if len(kinds) > 1:
        raise ConfigError(f"{where} mixes file types ({', '.join(sorted(kinds))}); give one kind at a time")
    for p in files:
        if p.stat().st_size == 0:
            raise ConfigError(f"{p} is empty")
    return kinds.pop()


def _check_utf8(path: Path) -> None:
    decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as error:
                raise ConfigError(f"{path} is not valid UTF-8 (byte {offset + error.start})") from None
            offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not valid UTF-8 (it ends inside a character)") from None


def _load_files(path_text: str, text_field: str) -> datasets.Dataset:
    files = _files(path_text)
    kind = FORMATS[files[0].suffix]
    try:
        dataset = datasets.load_dataset(kind, data_files=[str(p) for p in files], split="train")
    except (datasets.exceptions.DatasetGenerationError, ValueError, OSError) as error:
        cause = error.__cause__ or error
        raise ConfigError(f"{path_text}: could not read it as {kind}: {str(cause).splitlines()[0][:200]}") from None
    return _text_column(dataset, text_field, path_text)


def hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes") or \
            os.environ.get("HF_DATASETS_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _load_hub(name_text: str, text_field: str) -> datasets.Dataset:
    name, _, config = name_text.partition(":")
    if not name:
        raise ConfigError("hf: needs a dataset name, e.g. --data hf:wikitext:wikitext-103-raw-v1")
    if not hub_reachable():  # fail at once, never hang on a network that is not there
        raise ConfigError(f"hf:{name_text} needs the Hugging Face hub, which cannot be reached from here (offline?); "
                          "download the data elsewhere and use --data text:PATH")
    try:
        dataset = datasets.load_dataset(name, config or None, split="train")
    except (datasets.exceptions.DatasetNotFoundError, FileNotFoundError, ValueError) as error:
        raise ConfigError(f"hf:{name_text}: {str(error).splitlines()[0][:200]}") from None
    return _text_column(dataset, text_field, f"hf:{name_text}")


def _text_column(dataset: datasets.Dataset, text_field: str, where: str) -> datasets.Dataset:
    if text_field not in dataset.column_names:
        raise ConfigError(f"{where} has no {text_field!r} field (fields: {', '.join(dataset.column_names)}); "
                          "name the text field with --text-field")
    dataset = dataset.select_columns([text_field])
    if text_field != "text":
        dataset = dataset.rename_column(text_field, "text")
    return dataset.filter(lambda batch: [bool(t and t.strip()) for t in batch["text"]], batched=True)


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A BERT-style uncased WordPiece tokenizer with the suite's special tokens at ids 0-4, the same file for the same
    texts on every machine and in every run. `texts` is read twice: pass a list or a dataset column, not a generator.

    The library's trainer alone is not deterministic (huggingface/tokenizers#1794): it gives each word-continuing
    piece "##c" its id while iterating over a hash map of word counts, whose order changes from process to process,
    and it breaks ties between equally frequent merges by those ids, so two trainings differ in ids and even in
    pieces. Handing it every "##c" the texts will need, in sorted order, as tokens it already has leaves nothing to
    that order; they are ordinary vocabulary afterwards, only the five special tokens stay special."""
    if iter(texts) is texts:
        texts = list(texts)
    normalizer, pre_tokenizer = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    continuing = sorted({"##" + char for text in texts
                         for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
                         for char in word[1:]})
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=[*SPECIAL_TOKENS, *continuing],
                                        show_progress=False)
    trained = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    trained.normalizer, trained.pre_tokenizer = normalizer, pre_tokenizer
    trained.train_from_iterator(texts, trainer=trainer)
    tokenizer = Tokenizer(models.WordPiece(trained.get_vocab(), unk_token="[UNK]"))
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizer, pre_tokenizer
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def _cache_dir(data_path: Path | None) -> Path:
    """Beside the data when that folder is writable, else in the user's cache."""
    if data_path is not None:
        folder = (data_path if data_path.is_dir() else data_path.parent) / ".objective-bench"
        try:
            folder.mkdir(exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder
        except OSError:
            pass
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "objective-bench"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def one_process_at_a_time(data_path: Path | None):
    """Data preparation (training the tokenizer, tokenizing into datasets' cache) by one process at a time, the
    order Fabric's rank_zero_first gives, but held by a file lock in the cache folder: every process of a
    multi-device run loads the corpus before the processes are joined into a group (bench.compare checks it all
    before launching them), so there is no group to wait on yet. The first process prepares; the others then find
    the tokenizer and the tokenized windows in the cache. Processes with caches of their own (nodes without a shared
    cache folder) each prepare theirs."""
    with FileLock(str(_cache_dir(data_path) / "prepare.lock")):
        yield


def _tokenizer(train_docs: datasets.Dataset, options: TextOptions, data_path: Path | None) -> tuple[Tokenizer, str]:
    if options.tokenizer:
        path = Path(options.tokenizer).expanduser()
        if not path.is_file():
            raise ConfigError(f"no such tokenizer file: {path}")
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # tokenizers raises plain Exceptions for malformed files
            raise ConfigError(f"{path} is not a tokenizers JSON file: {str(error).splitlines()[0][:200]}") from None
        wrong = [t for i, t in enumerate(SPECIAL_TOKENS) if tokenizer.token_to_id(t) != i]
        if wrong:
            raise ConfigError(f"{path} must hold {', '.join(SPECIAL_TOKENS)} as ids 0-4 ({', '.join(wrong)} are not "
                              "there); let the suite train one instead")
        return tokenizer, f"loaded from {path} ({tokenizer.get_vocab_size()} ids, {fingerprint(tokenizer)})"
    # the trainer's version is in the key: a cache written by the earlier, non-deterministic training is not reused
    key = hashlib.sha256(f"{train_docs._fingerprint}|{options.vocab_size}|trainer 2".encode()).hexdigest()[:16]
    path = _cache_dir(data_path) / f"tokenizer-{key}.json"
    if path.exists():
        tokenizer, how = Tokenizer.from_file(str(path)), "trained on the training documents earlier, read from"
    else:
        tokenizer = train_tokenizer(train_docs["text"], options.vocab_size)
        how = "trained on the training documents, cached at"
        write_atomic(path, tokenizer.to_str())
    return tokenizer, f"WordPiece, {tokenizer.get_vocab_size()} pieces, {how} {path} ({fingerprint(tokenizer)})"


def fingerprint(tokenizer: Tokenizer) -> str:
    """'sha256 0123456789ab': the hash of the tokenizer as tokenizer.json holds it, so two reports can tell whether
    they read the same tokens."""
    return "sha256 " + hashlib.sha256(tokenizer.to_str().encode()).hexdigest()[:12]


def _pack(docs: datasets.Dataset, tokenizer: Tokenizer, seq_len: int, num_proc: int | None) -> datasets.Dataset:
    """Tokenize and cut into windows of `seq_len` tokens, [EOS] after every document; the tail of each batch of
    documents that does not fill a window is dropped."""
    eos = tokenizer.token_to_id("[EOS]")

    def windows(batch: dict) -> dict:
        ids = [token for encoding in tokenizer.encode_batch(batch["text"], add_special_tokens=False)
               for token in (*encoding.ids, eos)]
        usable = len(ids) // seq_len * seq_len
        return {"tokens": [ids[i:i + seq_len] for i in range(0, usable, seq_len)]}

    return docs.map(windows, batched=True, batch_size=1000, remove_columns=docs.column_names, num_proc=num_proc,
                    desc="tokenizing")


def text_corpus(spec: str, docs: datasets.Dataset, seq_len: int, options: TextOptions,
                data_path: Path | None) -> Corpus:
    if len(docs) < 2:
        raise ConfigError(f"{spec} holds {len(docs)} non-empty document(s); need at least 2 (one to hold out)")
    heldout = min(HELDOUT_MAX_DOCUMENTS, max(1, round(HELDOUT_SHARE * len(docs))))
    split = docs.train_test_split(test_size=heldout, shuffle=True, seed=SPLIT_SEED)
    with one_process_at_a_time(data_path):
        tokenizer, tokenizer_text = _tokenizer(split["train"], options, data_path)
        train = _pack(split["train"], tokenizer, seq_len, options.num_proc)
        test = _pack(split["test"], tokenizer, seq_len, options.num_proc)
    vocab = vocab_for_tokenizer(tokenizer)
    if len(train) == 0 or len(test) == 0:
        raise ConfigError(f"{spec} is too small for one window of {seq_len} tokens in each split "
                          f"({len(train)} training, {len(test)} held-out windows); use more text or a shorter "
                          "--seq-len")
    train = train.shuffle(seed=SPLIT_SEED)  # consecutive windows come from the same document; mix them once
    tokens = (len(train) + len(test)) * seq_len
    description = f"{len(docs):,} documents, {tokens:,} tokens in windows of {seq_len}"
    return Corpus(spec, description, vocab, seq_len, train, test, None, tokenizer_text,
                  {"train": len(split["train"]), "heldout": len(split["test"])}, tokenizer)


def vocab_for_tokenizer(tokenizer: Tokenizer) -> Vocab:
    """The vocabulary of a WordPiece tokenizer: its "##" pieces continue a word (whole-word and span masking)."""
    continuation = torch.zeros(tokenizer.get_vocab_size() + NUM_SENTINELS, dtype=torch.bool)
    for piece, index in tokenizer.get_vocab().items():
        continuation[index] = piece.startswith("##")
    return Vocab.for_tokenizer(tokenizer.get_vocab_size(), continuation)


def synthetic_text_corpus(option_text: str, seq_len: int, options: TextOptions) -> Corpus:
    """The embedded language written out as text, each word spelled with 1-4 syllables so that a small WordPiece
    vocabulary splits many words into pieces: exercises the text path and whole-word masking offline. train + heldout
    sequences of 64 words are written, one per line; the held-out documents are then chosen like any text's (5 %)."""
    synthetic_options, _, language = synthetic_language(option_text)
    spell = speller(synthetic_options.words)
    spelling_version = 2  # part of the cache key: a change of spelling must not reuse an old file
    key = hashlib.sha256(json.dumps([spelling_version, asdict(synthetic_options)], sort_keys=True).encode()
                         ).hexdigest()[:16]
    path = _cache_dir(None) / f"synthetic-text-{key}" / "corpus.txt"
    with one_process_at_a_time(None):
        if not path.exists():
            total = synthetic_options.train + synthetic_options.heldout
            words = synthetic.sample(language, total, 64, 2 * synthetic_options.seed).words.tolist()
            write_atomic(path, "".join(" ".join(spell(w) for w in line) + "\n" for line in words))
    # fewer pieces than word types, so that many words are split into pieces
    text = replace(options, vocab_size=min(options.vocab_size, synthetic_options.words // 2))
    docs = _load_files(str(path), "text")
    corpus = text_corpus("synthetic:text" + ("," + option_text if option_text else ""), docs, seq_len, text, None)
    corpus.description = f"embedded HMM mixture written as text ({path}): " + corpus.description
    corpus.spelled_language, corpus.spell = language, spell
    return corpus


def speller(num_words: int) -> Callable[[int], str]:
    """How synthetic:text writes word w of a language with `num_words` words: w in base 70 at a fixed width of
    two-letter syllables (so every spelling is unique), then 0-2 more syllables so that word lengths vary."""
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]  # 70, two letters each
    width = 1
    while len(syllables) ** width < num_words:
        width += 1

    def spell(word: int) -> str:
        digits = [(word // len(syllables) ** i) % len(syllables) for i in range(width)]
        extra = [(word * 7919 + i * 31) % len(syllables) for i in range(word % 3)]
        return "".join(syllables[d] for d in digits + extra)

    return spell


class quiet_datasets:
    """Hide `datasets`' own progress bars: the embedded corpus takes a second, not a bar, and a bar printed before a
    one-line error would bury it."""

    def __enter__(self) -> None:
        self.enabled = datasets.utils.is_progress_bar_enabled()
        datasets.utils.disable_progress_bars()

    def __exit__(self, *exc) -> None:
        if self.enabled:
            datasets.utils.enable_progress_bars()
