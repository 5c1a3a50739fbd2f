import json
import random
import re

import datasets
import pytest
import torch

from backbone import Backbone, ConfigError, measure_flops, resolve_model
from bench.common.cli import run
from bench.compare import main as compare_main
from bench.data import synthetic
from bench.data.corpus import speller, synthetic_language
from bench.data.text import train_tokenizer, vocab_for_tokenizer
from bench.downstream import context_for_run, main as downstream_main
from bench.yardsticks import readout, text_tasks
from bench.yardsticks.downstream import (Classifier, Downstream, FinetuneConfig, finetune, frozen_probe, hidden_states,
                                         pool, reading, reads_left_to_right, representations, scores)
from bench.yardsticks.embedded_tasks import asked_positions
from bench.yardsticks.examples import Split, Task, TaskContext
from bench.yardsticks.probes import ProbeConfig
from bench.yardsticks.readout import fit_linear_probe
from bench.yardsticks.tasks import load_task, parse_task_list
from objectives import IGNORE, Vocab, build_objective

from tests.helpers import recorded_settings

TOPICS = {"sea": "wave ship salt harbour tide sail fish shore anchor deep".split(),
          "farm": "cow field barn wheat tractor hay goat plough seed fence".split(),
          "city": "street tram tower office traffic bridge shop crowd lamp square".split()}
COMMON = "the a and of to in with near over under".split()


def sentence(topic: str, rng: random.Random) -> str:
    words = [rng.choice(TOPICS[topic]) if rng.random() < 0.5 else rng.choice(COMMON) for _ in range(rng.randint(5, 12))]
    return " ".join(words)


@pytest.fixture(scope="module")
def text_files(tmp_path_factory):
    """A small two-file world: a pretraining corpus and a labelled topic task, both made here."""
    folder = tmp_path_factory.mktemp("text")
    rng = random.Random(0)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(sentence(rng.choice(list(TOPICS)), rng) for _ in range(600)) + "\n")
    rows = [{"text": sentence(topic, rng), "label": topic} for topic in TOPICS for _ in range(40)]
    rng.shuffle(rows)
    task = folder / "topics.jsonl"
    task.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


@pytest.fixture(scope="module")
def text_context(text_files):
    tokenizer = train_tokenizer((line for line in (text_files / "corpus.txt").read_text().splitlines()), 120)
    return TaskContext(24, vocab_for_tokenizer(tokenizer), tokenizer=tokenizer)


@pytest.fixture(scope="module")
def synthetic_context():
    options, _, language = synthetic_language("words=64,lexicon=8,topics=2")
    return TaskContext(16, Vocab.for_words(options.words), language=language)


def tiny_objective(spec: str, context: TaskContext, seed: int = 0):
    torch.manual_seed(seed)
    backbone = Backbone(resolve_model("tiny", context.vocab.size, max_seq_len=context.seq_len))
    return build_objective(spec, backbone, context.vocab)


# --- metrics: the library's values on cases worked out by hand -------------------------------------------------------

def classification_task(metrics: tuple[str, ...], classes: int = 2) -> Task:
    empty = Split(torch.zeros(0, 4, dtype=torch.long), torch.zeros(0, dtype=torch.long), torch.zeros(0))
    return Task("toy", "sequence", metrics, [str(i) for i in range(classes)], empty, empty, empty, "hand-made")


def test_metrics_on_cases_with_known_answers():
    truth = torch.tensor([0, 1, 1, 0])
    split = Split(torch.zeros(4, 4, dtype=torch.long), torch.full((4,), 4), truth)
    predicted = torch.tensor([0, 1, 0, 0])
    # TP 1, TN 2, FP 0, FN 1: precision 1, recall 1/2; MCC = (1·2 − 0·1) / sqrt(1 · 2 · 2 · 3)
    values = scores(classification_task(("accuracy", "f1", "mcc")), predicted, split)
    assert values["accuracy"] == pytest.approx(0.75)
    assert values["f1"] == pytest.approx(2 / 3)
    assert values["mcc"] == pytest.approx(2 / 12 ** 0.5)
    assert values["score"] == pytest.approx((0.75 + 2 / 3 + 2 / 12 ** 0.5) / 3)  # GLUE averages a task's metrics
    # macro F1 over 3 classes: class 0 F1 1, class 1 F1 2/3 (P 1, R 1/2), class 2 F1 0 (never predicted nor true)
    three = Split(torch.zeros(3, 4, dtype=torch.long), torch.full((3,), 4), torch.tensor([0, 1, 1]))
    macro = scores(classification_task(("macro_f1",), classes=3), torch.tensor([0, 1, 0]), three)
    assert macro["macro_f1"] == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)


def test_span_f1_counts_whole_entities():
    names = ["B-LOC", "B-PER", "I-PER", "O"]
    labels = torch.full((2, 6), IGNORE)
    labels[0, :4] = torch.tensor([1, 2, 3, 0])  # PER span, O, LOC
    labels[1, :2] = torch.tensor([1, 3])  # PER, O
    split = Split(torch.zeros(2, 6, dtype=torch.long), torch.tensor([5, 3]), labels)
    task = Task("ner", "token", ("span_f1", "accuracy"), names, split, split, split, "hand-made")
    # predicted: the first PER span right, the LOC missed, the second PER cut to B only (still one right entity)
    predicted = torch.tensor([1, 2, 3, 3, 1, 3])
    values = scores(task, predicted, split)
    # true entities 3 (PER, LOC, PER), predicted 2, both right: P = 1, R = 2/3, F1 = 0.8
    assert values["span_f1"] == pytest.approx(0.8)
    assert values["accuracy"] == pytest.approx(5 / 6)


