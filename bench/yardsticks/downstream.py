"""Downstream tasks: the yardstick that compares objectives on any text, as the papers do (BERT's MNLI and NER,
ELECTRA's GLUE against FLOPs, T5's GLUE).

Every final backbone of a comparison is evaluated on every task (bench.yardsticks.tasks) twice, with one recipe for
every objective and seed:
- frozen: a linear probe (L-BFGS on standardised features, bench.yardsticks.readout) on the backbone's features;
- fine-tuned: the backbone and a head that starts from the frozen probe (linear probe, then fine-tune) are trained
  for a fixed number of AdamW steps at each rate of a small grid; the rate with the best score on the dev split is
  chosen, and only that model ever sees the test split.
Each backbone reads in its objective's own attention mode, with the padding invisible to the real tokens, and every
backbone is read the same way: a learned scalar mix of every layer's output (the embeddings and each block's; ELMo,
Tenney et al. 2019), fitted with the probe, since the objectives leave their answers in different layers (AR
projects its last straight onto the vocabulary, MLM through BERT's transform, ELECTRA's feeds a discriminator head);
and a sequence is the mean of its tokens' states, a causal backbone's included (reading it at its last token alone,
GPT's own read, and a bidirectional one at [BOS], BERT's, would make the comparison one of reads: untrained, the two
already differ there). Each family's own read, its last layer alone and a sequence at its last token (GPT) or at
[BOS] (BERT's and ELECTRA's [CLS]), is read frozen beside it as a diagnostic that ranks nobody ("native").
A tagging task reads each token where it stands, except that a causal model reads a hidden
token ([MASK]) at the position before it, where it has seen the words before it. Downstream FLOPs are reported, never
charged to the pretraining budget.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from backbone import Backbone, ConfigError
from bench.common.stopping import check_stop
from bench.yardsticks import readout
from bench.yardsticks.examples import Split, Task
from bench.yardsticks.metrics import direction, item_counts, scores
from bench.yardsticks.probes import ProbeConfig
from bench.yardsticks.readout import StandardizedLinear
from objectives import IGNORE, Objective, Vocab
from objectives.pairs import segments_from_separators

DEFAULT_STEPS = 75  # batch 16: 1,200 examples, over an embedded task's 512 training examples about twice

# the suite's small models: on the docs task (examples/docs_corpus.py, mini, 2e12 FLOPs) the dev split chose the top of
# 1e-4..1e-3 and of 3e-4..3e-3 every time, and 3e-3 in 7 of 9 runs from 1e-3..1e-2: a grid centred there
DEFAULT_LRS = "1e-3,3e-3,1e-2"
TUNED = "tuned"  # --finetune-lrs: the rate bench.tune chose per reader and task where the setting is the one tuned


@dataclass(frozen=True)
class FinetuneConfig:
    steps: int = DEFAULT_STEPS  # AdamW steps per rate of the grid
    batch: int = 16
    lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2)
    warmup: float = 0.1  # share of the steps warming up; then linear decay to zero (BERT's fine-tuning schedule)
    probe: ProbeConfig = field(default_factory=ProbeConfig)  # the frozen probe's L-BFGS settings
    # (reader, task, rate): the one rate a tuning chose on validation data (bench.tune) for a reader (an objective's
    # spec, or an untrained control's name) on a task; the others are fine-tuned at every rate of `lrs`
    tuned: tuple[tuple[str, str, float], ...] = ()
    feature_based: bool = False  # also the frozen read of BERT's Table 8: the last FEATURE_LAYERS layers concatenated

    def rates_for(self, reader: str | None, task: str) -> tuple[float, ...]:
        return next(((rate,) for who, name, rate in self.tuned if who == reader and name == task), self.lrs)


def parse_rates(text: str) -> tuple[float, ...]:
    try:
        rates = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ConfigError(f"--finetune-lrs {text!r} is not a comma-separated list of numbers") from None
    if not rates or not all(0 < rate < 1 for rate in rates):
        raise ConfigError(f"--finetune-lrs {text!r}: give one or more rates in (0, 1), e.g. {DEFAULT_LRS}")
    return rates


# --- reading a backbone ---------------------------------------------------------------------------------------------

def reads_left_to_right(objective: Objective) -> bool:
    return objective.probe_attention(objective.backbone.config.max_seq_len)["attention"] == "causal"


def reading(objective: Objective, task: Task) -> str:
    """Where a sequence is read: the "mean" over the example's tokens, for every backbone (pool() also reads the
    "last" token or the "first" position, each family's own read)."""
    return "mean"


