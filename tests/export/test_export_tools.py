"""End to end, offline, on a finished default comparison (mlm, ar and electra; tiny shapes on a local text corpus, with
a local CSV task): the exported backbones work in the tools a researcher already uses, as docs/export.md shows.

- transformers' Trainer fine-tunes the exported MLM backbone on the CSV and scores what the suite's own fine-tuning
  of the same backbone scored, within noise: both are scored on the same n test examples, so the bound is three
  standard errors of a difference of two accuracies, 3·sqrt(2·p(1 − p)/n). The two runs share the steps, batch,
  rate, warm-up and decay, but not the head's start (the suite starts from its fitted linear probe), the order of
  the batches, or which parameters weight decay reaches.
- lm-evaluation-harness (`lm_eval --model hf`) scores the exported AR model on a YAML task over a local jsonl, and
  each log-likelihood equals the suite's within 1e-4: a sum of a few log-probabilities from GPT-NeoX's logits,
  each within 1e-5 of the suite's (tests/export/test_export.py).
- SentenceTransformer(DIR) encodes: the mean of the MLM backbone's final states over a text's tokens (the suite's
  pooling of its final layer), and the AR backbone's state at the last token, GPT's own read (within 1e-5).
"""

import csv
import json
import math
import os
import random
import subprocess
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import datasets  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding,  # noqa: E402
                          PreTrainedTokenizerFast, Trainer, TrainingArguments)

from bench.compare import main as compare_main  # noqa: E402
from bench.export.__main__ import main as export_main  # noqa: E402
from bench.export.runs import finished_run, load_objective  # noqa: E402
from bench.yardsticks.downstream import forward as suite_reading, pool  # noqa: E402
from bench.yardsticks.examples import encode  # noqa: E402
from objectives import Vocab  # noqa: E402

pytestmark = pytest.mark.slow

TOPICS = {"sea": "wave ship salt harbour tide sail fish shore anchor deep".split(),
          "farm": "cow field barn wheat tractor hay goat plough seed fence".split(),
          "city": "street tram tower office traffic bridge shop crowd lamp square".split()}
COMMON = "the a and of to in with near over under".split()
STEPS, RATE = 60, 3e-3  # the suite's fine-tuning recipe for the task, which the Trainer run copies


def sentence(topic: str, rng: random.Random) -> str:
    return " ".join(rng.choice(TOPICS[topic]) if rng.random() < 0.4 else rng.choice(COMMON)
                    for _ in range(rng.randint(5, 12)))


def write_files(folder) -> None:
    """A pretraining corpus and a topic task with train/dev/test files, a fifth of its labels drawn at random (so
    that no model saturates it)."""
    rng = random.Random(0)
    (folder / "corpus.txt").write_text("\n".join(sentence(rng.choice(list(TOPICS)), rng) for _ in range(1500)) + "\n")
    (folder / "task").mkdir()
    for split, count in (("train", 240), ("dev", 60), ("test", 150)):
        with open(folder / "task" / f"{split}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            for _ in range(count):
                topic = rng.choice(list(TOPICS))
                writer.writerow([sentence(topic, rng), topic if rng.random() < 0.8 else rng.choice(list(TOPICS))])


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """(comparison folder, exports folder, the CSV task's folder): mlm, ar and electra, trained and exported."""
    folder = tmp_path_factory.mktemp("tools")
    write_files(folder)
    compare_main(["--objectives", "mlm,ar,electra", "--seeds", "1", "--model", "tiny", "--seq-len", "24", "--batch-size", "8", "--budget", "4e8",
                  "--eval-points", "2", "--data", f"text:{folder / 'corpus.txt'}", "--vocab-size", "120",
                  "--no-probes", "--downstream", str(folder / "task"), "--finetune-steps", str(STEPS),
                  "--finetune-lrs", str(RATE), "--quiet", "--out", str(folder / "cmp")])
    export_main([str(folder / "cmp"), "--all", "--out", str(folder / "exported")])
    return folder / "cmp", folder / "exported", folder / "task"


def trainer_accuracy(model_dir, task, steps: int, rate: float) -> float:
    """docs/export.md's Trainer recipe: fine-tune on train.csv, score accuracy on test.csv."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    data = datasets.load_dataset("csv", data_files={"train": str(task / "train.csv"), "test": str(task / "test.csv")})
    labels = sorted(set(data["train"]["label"]))
    data = data.map(lambda batch: {**tokenizer(batch["text"], truncation=True),
                                   "labels": [labels.index(label) for label in batch["label"]]},
                    batched=True, remove_columns=["text", "label"])
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, trust_remote_code=True,
                                                               num_labels=len(labels))
    args = TrainingArguments(output_dir=str(task.parent / "trainer"), max_steps=steps, per_device_train_batch_size=16,
                             learning_rate=rate, lr_scheduler_type="linear", warmup_steps=round(0.1 * steps),
                             weight_decay=0.01, seed=0, report_to="none", save_strategy="no",
                             logging_strategy="no", disable_tqdm=True, use_cpu=True)
    trainer = Trainer(model=model, args=args, train_dataset=data["train"],
                      data_collator=DataCollatorWithPadding(tokenizer))
    trainer.train()
    predicted = trainer.predict(data["test"])
    return float((predicted.predictions.argmax(-1) == predicted.label_ids).mean())


def test_trainer_fine_tunes_the_exported_mlm_backbone_as_the_suite_does(finished):
    comparison, exported, task = finished
    results = json.loads((comparison / "results.json").read_text())
    suite = next(run for run in results["runs"] if run["objective"] == "mlm")["downstream"][task.name]["finetuned"]
    assert suite["lr"] == RATE
    accuracy = trainer_accuracy(exported / "mlm-seed0", task, STEPS, RATE)
    n = sum(1 for _ in open(task / "test.csv")) - 1
    p = (accuracy + suite["score"]) / 2
    assert abs(accuracy - suite["score"]) <= 3 * math.sqrt(2 * p * (1 - p) / n), (accuracy, suite["score"])
    assert accuracy > 0.5  # three balanced topics: chance is a third


TASK_YAML = """task: export_check
dataset_path: json
dataset_kwargs:
  data_files:
    test: {items}
test_split: test
output_type: loglikelihood
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{continuation}}}}"
metric_list:
  - metric: perplexity
    aggregation: perplexity
    higher_is_better: false