def test_the_trivial_baseline_is_the_majority_training_label_on_test():
    split = lambda labels: Split(torch.zeros(len(labels), 3, dtype=torch.long), torch.full((len(labels),), 3),  # noqa
                                 torch.tensor(labels))
    task = Task("x", "sequence", ("accuracy",), ["a", "b", "c"], split([1, 1, 0, 2]), split([0]), split([1, 0, 0, 1]),
                "hand-made")
    assert task.majority_accuracy() == 0.5  # label 1 is the majority in training; half the test labels are 1
    tags = Task("t", "token", ("accuracy",), ["O", "X"], split([[0, 0, IGNORE], [1, IGNORE, IGNORE]]), split([[0]]),
                split([[1, 0, 0], [IGNORE, IGNORE, 1]]), "hand-made")
    assert tags.majority_accuracy() == 0.5  # tag O (2 of 3 scored training tags) is 2 of the 4 scored test tags


def test_frozen_probe_reaches_one_on_separable_features_and_chance_on_shuffled_labels():
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(2, (400,), generator=generator)
    features = torch.randn(400, 8, generator=generator) + 4 * labels[:, None].float()
    accuracy, _, _ = fit_linear_probe(features[:300], labels[:300], features[300:], labels[300:], 2, ProbeConfig())
    assert accuracy == 1.0
    shuffled = labels[:300][torch.randperm(300, generator=generator)]
    accuracies = [fit_linear_probe(features[:300], shuffled.roll(k), features[300:], labels[300:], 2,
                                   ProbeConfig())[0] for k in range(5)]
    assert 0.35 < sum(accuracies) / len(accuracies) < 0.65  # 2 balanced classes: 0.5 expected


# --- tasks ----------------------------------------------------------------------------------------------------------

def test_task_lists_split_like_objective_lists():
    assert parse_task_list("a.csv,label=y,text=t, hf:glue:sst2,conll:ner/") == ["a.csv,label=y,text=t", "hf:glue:sst2",
                                                                              "conll:ner/"]


def test_file_task_draws_fixed_splits_and_tokenizes_with_eos(text_files, text_context):
    task = load_task(str(text_files / "topics.jsonl"), text_context)
    again = load_task(str(text_files / "topics.jsonl"), text_context)
    # test: 20 % of 120 = 24; dev: 10 % of the other 96, rounded = 10; train: the other 86
    assert (len(task.train), len(task.dev), len(task.test)) == (86, 10, 24)
    assert torch.equal(task.test.tokens, again.test.tokens)  # a fixed seed
    assert task.label_names == ["city", "farm", "sea"] and task.metrics == ("accuracy",)
    # named in reports by its file, loaded again (config.json) by its spec
    assert task.name == "topics" and task.spec == str(text_files / "topics.jsonl") and "topics.jsonl" in task.source
    assert Downstream([task], FinetuneConfig()).settings()["tasks"] == [task.spec]
    for split in (task.train, task.test):
        last = split.tokens[torch.arange(len(split)), split.lengths - 1]
        assert (last == Vocab.EOS).all()
        beyond = torch.arange(split.tokens.shape[1])[None, :] >= split.lengths[:, None]
        assert (split.tokens[beyond] == Vocab.PAD).all()