def task_states(objective: Objective, task: Task) -> tuple[Tensor, Tensor]:
    """The train and test splits' every-layer states, read in the objective's own attention mode."""
    causal = reads_left_to_right(objective)
    return hidden_states(objective.backbone, causal, task.train), hidden_states(objective.backbone, causal, task.test)


def native_read(causal: bool) -> str:
    """Where each family reads a sequence itself, from its last layer: GPT at its last token, BERT and ELECTRA at
    the first position ([CLS]; here [BOS])."""
    return "last" if causal else "first"


def pooling(objective: Objective, task: Task) -> str:
    return {"last": "last token", "first": "first position ([BOS])", "mean": "mean over tokens"}[
        reading(objective, task)]


def hidden_states(backbone: Backbone, causal: bool, split: Split, batch_size: int = 64) -> Tensor:
    """(N, T, (n_layer + 1) · d) every layer's hidden states, the embeddings first (bench.yardsticks.readout):
    every reader mixes them (layers()). Padding comes after each example's tokens: a causal
    model never sees it; the others read in prefix mode with the prefix ending at the example's end, which is
    bidirectional attention over the example with the padding masked out."""
    return readout.features(backbone, len(split), lambda rows: forward(backbone, causal, split.rows(rows)), batch_size)


def layers(backbone: Backbone) -> int:
    """The layers a task reads: the embeddings and every block's output, mixed by a learned scalar mix
    (readout.StandardizedLinear), one recipe for every objective."""
    return backbone.config.n_layer + 1


def forward(backbone: Backbone, causal: bool, split: Split) -> Tensor:
    device = backbone.token_embedding.weight.device
    attention = {"attention": "causal"} if causal else {"attention": "prefix", "prefix_len": split.lengths.to(device)}
    # a backbone pretrained on sentence pairs (mlm:pair=...) reads a pair's segments as it did then; a single text,
    # which holds no separator before its end, is all segment A
    segments = segments_from_separators(split.tokens) if backbone.segment_embedding is not None else None
    return backbone(split.tokens.to(device), **attention, segments=None if segments is None else segments.to(device),
                    every_layer=True)


def representations(hidden: Tensor, split: Split, level: str, read: str, causal: bool) -> tuple[Tensor, Tensor]:
    """(rows, d) features and their labels: per sequence, the position(s) `read` names (see reading()); per token,
    the positions that carry a tag (see per_token())."""
    if level == "token":
        scored = split.labels != IGNORE
        return per_token(hidden, split.tokens, causal)[scored.to(hidden.device)], split.labels[scored].to(hidden.device)
    return pool(hidden, split.lengths.to(hidden.device), read), split.labels.to(hidden.device)


def per_token(hidden: Tensor, tokens: Tensor, causal: bool) -> Tensor:
    """(N, T, d) the features each token is read at: its own position, except that a causal reader reads a hidden
    token ([MASK] in the task's text) at the position before it. There it has seen exactly the words before the
    hidden one and is asked what comes next, its own question; at the [MASK] itself it would read a token it never
    trained on. The embedded hidden-state probe reads a causal backbone so too (bench.yardsticks.probes)."""
    if not causal:
        return hidden
    hidden_here = (tokens == Vocab.MASK).to(hidden.device)
    position = (torch.arange(tokens.shape[1], device=hidden.device) - hidden_here.long()).clamp_min(0)
    return hidden.gather(1, position[..., None].expand_as(hidden))


def pool(hidden: Tensor, lengths: Tensor, read: str) -> Tensor:
    if read == "last":
        return hidden[torch.arange(len(hidden), device=hidden.device), lengths - 1]
    if read == "first":
        return hidden[:, 0]
    inside = (torch.arange(hidden.shape[1], device=hidden.device)[None, :] < lengths[:, None]).to(hidden.dtype)
    return (hidden * inside[..., None]).sum(1) / lengths[:, None].to(hidden.dtype)


# --- the frozen probe -----------------------------------------------------------------------------------------------

FEATURE_LAYERS = 4  # BERT's best feature-based read (its Table 7): the top four layers' states concatenated


