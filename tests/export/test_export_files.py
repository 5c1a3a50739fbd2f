"""bench.export's tokenizer and command: the exported tokenizer gives the suite's ids and lays inputs out as the
suite's downstream tasks do; `python -m bench.export` exports a run or a whole comparison, and a bad run folder, an
unfinished run, a run without its checkpoint or an objective without an export mapping is one line and exit 2, with
nothing written."""

import json
import os
import random

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForMaskedLM, AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

import objectives  # noqa: E402
from bench.common.cli import run  # noqa: E402
from bench.data import synthetic  # noqa: E402
from bench.data.corpus import speller  # noqa: E402
from bench.data.text import train_tokenizer, vocab_for_tokenizer  # noqa: E402
from bench.downstream import context_for_run, run_objective  # noqa: E402
from bench.export import export_objective  # noqa: E402
from bench.export import writing  # noqa: E402
from bench.export.__main__ import main as export_main  # noqa: E402
from bench.training.recipe import run_name  # noqa: E402
from bench.yardsticks.examples import TaskContext, encode  # noqa: E402
from objectives import CausalLM, Vocab  # noqa: E402
from objectives.pairs import make_pairs, pair_layout, segments_from_separators  # noqa: E402
from tests.helpers import recorded_settings, written_record  # noqa: E402

SETTINGS = recorded_settings("synthetic:words=64,lexicon=8,topics=2", 16)
WORDS = "wave ship salt harbour tide sail cow field barn wheat tractor street tram tower office".split()


def text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS + ["the", "a", "near"]) for _ in range(rng.randint(3, 9)))


@pytest.fixture(scope="module")
def text_context():
    rng = random.Random(0)
    corpus = [text(rng) for _ in range(300)]
    tokenizer = train_tokenizer(corpus, 60)  # fewer pieces than words: many words split into "##" pieces
    return TaskContext(24, vocab_for_tokenizer(tokenizer), tokenizer=tokenizer), corpus


def exported_tokenizer(spec: str, context: TaskContext, folder) -> PreTrainedTokenizerFast:
    torch.manual_seed(0)
    objective = run_objective(spec, SETTINGS, context)
    return PreTrainedTokenizerFast.from_pretrained(export_objective(objective, context, folder))


# --- the tokenizer ----------------------------------------------------------------------------------------------

def test_a_text_runs_tokenizer_gives_the_suites_ids_and_layouts(text_context, tmp_path):
    context, corpus = text_context
    hf, suite, vocab = exported_tokenizer("mlm", context, tmp_path / "mlm"), context.tokenizer, context.vocab
    sample = corpus[:50]
    assert [hf(line, add_special_tokens=False).input_ids for line in sample] == \
        [suite.encode(line, add_special_tokens=False).ids for line in sample]
    # the downstream tasks' "a [EOS]" and "a [EOS] b [EOS]", truncated to the window the same way (longest first)
    single = encode(context, sample, None, torch.zeros(len(sample)))
    assert hf(sample, truncation=True).input_ids == \
        [row[:length].tolist() for row, length in zip(single.tokens, single.lengths)]
    pairs = encode(context, sample[:25], sample[25:], torch.zeros(25))
    shown = hf(sample[:25], sample[25:], truncation=True, return_token_type_ids=True)
    rows = [row[:length] for row, length in zip(pairs.tokens, pairs.lengths)]
    assert shown.input_ids == [row.tolist() for row in rows]
    assert shown.token_type_ids == [segments_from_separators(row[None])[0].tolist() for row in rows]
    assert len(hf) == vocab.size and hf.model_max_length == context.seq_len
    assert [hf.convert_tokens_to_ids(f"<extra_id_{i}>") for i in range(vocab.num_sentinels)] == \
        [vocab.sentinel(i) for i in range(vocab.num_sentinels)]
    named = (hf.pad_token_id, hf.mask_token_id, hf.bos_token_id, hf.eos_token_id, hf.unk_token_id)
    assert named == (Vocab.PAD, Vocab.MASK, Vocab.BOS, Vocab.EOS, 4)
    loaded = AutoTokenizer.from_pretrained(tmp_path / "mlm", trust_remote_code=True)
    assert loaded(sample).input_ids == hf(sample).input_ids
    assert max(len(row) for row in hf(sample).input_ids) > context.seq_len  # the sample did need truncating


def test_the_embedded_languages_tokenizer_reads_its_words_as_synthetic_text_spells_them(tmp_path):
    context = context_for_run(tmp_path, SETTINGS)
    hf, vocab = exported_tokenizer("mlm", context, tmp_path / "mlm"), context.vocab
    spell = speller(vocab.num_ordinary)
    words = synthetic.sample(context.language, 8, context.seq_len, 5).words  # a sample of the corpus's windows
    texts = [" ".join(spell(word) for word in row) for row in words.tolist()]
    assert hf(texts).input_ids == (words + vocab.first_ordinary).tolist()  # a window as it is
    pairs = make_pairs("sop", words + vocab.first_ordinary, torch.Generator().manual_seed(0))
    laid_out, segments, _ = pair_layout(pairs, vocab)  # the embedded pair tasks' "[BOS] a [EOS] b [EOS]"
    first = [" ".join(spell(w - 4) for w in row[:h].tolist()) for row, h in zip(pairs.content, pairs.first_length)]
    second = [" ".join(spell(w - 4) for w in row[h:].tolist()) for row, h in zip(pairs.content, pairs.first_length)]
    shown = hf(first, second, return_token_type_ids=True)
    assert shown.input_ids == laid_out.tolist() and shown.token_type_ids == segments.tolist()
    assert len(hf) == vocab.size
    # a word the language never makes is read as a word the model cannot see, never an error
    known = texts[0].split()[0]
    assert hf(f"{known} hippopotamus").input_ids == [vocab.first_ordinary + words[0, 0].item(), vocab.MASK]