def test_pair_task_is_a_eos_b_eos_truncating_the_longer_side(tmp_path, text_context):
    rows = [{"premise": "wave " * 40, "hypothesis": "cow field", "label": i % 2} for i in range(20)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    task = load_task(f"{path},text=premise,text_pair=hypothesis", text_context)
    tokens, length = task.train.tokens[0], task.train.lengths[0]
    assert task.pair and length == text_context.seq_len
    eos = (tokens == Vocab.EOS).nonzero().flatten().tolist()
    second = text_context.tokenizer.encode("cow field", add_special_tokens=False).ids
    assert eos == [text_context.seq_len - len(second) - 2, text_context.seq_len - 1]
    assert tokens[eos[0] + 1:eos[1]].tolist() == second  # the short side kept whole


@pytest.fixture
def recorded_samples(monkeypatch):
    """The windows the embedded tasks draw, by number of windows."""
    drawn = {}
    real_sample = synthetic.sample

    def recording(language, count, length, seed):
        drawn[count] = real_sample(language, count, length, seed)
        return drawn[count]

    monkeypatch.setattr(synthetic, "sample", recording)
    return drawn


def segments_of(row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, b) of a laid-out pair "[BOS] a [EOS] b [EOS]", found by reading the row (its words are never specials)."""
    assert row[0] == Vocab.BOS and row[-1] == Vocab.EOS
    separators = (row == Vocab.EOS).nonzero().squeeze(1).tolist()
    assert len(separators) == 2
    return row[1:separators[0]], row[separators[0] + 1:-1]


def mid_sequence(sample, context):
    """The windows the pair tasks cut their pairs from: times T .. 2T − 1 of each sampled sequence, as tokens."""
    assert sample.words.shape[1] == 2 * context.seq_len
    return sample.words[:, context.seq_len:] + context.vocab.first_ordinary


def test_order_negatives_are_exact_swaps_of_sampled_windows(synthetic_context, recorded_samples):
    order = load_task("synthetic:order,size=32", synthetic_context)
    windows = mid_sequence(recorded_samples[32], synthetic_context)
    content = synthetic_context.seq_len - 3
    assert 0 < order.train.labels.sum() < 32
    for row, window, label in zip(order.train.tokens, windows, order.train.labels):
        a, b = segments_of(row)
        shown = torch.cat([a, b]) if label == 1 else torch.cat([b, a])
        assert torch.equal(shown, window[:content])
        assert content // 4 <= len(a) <= content - content // 4  # the cut's range is symmetric: a swap hides nothing


def test_same_source_negatives_take_the_second_half_of_another_window(synthetic_context, recorded_samples):
    same = load_task("synthetic:same-source,size=32", synthetic_context)
    windows = mid_sequence(recorded_samples[32], synthetic_context)
    content = synthetic_context.seq_len - 3
    assert 0 < same.train.labels.sum() < 32
    for i, (row, label) in enumerate(zip(same.train.tokens, same.train.labels)):
        a, b = segments_of(row)
        assert torch.equal(a, windows[i, :len(a)])
        sources = [j for j in range(32) if torch.equal(windows[j, len(a):content], b)]
        # a short b may occur in several windows; a negative's must occur in another one
        assert i in sources if label == 1 else any(j != i for j in sources)


def test_embedded_tasks_on_synthetic_text_are_the_samples_spelled_and_tokenized(recorded_samples):
    options, _, language = synthetic_language("words=64,lexicon=8,topics=2")
    spell = speller(options.words)
    sentences = [" ".join(spell(w) for w in range(i, i + 8)) for i in range(0, 24)]
    tokenizer = train_tokenizer(sentences * 4, 40)  # fewer pieces than words: most words split
    context = TaskContext(24, vocab_for_tokenizer(tokenizer), tokenizer, language, spell)
    tagging = load_task("synthetic:states,size=8", context)
    drawn = recorded_samples[8]
    component = load_task("synthetic:topic,size=8", context)
    asked = asked_positions(language, drawn.words, 24)
    for row, labels, words, states, ask in zip(tagging.train.tokens, tagging.train.labels, drawn.words, drawn.states,
                                               asked):
        tagged = (labels != IGNORE).nonzero().squeeze(1).tolist()
        encoding = tokenizer.encode([spell(w) for w in words.tolist()], is_pretokenized=True, add_special_tokens=False)
        starts = [i for i, w in enumerate(encoding.word_ids[:23]) if i == 0 or w != encoding.word_ids[i - 1]]
        # the first piece of each visible word whose word alone leaves its state open, and nothing else
        assert tagged == [start for word, start in enumerate(starts) if ask[word]]
        asked_states = states[:len(starts)][ask[:len(starts)]] % language.emission.shape[1]
        assert labels[tagged].tolist() == language.category[asked_states].tolist()  # each asked word's category
        assert row[:23].tolist() == encoding.ids[:23]
    assert torch.equal(component.train.labels, recorded_samples[8].components)
    assert tagging.ceilings == {} and "spelled as synthetic:text" in tagging.source
    with pytest.raises(ConfigError, match="pair tasks need --data synthetic"):
        load_task("synthetic:order", context)


def test_an_embedded_task_scored_by_another_metric_carries_no_accuracy_bounds(synthetic_context):
    """Its Bayes ceilings and input-only value are accuracies: beside an MCC (chance 0, not 1/K) they would bound
    nothing, and the verdict's share of the gain would divide an MCC gain by an accuracy's headroom."""
    accuracy = load_task("synthetic:topic,size=16", synthetic_context)
    mcc = load_task("synthetic:topic,size=16,metric=mcc", synthetic_context)
    assert accuracy.ceilings and accuracy.input_only is not None
    assert mcc.metrics == ("mcc",) and mcc.ceilings == {} and mcc.input_only is None


def test_every_backbone_reads_a_sequence_as_the_mean_of_its_tokens(synthetic_context):
    """One read for all: a causal backbone is mean-pooled as a bidirectional one is, pairs included; the padding
    after an example's end is left out."""
    order, component = (load_task(f"synthetic:{name},size=8", synthetic_context) for name in ("order", "topic"))
    mlm, ar = tiny_objective("mlm:pair=sop", synthetic_context), tiny_objective("ar", synthetic_context)
    assert {reading(o, t) for o in (mlm, ar) for t in (order, component)} == {"mean"}
    hidden = hidden_states(ar.backbone, True, order.train)
    features, _ = representations(hidden, order.train, "sequence", "mean", True)
    for row, length in enumerate(order.train.lengths.tolist()):
        assert torch.allclose(features[row], hidden[row, :length].mean(0), atol=1e-6)
    assert torch.equal(pool(hidden, order.train.lengths, "first"), hidden[:, 0])  # each family's own reads remain
    assert torch.equal(pool(hidden, order.train.lengths, "last"), hidden[torch.arange(len(hidden)),
                                                                            order.train.lengths - 1])


def test_a_finished_synthetic_text_comparison_spells_its_tasks_again(tmp_path):
    spell = speller(128)
    tokenizer = train_tokenizer([" ".join(spell(w) for w in range(i, i + 8)) for i in range(0, 120)] * 2, 60)
    (tmp_path / "tokenizer.json").write_text(tokenizer.to_str())
    context = context_for_run(tmp_path, recorded_settings("synthetic:text", "32"))
    assert context.language is not None and context.tokenizer is not None
    assert [context.spell(w) for w in (0, 7, 127)] == [spell(w) for w in (0, 7, 127)]
    assert "spelled as synthetic:text" in load_task("synthetic:topic,size=8", context).source


def test_conll_first_piece_carries_the_tag_and_bio_means_span_f1(tmp_path, text_context):
    folder = tmp_path / "ner"
    folder.mkdir()
    block = "-DOCSTART- O\n\nwave B-SEA\nharbour I-SEA\nnear O\ncow B-FARM\n\nthe O\ntractor B-FARM\n\n"
    for name in ("train.txt", "dev.txt", "test.txt"):
        (folder / name).write_text(block * 3)
    task = load_task(f"conll:{folder}", text_context)
    assert task.level == "token" and task.metrics == ("span_f1",) and len(task.train) == 6
    assert (task.name, task.spec) == ("ner", f"conll:{folder}")
    words = ["wave", "harbour", "near", "cow"]
    encoding = text_context.tokenizer.encode(words, is_pretokenized=True, add_special_tokens=False)
    first_pieces = [encoding.word_ids.index(w) for w in range(len(words))]
    labels = task.train.labels[0]
    assert (labels != IGNORE).nonzero().flatten().tolist() == first_pieces
    assert [task.label_names[i] for i in labels[labels != IGNORE]] == ["B-SEA", "I-SEA", "O", "B-FARM"]


def test_a_conll_token_tagged_underscore_is_context_never_scored(tmp_path, text_context):
    # docs_corpus.py's replaced-word task asks about some words of each passage: the rest are "_", read not scored
    block = "wave _\nharbour original\nnear _\ncow replaced\n\nthe _\ntractor original\n\n"
    path = tmp_path / "replaced.conll"
    path.write_text(block * 10)
    task = load_task(f"conll:{path},test=0.2,dev=0.2", text_context)
    assert task.label_names == ["original", "replaced"] and task.metrics == ("accuracy",)  # "_" is not a tag
    words = ["wave", "harbour", "near", "cow"]
    encoding = text_context.tokenizer.encode(words, is_pretokenized=True, add_special_tokens=False)
    first = {w: encoding.word_ids.index(w) for w in range(len(words))}
    rows = [row for row in range(len(task.train))
            if (task.train.tokens[row, :len(encoding.ids)] == torch.tensor(encoding.ids)).all()]
    assert rows  # the four-word passage is in the training split
    for row in rows:
        labels = task.train.labels[row]
        assert (labels != IGNORE).nonzero().flatten().tolist() == [first[1], first[3]]
        assert labels[first[1]] == 0 and labels[first[3]] == 1
    path.write_text("wave _\ncow _\n\n" * 10)
    with pytest.raises(ConfigError, match="unscored"):
        load_task(f"conll:{path}", text_context)


def test_hub_tasks_load_through_datasets(tmp_path, monkeypatch, text_context):
    """A local folder laid out like the hub's nyu-mll/glue stands in for it: the same `datasets` loading code."""
    root = tmp_path / "glue"
    rng = random.Random(1)
    features = datasets.Features({"sentence1": datasets.Value("string"), "sentence2": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["not_equivalent", "equivalent"])})
    for split, count in (("train", 60), ("validation", 20), ("test", 10)):
        rows = {"sentence1": [sentence("sea", rng) for _ in range(count)],
                "sentence2": [sentence("farm", rng) for _ in range(count)],
                "label": [-1 if split == "test" else i % 2 for i in range(count)]}
        (root / "mrpc").mkdir(parents=True, exist_ok=True)
        datasets.Dataset.from_dict(rows, features=features).to_parquet(str(root / "mrpc" / f"{split}-0.parquet"))
    (root / "README.md").write_text("---\nconfigs:\n- config_name: mrpc\n  data_files:\n"
                                    + "".join(f"  - split: {s}\n    path: mrpc/{s}-*\n"
                                              for s in ("train", "validation", "test")) + "---\n")
    monkeypatch.setitem(text_tasks.HUB_REPOS, "glue", str(root))
    task = load_task("hf:glue:mrpc", text_context)
    assert task.pair and task.metrics == ("f1", "accuracy")
    assert task.label_names == ["not_equivalent", "equivalent"]  # the dataset's order: "equivalent" (1) is positive
    assert len(task.test) == 20  # GLUE's hidden test labels: the validation split is the test split
    assert len(task.train) + len(task.dev) == 60
    with pytest.raises(ConfigError, match="not supported"):
        load_task("hf:glue:stsb", text_context)


