"""Text in: files and hub datasets read with `datasets`, a WordPiece tokenizer trained (or loaded) and cached, and
documents packed into windows with [EOS] between them.
"""

from __future__ import annotations

import codecs
import contextlib
import glob
import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import datasets
import torch
from filelock import FileLock
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from backbone import ConfigError
from bench.common.files import write_atomic
from objectives import NUM_SENTINELS, SPECIAL_TOKENS, Vocab

FORMATS = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@dataclass(frozen=True)
class TextOptions:
    """How text becomes windows (the CLI's --text-field, --vocab-size, --tokenizer, --num-proc)."""

    text_field: str = "text"
    vocab_size: int = 8192
    tokenizer: str | None = None  # a tokenizer.json to load instead of training one
    num_proc: int | None = None


def files_of(path_text: str) -> list[Path]:
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


def load_files(path_text: str, text_field: str) -> datasets.Dataset:
    files = files_of(path_text)
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


def load_hub(name_text: str, text_field: str) -> datasets.Dataset:
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


def cache_dir(data_path: Path | None) -> Path:
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
    with FileLock(str(cache_dir(data_path) / "prepare.lock")):
        yield


def tokenizer_for(train_docs: datasets.Dataset, options: TextOptions, data_path: Path | None) -> tuple[Tokenizer, str]:
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
    path = cache_dir(data_path) / f"tokenizer-{key}.json"
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


PACKED_DOCUMENTS = 1000  # documents concatenated and cut into windows together; the tail that fills none is dropped


def pack(docs: datasets.Dataset, tokenizer: Tokenizer, seq_len: int, num_proc: int | None) -> datasets.Dataset:
    """Tokenize and cut into windows of `seq_len` tokens, [EOS] after every document; the tail of each group of
    PACKED_DOCUMENTS documents (counted from the first) that does not fill a window is dropped. Only the tokenizing
    runs on `num_proc` processes: they split the documents where they like, which must not move a window."""
    eos = tokenizer.token_to_id("[EOS]")

    def tokenized(batch: dict) -> dict:
        return {"ids": [[*encoding.ids, eos] for encoding in tokenizer.encode_batch(batch["text"],
                                                                                    add_special_tokens=False)]}

    def windows(batch: dict) -> dict:
        ids = [token for document in batch["ids"] for token in document]
        usable = len(ids) // seq_len * seq_len
        return {"tokens": [ids[i:i + seq_len] for i in range(0, usable, seq_len)]}

    ids = docs.map(tokenized, batched=True, remove_columns=docs.column_names, num_proc=num_proc, desc="tokenizing")
    return ids.map(windows, batched=True, batch_size=PACKED_DOCUMENTS, remove_columns=["ids"], desc="packing")


def vocab_for_tokenizer(tokenizer: Tokenizer) -> Vocab:
    """The vocabulary of a WordPiece tokenizer: its "##" pieces continue a word (whole-word and span masking)."""
    continuation = torch.zeros(tokenizer.get_vocab_size() + NUM_SENTINELS, dtype=torch.bool)
    for piece, index in tokenizer.get_vocab().items():
        continuation[index] = piece.startswith("##")
    return Vocab.for_tokenizer(tokenizer.get_vocab_size(), continuation)


class quiet_datasets:
    """Hide `datasets`' own progress bars: the embedded corpus takes a second, not a bar, and a bar printed before a
    one-line error would bury it."""

    def __enter__(self) -> None:
        self.enabled = datasets.utils.is_progress_bar_enabled()
        datasets.utils.disable_progress_bars()

    def __exit__(self, *exc) -> None:
        if self.enabled:
            datasets.utils.enable_progress_bars()