def frozen_probe(objective: Objective, task: Task, config: FinetuneConfig, native: bool = False,
                 concatenated: bool = False,
                 states: tuple[Tensor, Tensor] | None = None) -> tuple[dict, int, StandardizedLinear]:
    """Test scores of a linear probe fitted on the training split's frozen features; (scores, FLOPs, probe).
    `native`: the family's own read instead of the one read (native_read), a diagnostic; `concatenated`: BERT's
    feature-based read, a plain probe on the last FEATURE_LAYERS layers side by side (all of a shallower model's,
    its embeddings included), pooled as the one read pools. `states`: the train and test splits' every-layer
    states (task_states), where several reads of one backbone share them; else computed here."""
    backbone, causal = objective.backbone, reads_left_to_right(objective)
    width = backbone.config.d_model
    # how it reads: the pooling, the states kept (the last `kept` columns of every layer's side by side; None: all)
    # and the layers its probe mixes (1: a plain probe on what is kept)
    if native:  # the family's own: the last layer, pooled its way
        read, kept, mixed = native_read(causal), width, 1
    elif concatenated:  # BERT's feature-based: the last FEATURE_LAYERS layers side by side
        read, kept, mixed = reading(objective, task), min(FEATURE_LAYERS, layers(backbone)) * width, 1
    else:  # the one read: every layer, through the learned scalar mix
        read, kept, mixed = reading(objective, task), None, layers(backbone)

    def features(split: Split, hidden: Tensor) -> tuple[Tensor, Tensor]:
        return representations(hidden if kept is None else hidden[..., -kept:], split, task.level, read, causal)

    train_states, test_states = states or task_states(objective, task)
    (train_x, train_y), (test_x, _) = features(task.train, train_states), features(task.test, test_states)
    # the probe's test accuracy is unused: the task's own metrics are computed from its predictions below
    _, probe_flops, head = readout.fit_linear_probe(train_x, train_y, test_x,
                                                    torch.zeros(len(test_x), dtype=torch.long), task.classes,
                                                    config.probe, mixed)
    with torch.no_grad():
        predicted = head(test_x).argmax(-1)
    seq_len = task.train.tokens.shape[1]
    flops = (backbone.flops(len(task.train) + len(task.test), seq_len, 0).forward + probe_flops
             + readout.head_flops(len(test_x), head.linear.in_features, task.classes))  # the predictions just made
    return {**scores(task, predicted, task.test), **item_counts(task, predicted, task.test)}, flops, head

# --- fine-tuning ------------------------------------------------------------------------------------------------------

class Classifier(nn.Module):
    """A backbone read in its objective's mode, with a linear head per sequence or per token."""

    def __init__(self, backbone: Backbone, head: StandardizedLinear, read: str, level: str, causal: bool) -> None:
        super().__init__()
        self.backbone, self.head, self.read, self.level, self.causal = backbone, head, read, level, causal

    def forward(self, split: Split) -> Tensor:
        hidden = forward(self.backbone, self.causal, split)
        if self.level == "token":
            return self.head(per_token(hidden, split.tokens, self.causal))  # (N, T, classes)
        return self.head(pool(hidden, split.lengths.to(hidden.device), self.read))

    def loss(self, split: Split) -> Tensor:
        logits = self(split)
        labels = split.labels.to(logits.device)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=IGNORE)

    @torch.no_grad()
    def predict(self, split: Split, batch_size: int = 64) -> Tensor:
        self.eval()
        predicted = []
        for i in range(0, len(split), batch_size):
            check_stop()
            rows = split.rows(slice(i, i + batch_size))
            logits = self(rows).argmax(-1).cpu()
            predicted.append(logits[rows.labels != IGNORE] if self.level == "token" else logits)
        return torch.cat(predicted)


def train_classifier(model: Classifier, task: Task, lr: float, config: FinetuneConfig) -> None:
    """`config.steps` AdamW steps (bench.yardsticks.readout) on batches drawn from the task's own seed: the same batches
    for every objective, seed and rate. BERT's fine-tuning schedule: a linear warm-up, then a linear decay to zero."""
    warmup = max(1, round(config.warmup * config.steps))
    scale = lambda step: (step + 1) / warmup if step < warmup else (  # noqa: E731
        (config.steps - step) / max(1, config.steps - warmup))
    model.train()
    readout.finetune(model.parameters(), lambda rows: model.loss(task.train.rows(rows)), len(task.train),
                     config.steps, config.batch, lr, scale, task.seed)