@pytest.mark.parametrize("rows, options, message", [
    ([{"text": "wave", "y": 1}, {"text": "cow", "y": 0}] * 10, "", "no 'label' field.*label=FIELD"),
    ([{"text": "wave", "label": 1}] * 20, "", "at least 2 classes"),
    ([{"text": "", "label": i % 2} for i in range(20)], "", "every training text .* is empty"),
])
def test_bad_tasks_are_one_line_errors_naming_the_file(tmp_path, text_context, rows, options, message):
    path = tmp_path / "task.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(ConfigError, match=message) as error:
        load_task(f"{path}{options}", text_context)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_test_label_unseen_in_training_and_a_mislabelled_file_are_refused(tmp_path, text_context):
    train, test = tmp_path / "train.csv", tmp_path / "held.csv"
    train.write_text("text,label\n" + "".join(f"wave {i},{i % 2}\n" for i in range(20)))
    test.write_text("text,label\nwave,0\ncow,7\n")
    with pytest.raises(ConfigError, match="label '7', which never appears in training"):
        load_task(f"{train},test={test}", text_context)
    fake = tmp_path / "fake.parquet"
    fake.write_text("this is not parquet\n")
    with pytest.raises(ConfigError, match="fake.parquet.*could not read it as parquet"):
        load_task(str(fake), text_context)