def test_a_causal_exports_bos_is_eos_and_starts_a_text(text_context, tmp_path):
    context, corpus = text_context
    hf = exported_tokenizer("ar", context, tmp_path / "ar")
    assert (hf.bos_token, hf.eos_token) == ("[EOS]", "[EOS]")
    assert hf(corpus[:5]).input_ids == [[Vocab.EOS] + context.tokenizer.encode(line).ids for line in corpus[:5]]
    embedded = context_for_run(tmp_path, SETTINGS)  # no token starts the embedded language's windows
    words = " ".join(speller(embedded.vocab.num_ordinary)(w) for w in range(5))
    assert exported_tokenizer("ar", embedded, tmp_path / "ar-embedded")(words).input_ids == [4, 5, 6, 7, 8]
    assert "token_type_ids" not in hf(corpus[:2])  # GPT-NeoX takes none


# --- the command ------------------------------------------------------------------------------------------------

def finished_comparison(root, specs: list[str]):
    """A comparison's folder as bench.compare leaves it: config.json, and per run its result.json and final
    checkpoint (random weights), beside an untrained control."""
    context = context_for_run(root, SETTINGS)
    (root / "runs").mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(SETTINGS))
    for spec in specs:
        folder = root / "runs" / run_name(spec, 0)
        folder.mkdir()
        torch.manual_seed(1)
        objective = run_objective(spec, SETTINGS, context)
        torch.save({"model": objective.state_dict()}, folder / "checkpoint.pt")
        (folder / "result.json").write_text(written_record(objective=spec, seed=0))
    control = root / "runs" / "untrained-bidirectional-seed0"
    control.mkdir()
    (control / "result.json").write_text(written_record(control="untrained, bidirectional", read_as="mlm", seed=0))
    return root


def test_export_writes_a_run_and_every_run_of_a_comparison(tmp_path, capsys):
    root = finished_comparison(tmp_path / "cmp", ["mlm", "ar", "electra"])
    export_main([str(root / "runs" / "mlm-seed0"), "--out", str(tmp_path / "one")])
    assert "ObjectiveBenchForMaskedLM" in capsys.readouterr().out
    objective = run_objective("mlm", SETTINGS, context_for_run(root, SETTINGS))
    objective.load_state_dict(torch.load(root / "runs" / "mlm-seed0" / "checkpoint.pt", weights_only=True)["model"])
    ids = torch.randint(4, 36, (2, 16))
    with torch.no_grad():  # the checkpoint's weights, not the objective's initial ones
        expected = objective.vocabulary_logits(objective.backbone(ids, attention="bidirectional"))
        loaded = AutoModelForMaskedLM.from_pretrained(tmp_path / "one", trust_remote_code=True)
        assert torch.equal(loaded(ids).logits, expected)
    export_main([str(root), "--all", "--out", str(tmp_path / "all")])
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == ["ar-seed0", "electra-seed0", "mlm-seed0"]
    assert (tmp_path / "all" / "electra-seed0" / "generator" / "model.safetensors").is_file()
    config = json.loads((tmp_path / "all" / "ar-seed0" / "config.json").read_text())
    assert config["architectures"] == ["GPTNeoXForCausalLM"] and config["objective_bench"]["objective"] == "ar"


class Unmapped(CausalLM):
    name = "unmapped"


def broken(root, case: str):
    """The run folder of `case`, broken as it says."""
    run_folder = root / "runs" / "mlm-seed0"
    if case == "not a folder":
        return root / "nowhere"
    if case == "not a run":
        return root
    if case == "unfinished":
        (run_folder / "result.json").unlink()
    elif case == "no checkpoint":
        (run_folder / "checkpoint.pt").unlink()
    elif case == "a control":
        return root / "runs" / "untrained-bidirectional-seed0"
    elif case == "unreadable checkpoint":
        (run_folder / "checkpoint.pt").write_bytes(b"not a checkpoint")
    elif case == "no export mapping":
        return root / "runs" / "unmapped-seed0"
    return run_folder


@pytest.mark.parametrize("case,message", [
    ("not a folder", "is not a folder"), ("not a run", "add --all"), ("unfinished", "has not finished"),
    ("no checkpoint", "has no checkpoint.pt"), ("a control", "untrained control"),
    ("unreadable checkpoint", "could not be loaded"), ("no export mapping", "has no export mapping")])
def test_a_bad_run_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, monkeypatch, case, message):
    monkeypatch.setitem(objectives.REGISTRY, "unmapped", Unmapped)
    root = finished_comparison(tmp_path / "cmp", ["mlm", "unmapped"])
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        run(export_main, [str(broken(root, case)), "--out", str(out)])
    error = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and error.count("\n") == 0 and message in error
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["cmp"]


def test_an_existing_folder_and_a_missing_package_are_one_line_and_nothing_is_written(tmp_path, capsys, monkeypatch):
    root = finished_comparison(tmp_path / "cmp", ["mlm"])
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        run(export_main, [str(root / "runs" / "mlm-seed0"), "--out", str(tmp_path / "taken")])
    assert exit_info.value.code == 2 and "not an empty folder" in capsys.readouterr().err
    real_import = writing.import_module

    def without_safetensors(name: str):
        if name.startswith("safetensors"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name)

    monkeypatch.setattr(writing, "import_module", without_safetensors)
    with pytest.raises(SystemExit) as exit_info:
        run(export_main, [str(root / "runs" / "mlm-seed0"), "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and error.count("\n") == 0 and "objective-bench[export]" in error
    assert not (tmp_path / "out").exists()