def finetune(objective: Objective, task: Task, head: StandardizedLinear, config: FinetuneConfig) -> tuple[dict, int]:
    """Fine-tune at each rate of the grid, choose the rate by the dev score (the first of equals), and score only the
    chosen model on the test split. Returns (test scores with the rate and every dev score, FLOPs)."""
    backbone, read = objective.backbone, reading(objective, task)
    device = backbone.token_embedding.weight.device
    dev_scores, best, best_score = {}, None, float("-inf")
    for lr in config.lrs:
        torch.manual_seed(task.seed)  # dropout, where the backbone has any
        model = Classifier(copy.deepcopy(backbone), copy.deepcopy(head).to(device), read, task.level,
                           reads_left_to_right(objective))
        train_classifier(model, task, lr, config)
        dev_scores[f"{lr:g}"] = scores(task, model.predict(task.dev), task.dev)["score"]
        if dev_scores[f"{lr:g}"] > best_score:
            best, best_score, chosen = model, dev_scores[f"{lr:g}"], lr
    predicted = best.predict(task.test)
    result = {**scores(task, predicted, task.test), **item_counts(task, predicted, task.test), "lr": chosen,
              "dev": dev_scores}
    seq_len = task.train.tokens.shape[1]
    head_rows = (lambda n: n * seq_len) if task.level == "token" else (lambda n: n)  # noqa: E731
    read_flops = lambda n: (backbone.flops(n, seq_len, 0).forward  # noqa: E731  (scoring n examples)
                            + readout.head_flops(head_rows(n), backbone.config.d_model, task.classes))
    per_rate = (readout.finetune_flops(backbone, config.steps, config.batch, seq_len, head_rows(config.batch),
                                       task.classes) + read_flops(len(task.dev)))
    return result, len(config.lrs) * per_rate + read_flops(len(task.test))


# --- what a comparison calls ------------------------------------------------------------------------------------------

@dataclass
class Downstream:
    """The tasks of a comparison and their recipe: a yardstick of bench.training (each run's backbone at its FLOP
    checkpoints and at the end, and the untrained controls) and of `python -m bench.downstream`."""

    tasks: list[Task]
    config: FinetuneConfig
    result_key = "downstream"
    seconds_key = "downstream_seconds"
    # the last checkpoint's frozen probes, with the weights they read: at_end reuses them for the same weights (the
    # run's last checkpoint is at its budget), the same numbers without fitting them twice
    last_frozen: tuple[tuple, dict] | None = field(default=None, repr=False, compare=False)

    def at_checkpoint(self, objective: Objective) -> dict[str, dict]:
        """Frozen-probe scores (and their hits per test example) at a FLOP checkpoint: the curves the compute
        multipliers are read from."""
        with torch.random.fork_rng(devices=[]):
            found = {task.name: frozen_probe(objective, task, self.config) for task in self.tasks}
        self.last_frozen = (weights_version(objective), found)
        return {name: {key: value for key, value in result.items() if key in ("score", "hits", "units")}
                for name, (result, _, _) in found.items()}

    def at_end(self, objective: Objective, progress: bool = False, desc: str = "", reader: str | None = None) -> dict:
        """Per task: frozen and fine-tuned test scores, the chosen rate, the FLOPs spent; fine-tuned at the rate
        tuned for `reader` on the task where there is one (FinetuneConfig.tuned), else at every rate of the grid.
        The CPU's global RNG is left as it was (a GPU's is reseeded, as every training step reseeds it anyway)."""
        results = {}
        last, self.last_frozen = self.last_frozen, None
        reused = last[1] if last is not None and last[0] == weights_version(objective) else {}
        with torch.random.fork_rng(devices=[]):
            bar = tqdm(self.tasks, desc=f"{desc} downstream".strip(), unit="task", disable=not progress, leave=False)
            for task in bar:
                # the probe's fit draws from its own generator and fine-tuning seeds itself: reusing it moves nothing
                states = task_states(objective, task)  # one forward pass for every frozen read below
                frozen, frozen_flops, head = reused.get(task.name) or frozen_probe(objective, task, self.config,
                                                                                   states=states)
                rates = self.config.rates_for(reader, task.name)
                tuned, tuned_flops = finetune(objective, task, head, replace(self.config, lrs=rates))
                native, native_flops, _ = frozen_probe(objective, task, self.config, native=True, states=states)
                results[task.name] = {"frozen": frozen, "finetuned": tuned, "native": native,
                                      "pooling": pooling(objective, task),
                                      "flops": {"frozen": frozen_flops, "finetune": tuned_flops,
                                                "native": native_flops}}
                if self.config.feature_based:
                    concatenated, results[task.name]["flops"]["feature_based"], _ = frozen_probe(
                        objective, task, self.config, concatenated=True, states=states)
                    results[task.name]["feature_based"] = concatenated
        return results

    def settings(self) -> dict:
        """What config.json records: the task specs and the recipe."""
        return {"tasks": [task.spec or task.name for task in self.tasks], "feature_based": self.config.feature_based,
                "finetune_steps": self.config.steps,
                "finetune_batch": self.config.batch, "finetune_lrs": list(self.config.lrs),
                "finetune_tuned": [list(item) for item in self.config.tuned]}

    def describe(self) -> list[dict]:
        return [{**task.describe(), "higher_is_better": direction(task.metrics)} for task in self.tasks]