def test_text_tasks_on_the_embedded_language_say_what_to_use(synthetic_context):
    with pytest.raises(ConfigError, match="synthetic:states"):
        load_task("some.csv", synthetic_context)


# --- reading and fine-tuning ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["mlm", "ar", "span"])
def test_padding_never_reaches_the_real_tokens(spec, text_context):
    objective = tiny_objective(spec, text_context)
    causal = objective.probe_attention(24)["attention"] == "causal"
    example = torch.randint(5, 100, (1, 10))
    long, short = torch.zeros(1, 24, dtype=torch.long), torch.zeros(1, 12, dtype=torch.long)
    long[:, :10], short[:, :10] = example, example
    hidden_long = hidden_states(objective.backbone, causal, Split(long, torch.tensor([10]), torch.zeros(1)))
    hidden_short = hidden_states(objective.backbone, causal, Split(short, torch.tensor([10]), torch.zeros(1)))
    assert torch.allclose(hidden_long[:, :10], hidden_short[:, :10], atol=1e-5)


@pytest.mark.slow
def test_the_rate_is_chosen_on_dev_and_test_never_influences_it(text_files, text_context):
    task = load_task(str(text_files / "topics.jsonl"), text_context)
    objective = tiny_objective("mlm", text_context)
    config = FinetuneConfig(steps=4, batch=8, lrs=(1e-4, 3e-3), probe=ProbeConfig(iterations=5))
    _, _, head = frozen_probe(objective, task, config)
    result, _ = finetune(objective, task, head, config)
    # scramble the test split completely: the dev scores and the chosen rate must not move
    generator = torch.Generator().manual_seed(3)
    scrambled = Task(task.name, task.level, task.metrics, task.label_names, task.train, task.dev,
                     Split(torch.randint(5, 100, task.test.tokens.shape, generator=generator), task.test.lengths,
                           torch.randint(3, (len(task.test),), generator=generator)), task.source)
    again, _ = finetune(objective, scrambled, head, config)
    assert again["dev"] == result["dev"] and again["lr"] == result["lr"]
    assert result["lr"] == max(config.lrs, key=lambda lr: (result["dev"][f"{lr:g}"], -config.lrs.index(lr)))


@pytest.mark.parametrize("spec, level", [("mlm", "sequence"), ("ar", "sequence"), ("mlm", "token")])
def test_frozen_probe_flops_equal_flop_counter_mode(spec, level, text_files, text_context, synthetic_context):
    context = synthetic_context if level == "token" else text_context
    task = load_task("synthetic:states,size=16" if level == "token" else str(text_files / "topics.jsonl"), context)
    config = FinetuneConfig(probe=ProbeConfig(iterations=3))
    found = {}
    measured = measure_flops(lambda: found.update(flops=frozen_probe(tiny_objective(spec, context), task,
                                                                     config)[1]))
    assert found["flops"] == measured


@pytest.mark.parametrize("spec, level", [("mlm", "sequence"), ("ar", "sequence"), ("mlm", "token")])
def test_finetuning_flops_equal_flop_counter_mode(spec, level, text_files, text_context, synthetic_context):
    context = synthetic_context if level == "token" else text_context
    task = load_task("synthetic:states,size=16" if level == "token" else str(text_files / "topics.jsonl"), context)
    objective = tiny_objective(spec, context)
    config = FinetuneConfig(steps=1, batch=4, lrs=(1e-3,), probe=ProbeConfig(iterations=2))
    _, _, head = frozen_probe(objective, task, config)
    model = Classifier(objective.backbone, head, reading(objective, task), level, reads_left_to_right(objective))
    batch = task.train.rows(slice(0, 4))
    measured_step = measure_flops(lambda: model.loss(batch).backward())
    measured_dev = measure_flops(lambda: model.predict(task.dev))
    measured_test = measure_flops(lambda: model.predict(task.test))
    _, flops = finetune(objective, task, head, config)
    # standardisation, pooling, layer norms and the loss are elementwise: FlopCounterMode counts matrix products only
    assert flops == measured_step + measured_dev + measured_test


@pytest.mark.parametrize("spec", ["ar", "mlm"])
def test_a_causal_reader_reads_a_hidden_word_at_the_word_before(spec, tmp_path, text_context):
    # docs_corpus.py's hidden-word task shows the word as [MASK]: a causal backbone is asked at the position before,
    # where it has seen exactly the words before the hidden one, in the frozen probe and in fine-tuning alike
    path = tmp_path / "hidden.conll"
    path.write_text("wave _\nharbour _\n[MASK] the\ncow _\n\nnear _\n[MASK] a\ntractor _\n\n" * 10)
    task = load_task(f"conll:{path},test=0.2,dev=0.2", text_context)
    assert (task.train.tokens == Vocab.MASK).sum() == len(task.train)  # [MASK] is the special token, not pieces
    objective = tiny_objective(spec, text_context)
    causal, read = reads_left_to_right(objective), reading(objective, task)
    assert causal == (spec == "ar")
    hidden = hidden_states(objective.backbone, causal, task.train)
    features, labels = representations(hidden, task.train, "token", read, causal)
    rows, at = (task.train.tokens == Vocab.MASK).nonzero(as_tuple=True)
    assert torch.equal(features, hidden[rows, at - int(causal)]) and torch.equal(labels, task.train.labels[rows, at])
    # the word after the hidden one changes nothing a causal reader reads there, and what a bidirectional one reads
    other = Split(task.train.tokens.clone(), task.train.lengths, task.train.labels)
    other.tokens[rows, at + 1] = 7
    moved, _ = representations(hidden_states(objective.backbone, causal, other), other, "token", read, causal)
    assert torch.allclose(moved, features, atol=1e-6) == causal
    head = fit_linear_probe(features, labels, features, labels, task.classes, ProbeConfig(iterations=2))[2]
    logits = Classifier(objective.backbone, head, read, "token", causal)(task.train)
    assert torch.allclose(logits[rows, at], head(features), atol=1e-5)