"""


def test_lm_eval_scores_the_exported_ar_model_with_the_suites_log_likelihoods(finished, tmp_path):
    comparison, exported, _ = finished
    lines = (comparison.parent / "corpus.txt").read_text().splitlines()[-20:]
    items = [{"context": " ".join(line.split()[:3]), "continuation": " " + " ".join(line.split()[3:5])}
             for line in lines]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    (tmp_path / "export_check.yaml").write_text(TASK_YAML.format(items=tmp_path / "items.jsonl"))
    # add_bos_token: the harness's releases differ in whether they let the tokenizer add its BOS; say so
    model_args = f"pretrained={exported / 'ar-seed0'},dtype=float32,add_bos_token=True"
    command = [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args", model_args, "--tasks",
               "export_check", "--include_path", str(tmp_path), "--device", "cpu", "--batch_size", "4",
               "--output_path", str(tmp_path / "out"), "--log_samples"]
    environment = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "datasets")}
    finished_process = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
    assert finished_process.returncode == 0, finished_process.stderr[-3000:]
    samples = [json.loads(line) for path in (tmp_path / "out").rglob("samples_export_check_*.jsonl")
               for line in path.read_text().splitlines()]
    assert len(samples) == len(items)
    objective, context = load_objective(finished_run(comparison / "runs" / "ar-seed0"))
    for sample in samples:
        text, continuation = sample["doc"]["context"], sample["doc"]["continuation"]
        # as the harness splits them: the context's ids, then what the whole adds; each after the BOS, [EOS]
        whole = [Vocab.EOS] + context.tokenizer.encode(text + continuation).ids
        head = [Vocab.EOS] + context.tokenizer.encode(text).ids
        with torch.no_grad():
            hidden = objective.backbone(torch.tensor([whole]), attention="causal")
            log_probs = objective.backbone.logits(hidden)[0].log_softmax(-1)
        suite = sum(log_probs[len(head) - 1 + i, token].item() for i, token in enumerate(whole[len(head):]))
        assert abs(float(sample["resps"][0][0][0]) - suite) <= 1e-4


def test_sentence_transformers_encodes_as_the_suite_reads_a_text(finished):
    comparison, exported, _ = finished
    texts = ["wave ship near the harbour", "cow field", "the tram and the tower over a bridge near the shop"]
    objective, context = load_objective(finished_run(comparison / "runs" / "mlm-seed0"))
    split = encode(context, texts, None, torch.zeros(len(texts)))  # "a [EOS]", as a downstream task reads it
    with torch.no_grad():
        last = suite_reading(objective.backbone, False, split)[..., -objective.backbone.config.d_model:]
        expected = pool(last, split.lengths, "mean")  # the final layer's mean: what the export's pooling reads
    embedded = SentenceTransformer(str(exported / "mlm-seed0"), trust_remote_code=True, device="cpu")
    torch.testing.assert_close(embedded.encode(texts, convert_to_tensor=True), expected, atol=1e-5, rtol=0)
    objective, context = load_objective(finished_run(comparison / "runs" / "ar-seed0"))
    with torch.no_grad():  # the causal export's tokenizer starts a text with its BOS, [EOS]
        expected = torch.stack([objective.backbone(torch.tensor([[Vocab.EOS] + context.tokenizer.encode(t).ids]),
                                                   attention="causal")[0, -1] for t in texts])
    embedded = SentenceTransformer(str(exported / "ar-seed0"), device="cpu")  # stock GPT-NeoX: no remote code
    torch.testing.assert_close(embedded.encode(texts, convert_to_tensor=True), expected, atol=1e-5, rtol=0)


def test_every_exported_tokenizer_gives_the_comparisons_ids_on_its_corpus(finished):
    comparison, exported, _ = finished
    suite = Tokenizer.from_file(str(comparison / "tokenizer.json"))
    sample = (comparison.parent / "corpus.txt").read_text().splitlines()[:200]
    expected = [encoding.ids for encoding in suite.encode_batch(sample, add_special_tokens=False)]
    for folder in ("mlm-seed0", "ar-seed0", "electra-seed0", "electra-seed0/generator"):
        tokenizer = PreTrainedTokenizerFast.from_pretrained(exported / folder)
        assert tokenizer(sample, add_special_tokens=False).input_ids == expected, folder