def weights_version(objective: Objective) -> tuple:
    """Which weights these are: every parameter and its in-place version (an optimizer step or a load bumps it)."""
    return tuple((id(parameter), parameter._version) for parameter in objective.parameters())


def add_finetune_flags(add, defaults_from_run: bool = False) -> None:
    suffix = " (default: the comparison's, else {})" if defaults_from_run else " (default {})"
    add("--finetune-steps", type=int, default=None if defaults_from_run else DEFAULT_STEPS,
        help="downstream fine-tuning: AdamW steps per rate" + suffix.format(DEFAULT_STEPS))
    add("--finetune-lrs", default=None if defaults_from_run else TUNED,
        help="downstream fine-tuning: the rate grid, each backbone's rate per task chosen on its dev split, never "
             f"on test; or {TUNED}: the one rate per objective (or untrained control) and task that `python -m "
             f"bench.tune` chose on validation data, where the comparison's setting is the one tuned (the default "
             f"setting; reports/tuning), else the grid {DEFAULT_LRS}" + suffix.format(TUNED))


def finetune_config(steps: int | None, lrs: str | None, saved: dict | None = None,
                    tuned: tuple[tuple[str, str, float], ...] = ()) -> FinetuneConfig:
    """The recipe; with --finetune-lrs tuned, `tuned` (bench.common.tuned.finetune_rates) gives the readers' own
    rates."""
    saved = saved or {}
    steps = steps if steps is not None else saved.get("finetune_steps", DEFAULT_STEPS)
    if steps < 1:
        raise ConfigError(f"--finetune-steps must be >= 1, got {steps}")
    if lrs == TUNED:
        return FinetuneConfig(steps=steps, lrs=parse_rates(DEFAULT_LRS), tuned=tuned)
    rates = parse_rates(lrs) if lrs is not None else tuple(saved.get("finetune_lrs", parse_rates(DEFAULT_LRS)))
    tuned = tuple(tuple(item) for item in saved.get("finetune_tuned", ())) if lrs is None else ()
    return FinetuneConfig(steps=steps, lrs=rates, batch=saved.get("finetune_batch", FinetuneConfig.batch),
                          tuned=tuned)


def describe_recipe(downstream: Downstream, runs: list) -> str:
    config = downstream.config
    readings = sorted({f"{run.objective}: {next(iter(run.downstream.values()))['pooling']}" for run in runs
                       if run.downstream})
    grid = f"each rate of {', '.join(f'{lr:g}' for lr in config.lrs)}, chosen on dev"
    rates = ("the rate tuned on validation data for each objective and control and task (python -m bench.tune)"
             if config.tuned else grid)
    return (f"{', '.join(task.name for task in downstream.tasks)}; frozen linear probe on a learned scalar mix of "
            f"every layer (L-BFGS, {config.probe.iterations} iterations) and fine-tuning ({config.steps} AdamW steps "
            f"of {config.batch} at {rates}); sequence features: " + "; ".join(readings))