def test_frozen_probe_beats_chance_on_a_topic_task_even_from_random_features(text_files, text_context):
    task = load_task(str(text_files / "topics.jsonl"), text_context)
    objective = tiny_objective("mlm", text_context)
    frozen, flops, _ = frozen_probe(objective, task, FinetuneConfig())
    # even random features separate three topics with disjoint content words: a probe that could not would be broken
    assert frozen["score"] > 0.6 and flops > 0


def test_probes_and_tasks_read_and_finetune_a_backbone_through_one_module(synthetic_context, monkeypatch):
    # the controls' scores mean something only if every yardstick reads every backbone the same way: one reader, one
    # fine-tuning loop, for the embedded probes and the downstream tasks alike
    import bench.yardsticks.readout
    from bench.data.corpus import load_corpus
    from bench.yardsticks.downstream import Downstream
    from bench.yardsticks.probes import run_probes
    calls = []
    for name in ("features", "finetune", "fit_linear_probe"):
        real = getattr(bench.yardsticks.readout, name)
        monkeypatch.setattr(bench.yardsticks.readout, name, lambda *a, _name=name, _real=real, **k: calls.append(_name)
                            or _real(*a, **k))
    corpus = load_corpus("synthetic:words=64,lexicon=8,topics=2,train=8,heldout=32", 16)
    objective = tiny_objective("mlm", synthetic_context)
    run_probes(objective, corpus, ProbeConfig(train_windows=24, test_windows=8, iterations=2, finetune_steps=2,
                                              finetune_batch=4))
    probes_called, calls[:] = list(calls), []
    task = load_task("synthetic:states,size=16", synthetic_context)
    Downstream([task], FinetuneConfig(steps=2, batch=4, lrs=(1e-3,), probe=ProbeConfig(iterations=2))).at_end(
        objective)
    assert {"features", "finetune", "fit_linear_probe"} <= set(probes_called) and set(calls) == set(probes_called)


# --- bench.compare --downstream, then bench.downstream --run -------------------------------------------------------

@pytest.mark.slow
def test_downstream_run_reproduces_compare_and_enters_the_verdict(text_files, tmp_path):
    out = tmp_path / "cmp"
    task = f"{text_files / 'topics.jsonl'}"
    compare_main(["--objectives", "mlm,ar", "--seeds", "2", "--model", "tiny", "--seq-len", "24", "--batch-size", "8",
                  "--budget", "2e8", "--eval-points", "2", "--data", f"text:{text_files / 'corpus.txt'}",
                  "--vocab-size", "120", "--quiet", "--downstream", task, "--finetune-steps", "3",
                  "--finetune-lrs", "1e-4,1e-3", "--out", str(out)])
    written = json.loads((out / "results.json").read_text())
    report = (out / "report.md").read_text()
    spec, task = task, "topics"  # named by its file in the report, its path in its source
    assert "### Downstream tasks" in report and f"task {task} (fine-tuned)" in report and spec in report
    assert json.dumps(spec) in (out / "config.json").read_text()  # the spec, which loads it again
    assert re.search(r"majority-class accuracy 0\.[0-9]{3}", report)  # the trivial baseline beside the scores
    names = [y["yardstick"] for y in written["verdict"]["yardsticks"]]
    assert names == [f"{task} (frozen)", f"{task} (finetuned)"]
    # the frozen score has a curve over the FLOP checkpoints, so it is the main yardstick and gets a compute
    # multiplier, read where both objectives beat their controls (random features already separate these topics, so
    # at this size it may be "not measurable")
    frozen = next(y for y in written["verdict"]["yardsticks"] if y["yardstick"] == f"{task} (frozen)")
    assert written["verdict"]["main"] == f"{task} (frozen)" and written["answer"]["yardstick"] == frozen["yardstick"]
    [multiplier] = written["verdict"]["multipliers"]
    assert multiplier["yardstick"] == f"{task} (frozen)" and multiplier["objective"] == "ar"
    # each seed's untrained control went through the same task, read as its objective reads
    assert [(c["control"], c["seed"]) for c in written["controls"]] == [
        (name, seed) for name in ("untrained, bidirectional", "untrained, causal") for seed in (0, 1)]
    assert all(set(c["downstream"]) == {task} for c in written["controls"])
    assert {g["control"] for g in frozen["gains"]} == {"untrained, bidirectional", "untrained, causal"}
    assert (out / "tokenizer.json").is_file()
    before = [result["downstream"] for result in written["runs"]]
    for result in written["runs"]:
        assert result["curve"][-1]["downstream"][task]["score"] == result["downstream"][task]["frozen"]["score"]
    stripped = {key: [{k: v for k, v in r.items() if k != "downstream"} for r in written[key]]
                for key in ("runs", "controls")}
    (out / "results.json").write_text(json.dumps({**written, **stripped}))
    downstream_main(["--run", str(out), "--quiet"])
    rewritten = json.loads((out / "results.json").read_text())
    assert [result["downstream"] for result in rewritten["runs"]] == before
    # the controls are rebuilt from their seeds alone and score as they did
    assert [c["downstream"] for c in rewritten["controls"]] == [c["downstream"] for c in written["controls"]]
    assert rewritten["verdict"]["yardsticks"] == written["verdict"]["yardsticks"]
    # a task added later joins the ones the comparison ran, in results.json, the verdict and each run's folder
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"text": "wave ship", "other": "cow" if i % 2 else "tide", "label": i % 2})
                             + "\n" for i in range(30)))
    downstream_main(["--run", str(out), "--quiet", "--tasks", f"{pairs},text_pair=other"])
    added = json.loads((out / "results.json").read_text())
    assert all(set(result["downstream"]) == {task, "pairs"} for result in added["runs"])
    assert [result["downstream"][task] for result in added["runs"]] == [b[task] for b in before]
    assert len(added["verdict"]["yardsticks"]) == 6  # two tasks and their average, frozen and fine-tuned
    saved = json.loads((out / "runs" / "mlm-seed0" / "downstream.json").read_text())
    assert set(saved) == {task, "pairs"}


