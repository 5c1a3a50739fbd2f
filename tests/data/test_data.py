import json
import pickle
import random
import subprocess
import sys

import datasets
import pytest
import torch
from tokenizers import Tokenizer, models

from backbone import ConfigError
from bench.common.cli import run
from bench.compare import main
from bench.data.corpus import load_corpus, speller
from bench.data.text import PACKED_DOCUMENTS, TextOptions, pack, train_tokenizer
from bench.training.batches import build_run_objective, training_batch
from bench.training.recipe import RunConfig
from objectives import IGNORE, SPECIAL_TOKENS, Vocab
from objectives.masking import exact_count, select_spans, span_length_distribution

WORDS = ("the of and to in is was that for it with as on be at by this had not are but from or have an they which "
         "one you were her all she there would their we him been has when who will more no if out so said what up "
         "its about into than them can only other new some could time these two may then do first any my now such "
         "like our over man me even most made after also did many before must through back years where much your "
         "way well down should because each just those people how too little state good very make world still own "
         "see men work long get here between both life being under never day same another know while last might us "
         "great old year off come since against go came right used take three").split()


def english_like(path, lines: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    path.write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 25))).capitalize() + "."
                              for _ in range(lines)) + "\n")


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    english_like(path, 3000)
    return path


@pytest.fixture(scope="module")
def synthetic_text(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        return load_corpus("synthetic:text,train=400,heldout=40", 64, TextOptions(vocab_size=200))


def test_text_file_becomes_windows_with_a_trained_tokenizer(text_file):
    corpus = load_corpus(f"text:{text_file}", 32, TextOptions(vocab_size=300))
    train = corpus.windows("train")[:]
    assert train.shape[1] == 32 and len(corpus.train) > 10 and len(corpus.heldout) >= 1
    assert corpus.vocab.size == 300 + 100 and corpus.vocab.first_ordinary == 5
    assert (train == corpus.vocab.EOS).any()  # documents are separated
    assert ((train >= corpus.vocab.first_ordinary) | (train == corpus.vocab.EOS) | (train == 4)).all()
    assert "WordPiece" in corpus.tokenizer and corpus.documents["heldout"] == 150  # 5 % of 3000 lines
    cached = list((text_file.parent / ".objective-bench").glob("tokenizer-*.json"))
    assert len(cached) == 1
    again = load_corpus(f"text:{text_file}", 32, TextOptions(vocab_size=300))  # from the caches
    assert torch.equal(again.windows("train")[:], train)
    loaded = load_corpus(f"text:{text_file}", 32, TextOptions(tokenizer=str(cached[0])))
    assert torch.equal(loaded.windows("heldout")[:], corpus.windows("heldout")[:])


PREPARE = """
import sys, time
import bench.data.text
from bench.data.corpus import load_corpus
from bench.data.text import TextOptions
real, log = bench.data.text.train_tokenizer, sys.argv[2]

def counted(*args, **kwargs):
    with open(log, "a") as file:
        file.write("trained\\n")
    time.sleep(2)  # a window in which the other process would train too, were nothing holding it back
    return real(*args, **kwargs)

bench.data.text.train_tokenizer = counted
corpus = load_corpus("text:" + sys.argv[1], 16, TextOptions(vocab_size=200))
print(len(corpus.train), int(corpus.windows("train")[:].sum()))
"""


@pytest.mark.slow
def test_the_processes_of_a_run_prepare_the_data_one_at_a_time(tmp_path):
    # every process of a multi-device run loads the corpus before the processes form a group: the first trains the
    # tokenizer and tokenizes; the other waits for it, then reads both from the cache
    path = tmp_path / "corpus.txt"
    english_like(path, 400, seed=3)
    log = tmp_path / "trained.log"
    processes = [subprocess.Popen([sys.executable, "-c", PREPARE, str(path), str(log)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [process.communicate(timeout=300) for process in processes]
    assert all(process.returncode == 0 for process in processes), [error for _, error in outputs]
    assert log.read_text().splitlines() == ["trained"]
    assert outputs[0][0] == outputs[1][0]  # the same windows in both


def test_the_windows_do_not_depend_on_how_many_processes_tokenize(text_file):
    """--num-proc is an execution setting, free to change on --resume: its processes split the documents into
    contiguous shards wherever they like, and packing must not restart there. 2,500 documents are 3 groups of
    PACKED_DOCUMENTS, cut by 2 processes at 1,250, inside the second group."""
    texts = text_file.read_text().splitlines()[:2500]
    docs, tokenizer = datasets.Dataset.from_dict({"text": texts}), train_tokenizer(texts, 300)
    alone, shared = (pack(docs, tokenizer, 16, num_proc)["tokens"] for num_proc in (None, 2))
    assert shared == alone
    eos, pieces = tokenizer.token_to_id("[EOS]"), []
    for start in range(0, len(texts), PACKED_DOCUMENTS):  # by hand: each group's tokens, cut, its tail dropped
        ids = [t for text in texts[start:start + PACKED_DOCUMENTS] for t in (*tokenizer.encode(
            text, add_special_tokens=False).ids, eos)]
        pieces += [ids[i:i + 16] for i in range(0, len(ids) // 16 * 16, 16)]
    assert alone == pieces


def test_jsonl_parquet_folders_and_globs(tmp_path, text_file):
    lines = text_file.read_text().splitlines()[:600]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps({"body": line, "id": i}) for i, line in enumerate(lines)))
    corpus = load_corpus(f"text:{tmp_path / 'a.jsonl'}", 16, TextOptions(text_field="body", vocab_size=200))
    assert corpus.documents == {"train": 570, "heldout": 30}
    (tmp_path / "p").mkdir()
    datasets.Dataset.from_dict({"text": lines}).to_parquet(str(tmp_path / "p" / "b.parquet"))
    assert len(load_corpus(f"text:{tmp_path / 'p'}", 16, TextOptions(vocab_size=200)).train) > 0
    (tmp_path / "t").mkdir()
    for i in range(3):
        (tmp_path / "t" / f"part{i}.txt").write_text("\n".join(lines[i * 200:(i + 1) * 200]))
    by_glob = load_corpus(f"text:{tmp_path / 't' / 'part*.txt'}", 16, TextOptions(vocab_size=200))
    assert by_glob.documents == {"train": 570, "heldout": 30}


def test_synthetic_text_spells_words_in_base_70_syllables_with_a_hashed_tail():
    # by hand: syllables are consonant-major ("ba", "be", ..., "bu", "da", ...); word w gets w % 3 extra syllables,
    # the i-th at (7919 w + 31 i) mod 70
    short, long = speller(70), speller(71)  # 70 words fit in one syllable; 71 need two
    assert [short(0), short(1), short(2)] == ["ba", "be" + "du", "bi" + "go" + "ru"]  # 7919 = 9, 2·7919 = 18, +31 = 49
    assert [long(0), long(70)] == ["baba", "babe" + "ba"]  # 70 = (0, 1) in base 70, plus 70·7919 = 0 mod 70


def test_a_synthetic_text_corpus_crosses_to_worker_processes(synthetic_text):
    """--jobs pickles the corpus and task contexts for its workers: the spelling must survive it unchanged."""
    copied = pickle.loads(pickle.dumps(synthetic_text))
    assert [copied.spell(w) for w in range(200)] == [synthetic_text.spell(w) for w in range(200)]


def test_synthetic_text_has_multi_piece_words_and_whole_word_masking_keeps_them_whole(synthetic_text):
    vocab = synthetic_text.vocab
    windows = synthetic_text.windows("train")[:64]
    starts = vocab.word_starts(windows)
    assert 0.2 < 1 - starts.float().mean() < 0.8  # many tokens continue a word
    objective = build_run_objective("mlm:whole_word=true", RunConfig(budget_flops=1, model="tiny"), synthetic_text)
    batch = objective.corrupt(windows, torch.Generator().manual_seed(0))
    selected = batch.targets != IGNORE
    words = starts.long().cumsum(1)
    budget = exact_count(64, 0.15)
    for row in range(len(windows)):
        chosen_words = set(words[row][selected[row]].tolist())
        whole = torch.isin(words[row], torch.tensor(sorted(chosen_words)))
        assert torch.equal(whole, selected[row])  # a chosen word is chosen entirely
        assert int(selected[row].sum()) <= budget
    assert selected.sum(1).float().mean() > budget - 1.5  # the greedy fill comes close to the budget


def test_whole_word_masking_on_single_token_words_is_the_exact_rule():
    vocab = Vocab.for_words(50)
    tokens = torch.randint(4, 54, (20, 64), generator=torch.Generator().manual_seed(1))
    objective = build_run_objective("mlm:whole_word=true", RunConfig(budget_flops=1, model="tiny"),
                                    type("C", (), {"vocab": vocab, "seq_len": 64})())
    batch = objective.corrupt(tokens, torch.Generator().manual_seed(2))
    assert ((batch.targets != IGNORE).sum(1) == 10).all()


def test_span_lengths_follow_the_clipped_geometric_law():
    distribution = span_length_distribution(0.2, 10)
    mean = float((torch.arange(1, 11) * distribution).sum())
    assert mean == pytest.approx(3.8, abs=0.005)  # SpanBERT: "mean 3.8"
    # Long sequences of one-token words, so spans rarely collide or reach an edge. Only each row's first three spans
    # count: together at most 30 tokens, they can never be the span cut at the budget of 40. (The spans before the
    # last one in general are biased short: a long span is more likely to be the one that crosses the budget.)
    generator = torch.Generator().manual_seed(3)
    selected, span_id = select_spans(torch.ones(2000, 2000, dtype=torch.bool), 40, 0.2, 10, generator)
    assert (selected.sum(1) == 40).all()  # the budget is met exactly
    lengths = []
    for row in span_id:
        ids, counts = row[row >= 0].unique(return_counts=True)
        lengths += counts[:3].tolist()
    observed = torch.bincount(torch.tensor(lengths), minlength=11)[1:].double()
    expected = distribution * observed.sum()
    chi_square = float(((observed - expected) ** 2 / expected).sum())
    assert chi_square < 27.9  # 9 degrees of freedom, p = 0.001
    assert max(lengths) <= 10


def test_span_masking_decides_80_10_10_per_span():
    objective = build_run_objective("mlm:span=geometric", RunConfig(budget_flops=1, model="tiny"),
                                    type("C", (), {"vocab": Vocab.for_words(50), "seq_len": 256})())
    batch = objective.corrupt(torch.randint(4, 54, (50, 256), generator=torch.Generator().manual_seed(4)),
                              torch.Generator().manual_seed(4))
    assert ((batch.targets != IGNORE).sum(1) == round(0.15 * 256)).all()
    kinds = batch.info["rewrite"]
    selected = batch.targets != IGNORE
    runs = 0
    for row in range(50):  # contiguous chosen stretches mostly share one kind
        positions = selected[row].nonzero().squeeze(1).tolist()
        for a, b in zip(positions, positions[1:]):
            if b == a + 1:
                runs += kinds[row, a] != kinds[row, b]
    assert runs < 0.1 * selected.sum()  # per-token decisions would differ ~35 % of the time


@pytest.mark.parametrize("static, expected", [(3, 3), (0, 6)])
def test_static_masking_repeats_exactly_static_ways(static, expected):
    vocab = Vocab.for_words(50)
    spec = f"mlm:static={static}" if static else "mlm"
    objective = build_run_objective(spec, RunConfig(budget_flops=1, model="tiny"),
                                    type("C", (), {"vocab": vocab, "seq_len": 32})())
    windows = torch.randint(4, 54, (8, 32), generator=torch.Generator().manual_seed(5))
    masks = {i: set() for i in range(8)}
    for step in range(12):  # batch 4 over 8 windows: 6 epochs
        batch = training_batch(objective, windows, 0, step, 4)
        for row, window in enumerate(range(step * 4 % 8, step * 4 % 8 + 4)):
            assert torch.equal(batch.original[row], windows[window])
            masks[window].add(tuple(batch.inputs[row].tolist()))
    assert all(len(seen) == expected for seen in masks.values())


def write_bad(tmp_path, kind: str):
    path = tmp_path / "bad.txt"
    if kind == "missing":
        return f"text:{tmp_path / 'nope.txt'}"
    if kind == "empty":
        path.write_text("")
    elif kind == "utf8":
        path.write_bytes(b"good line\nbad \xff\xfe line\n" * 10)
    elif kind == "small":
        path.write_text("one short line\nand another\n")
    elif kind == "no_field":
        path = tmp_path / "bad.jsonl"
        path.write_text("\n".join(json.dumps({"body": f"line {i}"}) for i in range(20)))
    return f"text:{path}"


@pytest.mark.parametrize("kind, message", [("missing", "no such file or folder"), ("empty", "is empty"),
                                           ("utf8", "not valid UTF-8"), ("small", "too small for one window"),
                                           ("no_field", "has no 'text' field")])
def test_bad_corpora_are_one_line_errors_and_write_nothing(kind, message, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        run(main, ["--data", write_bad(tmp_path, kind), "--model", "tiny", "--seq-len", "32", "--out", str(out)])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert message in stderr and len(stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_unknown_hub_dataset_offline_fails_at_once(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as exit_info:
        run(main, ["--data", "hf:no-such/dataset", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "cannot be reached" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


TRAIN = """
import sys
from bench.data.text import train_tokenizer
print(train_tokenizer(open(sys.argv[1]).read().splitlines(), 300).to_str())
"""


@pytest.mark.slow  # a second process
def test_two_trainings_of_the_tokenizer_on_one_corpus_give_the_same_file(tmp_path):
    # The library's own trainer numbers its "##" pieces in a hash map's order, seeded anew for every map: on this
    # corpus five plain trainings in one process gave five different files, and so did three processes.
    path = tmp_path / "corpus.txt"
    english_like(path, 400, seed=5)
    texts = path.read_text().splitlines()
    files = [train_tokenizer(texts, 300).to_str() for _ in range(3)]
    files.append(subprocess.run([sys.executable, "-c", TRAIN, str(path)], capture_output=True, text=True,
                                check=True).stdout.rstrip("\n"))
    assert all(file == files[0] for file in files)
    tokenizer = Tokenizer.from_str(files[0])
    assert [tokenizer.id_to_token(i) for i in range(5)] == ["[PAD]", "[MASK]", "[BOS]", "[EOS]", "[UNK]"]
    # the "##" pieces handed to the trainer are ordinary vocabulary afterwards: only the five stay special
    assert [token.content for token in tokenizer.get_added_tokens_decoder().values()] == list(SPECIAL_TOKENS)
    encoding = tokenizer.encode(texts[0])
    assert "[UNK]" not in encoding.tokens and tokenizer.decode(encoding.ids) == texts[0].lower()
    assert any(token.startswith("##") for line in texts[:50] for token in tokenizer.encode(line).tokens)


def test_foreign_tokenizers_are_refused(tmp_path, text_file):
    ours = train_tokenizer(["hello world"] * 5, 50)
    assert [ours.id_to_token(i) for i in range(5)] == ["[PAD]", "[MASK]", "[BOS]", "[EOS]", "[UNK]"]
    bert_like = Tokenizer(models.WordPiece({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "hello": 3}, unk_token="[UNK]"))
    bert_like.save(str(tmp_path / "bert_like.json"))
    with pytest.raises(ConfigError, match="must hold"):
        load_corpus(f"text:{text_file}", 32, TextOptions(tokenizer=str(tmp_path / "bert_like.json")))
    with pytest.raises(ConfigError, match="no such tokenizer"):
        load_corpus(f"text:{text_file}", 32, TextOptions(tokenizer=str(tmp_path / "none.json")))


def test_span_masking_at_full_rate_on_short_windows():
    objective = build_run_objective("mlm:span=geometric,rate=1.0", RunConfig(budget_flops=1, model="tiny"),
                                    type("C", (), {"vocab": Vocab.for_words(50), "seq_len": 16})())
    for seed in range(20):  # many rounds are needed to fill a budget of every position
        batch = objective.corrupt(torch.randint(4, 54, (8, 16), generator=torch.Generator().manual_seed(seed)),
                                  torch.Generator().manual_seed(seed))
        assert ((batch.targets != IGNORE).sum(1) == 16).all()


def test_a_changed_language_never_reads_the_windows_cached_for_its_options(monkeypatch, tmp_path):
    # datasets keys its cache on the generator's arguments: the options alone stayed the same when make_language
    # changed, so a corpus sampled from the old language was served for the new one, beside the new one's Bayes floors
    from bench.data import synthetic
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path)
    spec = "synthetic:words=64,lexicon=8,train=8,heldout=4"
    before = load_corpus(spec, 16).windows("train")[:]
    made = synthetic.make_language

    def reversed_words(config):  # another language for the same options: every word's id mirrored
        language = made(config)
        return synthetic.Language(language.prior, language.initial, language.transition,
                                  language.emission.flip(-1).contiguous())

    monkeypatch.setattr(synthetic, "make_language", reversed_words)
    corpus = load_corpus(spec, 16)
    after = corpus.windows("train")[:]
    assert not torch.equal(before, after)
    expected = synthetic.sample(corpus.language, 8, 16, seed=0).words + corpus.vocab.first_ordinary
    assert torch.equal(after, expected)  # the new language's own windows