def test_bad_downstream_input_exits_2_and_writes_nothing(tmp_path, capsys, text_files):
    out = tmp_path / "never"
    bad = tmp_path / "one-class.csv"
    bad.write_text("text,label\n" + "wave,1\n" * 20)
    with pytest.raises(SystemExit) as exit_info:
        run(compare_main, ["--model", "tiny", "--seq-len", "24", "--data", f"text:{text_files / 'corpus.txt'}",
                           "--vocab-size", "120", "--quiet", "--downstream", str(bad), "--out", str(out)])
    assert exit_info.value.code == 2 and not out.exists()
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "one-class.csv" in error and "at least 2 classes" in error
    with pytest.raises(SystemExit) as exit_info:
        run(downstream_main, ["--run", str(tmp_path / "nothing-here")])
    assert exit_info.value.code == 2


def test_tasks_of_a_comparison_with_a_length_schedule_use_its_longest_windows(tmp_path):
    from bench.downstream import context_for_run

    # the model's max_seq_len, as bench.compare built it; config.json records a schedule as its text
    assert context_for_run(tmp_path, recorded_settings("synthetic:words=64,lexicon=8", "16:0.5,64:0.3,32:0.2")).seq_len == 64
    assert context_for_run(tmp_path, recorded_settings("synthetic:words=64,lexicon=8", "32")).seq_len == 32


def test_every_objective_is_read_through_one_scalar_mix_and_one_pooling(synthetic_context, monkeypatch):
    """The neutral tasks' one recipe: whatever the objective (bidirectional, causal, ELECTRA's discriminator), the
    frozen probe and the fine-tuned head read every layer through the same learned scalar mix, and a sequence
    through the same mean; only the attention mode differs."""
    import bench.yardsticks.downstream as downstream

    seen = []
    fit, pooled = readout.fit_linear_probe, downstream.pool
    monkeypatch.setattr(readout, "fit_linear_probe", lambda *a, **k: seen.append(("fit", a[-1])) or fit(*a, **k))
    monkeypatch.setattr(downstream, "pool", lambda h, lengths, read: seen.append(("pool", read)) or pooled(h, lengths,
                                                                                                            read))
    component = load_task("synthetic:topic,size=16", synthetic_context)
    config = FinetuneConfig(steps=1, batch=4, lrs=(1e-3,), probe=ProbeConfig(iterations=3))
    reads = {}
    for spec in ("mlm", "ar", "electra"):
        seen.clear()
        objective = tiny_objective(spec, synthetic_context)
        _, _, head = frozen_probe(objective, component, config)
        finetune(objective, component, head, config)
        reads[spec] = sorted(set(seen))
        layers = objective.backbone.config.n_layer + 1
        assert head.layers == layers and head.mix.shape == (layers,)
        assert not torch.allclose(head.mix, torch.zeros(layers))  # the mix was fitted, not left equal
        hidden = hidden_states(objective.backbone, reads_left_to_right(objective), component.test)
        assert hidden.shape[-1] == layers * objective.backbone.config.d_model
    assert reads["mlm"] == reads["ar"] == reads["electra"] == [("fit", 3), ("pool", "mean")]


def test_the_native_read_is_each_familys_last_layer_at_its_own_position(synthetic_context, monkeypatch):
    """The diagnostic beside the one read: the last layer alone, a causal backbone's sequence at its last token
    (GPT's read), a bidirectional one's at [BOS] (BERT's and ELECTRA's [CLS]); fitted as a plain probe."""
    import bench.yardsticks.downstream as downstream

    fitted = []
    fit = readout.fit_linear_probe
    monkeypatch.setattr(readout, "fit_linear_probe", lambda *a, **k: fitted.append((a[0], a[-1])) or fit(*a, **k))
    component = load_task("synthetic:topic,size=16", synthetic_context)
    config = FinetuneConfig(steps=1, batch=4, lrs=(1e-3,), probe=ProbeConfig(iterations=3))
    for spec, position in (("mlm", "first"), ("ar", "last"), ("electra", "first")):
        fitted.clear()
        objective = tiny_objective(spec, synthetic_context)
        causal, width = reads_left_to_right(objective), objective.backbone.config.d_model
        scores, flops, head = frozen_probe(objective, component, config, native=True)
        (features, layers), = fitted
        last = hidden_states(objective.backbone, causal, component.train)[..., -width:]
        lengths = component.train.lengths
        expected = last[torch.arange(len(last)), lengths - 1] if position == "last" else last[:, 0]
        assert downstream.native_read(causal) == position and layers == 1 and head.layers == 1
        assert torch.equal(features, expected) and 0 <= scores["score"] <= 1 and flops > 0


def test_the_feature_based_read_concatenates_the_last_four_layers_pooled_as_the_one_read(synthetic_context,
                                                                                          monkeypatch):
    """BERT's Table 8 feature-based column: a plain probe on the top four layers side by side (a 2-layer model has
    three, its embeddings included), pooled as every backbone is (the mean), only where asked."""
    from dataclasses import replace

    from bench.yardsticks.downstream import Downstream, pool

    component = load_task("synthetic:topic,size=16", synthetic_context)
    config = FinetuneConfig(steps=1, batch=4, lrs=(1e-3,), probe=ProbeConfig(iterations=3))
    objective = tiny_objective("mlm", synthetic_context)
    fitted = []
    fit = readout.fit_linear_probe
    monkeypatch.setattr(readout, "fit_linear_probe", lambda *a, **k: fitted.append((a[0], a[-1])) or fit(*a, **k))
    frozen_probe(objective, component, config, concatenated=True)
    (features, layers), = fitted
    hidden = hidden_states(objective.backbone, False, component.train)
    kept = min(4, objective.backbone.config.n_layer + 1) * objective.backbone.config.d_model
    assert layers == 1 and hidden.shape[-1] == kept  # every layer of the tiny model: all of it, unmixed
    assert torch.equal(features, pool(hidden, component.train.lengths, "mean"))
    plain = Downstream([component], config).at_end(objective)
    wide = Downstream([component], replace(config, feature_based=True)).at_end(objective)
    assert "feature_based" not in plain[component.name] and 0 <= wide[component.name]["feature_based"]["score"] <= 1
    assert wide[component.name]["flops"]["feature_based"] > 0


def test_the_final_read_reuses_the_last_checkpoints_probes_only_for_the_same_weights(synthetic_context, monkeypatch):
    """A run's last checkpoint is at its budget: at_end reuses its frozen probes, and gives exactly what fitting
    them again gives; after any change of the weights it fits them again."""
    from bench.yardsticks import downstream as module
    from bench.yardsticks.downstream import Downstream

    component = load_task("synthetic:topic,size=16", synthetic_context)
    config = FinetuneConfig(steps=2, batch=4, lrs=(1e-3,), probe=ProbeConfig(iterations=3))
    objective = tiny_objective("ar", synthetic_context)
    fresh = Downstream([component], config).at_end(objective)
    fits = []
    fit = module.frozen_probe
    monkeypatch.setattr(module, "frozen_probe", lambda *a, **k: fits.append(k) or fit(*a, **k))
    yardstick = Downstream([component], config)
    yardstick.at_checkpoint(objective)
    assert len(fits) == 1 and yardstick.at_end(objective) == fresh and len(fits) == 2  # only the native read
    yardstick.at_checkpoint(objective)
    with torch.no_grad():
        next(objective.parameters()).add_(0.0)  # a step that moved nothing still makes other weights
    yardstick.at_end(objective)
    assert [call.get("native", False) for call in fits[3:]] == [False, True]  # fitted again, then the native read


def test_a_scalar_mix_of_one_layer_is_the_plain_probe_and_its_weights_sum_to_one():
    features = torch.randn(40, 3 * 4, generator=torch.Generator().manual_seed(0))
    labels = (features[:, 8] > 0).long()  # the answer sits in the last layer
    _, _, mixed = readout.fit_linear_probe(features, labels, features, labels, 2, ProbeConfig(iterations=30), 3)
    weights = mixed.mix.softmax(0)
    assert weights.sum().item() == pytest.approx(1.0) and weights.argmax().item() == 2
    _, _, plain = readout.fit_linear_probe(features[:, 8:], labels, features[:, 8:], labels, 2,
                                           ProbeConfig(iterations=30))
    x = features[:, 8:]
    assert torch.allclose(plain(x), plain.linear((x - plain.mean) / plain.std))


@pytest.mark.parametrize("spec, named", [("synthetic:topic,train=128", "train="),
                                         ("synthetic:states,text=body,label=tag", "text=, label=")])
def test_an_option_the_embedded_tasks_do_not_read_is_refused(synthetic_context, spec, named):
    """train= capped a file's training examples and did nothing to a sampled task: a topic task asked for with 128
    training windows was read with 1024, and nothing said so."""
    with pytest.raises(ConfigError, match=f"{named} does nothing for the embedded language's tasks"):
        load_task(spec, synthetic_context)


def test_size_is_refused_for_a_task_read_from_a_file(tmp_path, text_context):
    data = tmp_path / "t.csv"
    data.write_text("text,label\n" + "".join(f"word{i % 5} word{i % 3},{i % 2}\n" for i in range(40)))
    with pytest.raises(ConfigError, match="size= does nothing for tasks read from files"):
        load_task(f"{data},size=64", text_context)
