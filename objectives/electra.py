"""ELECTRA replaced-token detection (Clark et al. 2020), following google-research/electra.

A small generator (default ¼ of the backbone's width, same depth) does MLM on 15 % of the positions (85 % [MASK],
15 % kept, no random replacement). Its samples (Gumbel-max at temperature 1, no gradient through the sample) replace
the chosen positions; the backbone, as discriminator, labels every position original or replaced. A sampled token
equal to the original counts as original. Loss = generator MLM + λ · discriminator, λ = 50. The generator shares the
token (and learned position) embeddings; its transformer weights are its own. Every FLOP of the generator counts.

The paper's Table 5 ablation, which says where ELECTRA's gain comes from, is two options on the same generator:
`supervise=masked` takes the backbone's loss over the generator's positions only (ELECTRA 15 %), and `head=mlm`
predicts the original token there instead of telling replaced from original (Replace MLM; with `supervise=all`,
All-Tokens MLM, here without the paper's copy mechanism). An MLM head is BERT's transform and the tied decoder, its
loss weighed 1 (λ balances a binary loss against the generator's; two vocabulary losses need no balance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from scipy.stats import rankdata
from torch import Tensor, nn

from backbone import Backbone, ConfigError, Flops, Transformer
from backbone.model import init_weights
from objectives.base import IGNORE, Corrupted, FloorSpec, Objective, Output, Vocab, token_loss
from objectives.draws import Randomness
from objectives.masking import RULES, expected_count, rewrite, select_positions
from objectives.options import Options, check_fraction


HEADS = ("discriminator", "mlm")
SUPERVISE = ("all", "masked")


@dataclass(frozen=True)
class ElectraOptions(Options):
    rate: float = 0.15  # share of positions the generator fills in
    mask: float = 0.85  # of those: [MASK]; the rest are kept (ELECTRA uses no random replacement)
    gen_width: float = 0.25  # generator hidden size as a share of the backbone's
    disc_weight: float = 50.0  # λ
    rule: str = "exact"
    head: str = "discriminator"  # the backbone's task: "discriminator" (replaced or not) or "mlm" (the original token)
    supervise: str = "all"  # where the backbone's loss is taken: "all" positions, or the generator's ("masked")

    def validate(self) -> None:
        if self.head not in HEADS:
            raise ConfigError(f"electra head must be one of {', '.join(HEADS)}, got {self.head!r}")
        if self.supervise not in SUPERVISE:
            raise ConfigError(f"electra supervise must be one of {', '.join(SUPERVISE)}, got {self.supervise!r}")
        check_fraction("electra rate", self.rate, allow_zero=False)
        check_fraction("electra mask", self.mask)
        check_fraction("electra gen_width", self.gen_width, allow_zero=False)
        if self.disc_weight < 0:
            raise ConfigError(f"electra disc_weight must be >= 0, got {self.disc_weight}")
        if self.rule not in RULES:
            raise ConfigError(f"electra rule must be one of {', '.join(RULES)}, got {self.rule!r}")


def roc_auc(scores: torch.Tensor, positive: torch.Tensor) -> float:
    """P(score of a random positive > score of a random negative), ties counting one half (Mann–Whitney U)."""
    ranks = torch.from_numpy(rankdata(scores.cpu().numpy()))  # average ranks for ties
    positives = int(positive.sum())
    negatives = positive.numel() - positives
    return ((ranks[positive.cpu()].sum().item() - positives * (positives + 1) / 2) / (positives * negatives))


class Electra(Objective):
    name = "electra"
    options_class = ElectraOptions
    attention = "bidirectional"

    def __init__(self, backbone: Backbone, vocab: Vocab, options: ElectraOptions | None = None) -> None:
        super().__init__(backbone, vocab, options)
        c = backbone.config
        width = max(1, round(c.d_model * self.options.gen_width))
        heads = max(1, width // c.head_dim)  # keep the backbone's head size where the width allows
        if width % heads or (c.positions == "rope" and (width // heads) % 2):
            raise ConfigError(f"electra gen_width={self.options.gen_width} gives a generator width {width} that "
                              f"does not split into attention heads")
        self.generator_config = replace(c, d_model=width, n_head=heads, d_ff=4 * width)
        d = c.d_model
        self.generator_in = nn.Linear(d, width)  # shared embeddings (width d) into the narrow generator
        self.generator = Transformer(self.generator_config)
        # ELECTRA's MLM head: dense to the embedding width, GELU, LayerNorm, then the tied embedding matrix.
        self.generator_head = nn.Sequential(nn.Linear(width, d), nn.GELU(), nn.LayerNorm(d, eps=c.norm_eps))
        if self.options.head == "mlm":  # BERT's transform before the tied decoder
            self.mlm_head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d, eps=c.norm_eps))
        else:
            self.discriminator_head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))
        head = self.mlm_head if self.options.head == "mlm" else self.discriminator_head
        for module in (self.generator_in, self.generator_head, head):
            module.apply(init_weights)

    def corrupt(self, tokens: Tensor, generator: Randomness) -> Corrupted:
        o = self.options
        selected = select_positions(tuple(tokens.shape), o.rate, o.rule, generator)
        inputs, kind = rewrite(tokens, selected, o.mask, 0.0, self.vocab, generator)
        targets = torch.where(selected, tokens, IGNORE)  # the generator's MLM targets
        return Corrupted(inputs, targets, "bidirectional", tokens, info={"rewrite": kind})

    @property
    def signals(self) -> frozenset[str]:
        # the discriminator tells replaced tokens apart; the shared embeddings also learn [MASK] through the generator
        return frozenset({"replaced_token", "mask_token"})

    def generator_positions(self, seq_len: int) -> float:
        return expected_count(seq_len, self.options.rate, self.options.rule)

    def backbone_positions(self, seq_len: int) -> float:
        """Where the backbone's own loss is taken: every position, or the generator's."""
        return seq_len if self.options.supervise == "all" else self.generator_positions(seq_len)

    @property
    def backbone_task(self) -> str:
        return "discriminator" if self.options.head == "discriminator" else "mlm"

    def expected_supervised_positions(self, seq_len: int) -> float:
        return self.backbone_positions(seq_len) + self.generator_positions(seq_len)

    def describe(self, seq_len: int) -> dict:
        generator, own = self.generator_positions(seq_len), self.backbone_positions(seq_len)
        return {f"{self.backbone_task}_positions": own, "generator_positions": generator,
                "parts": f"{self.backbone_task} {own:g} + generator {generator:g}"}

    @classmethod
    def report_note(cls, metrics: dict[str, str], closed: dict[str, str]) -> str | None:
        """The discriminator read as the paper's pretraining metrics read it, against its trivial answer ("everything
        is original") and, on the embedded language, the Bayes reference discriminator for the same generator."""
        if "discriminator_auc" not in metrics:
            return None
        bayes = (f" The Bayes reference discriminator for the same generator and windows reaches "
                 f"{metrics['discriminator_bayes_loss']}: the discriminator closed {metrics['discriminator_closed']} "
                 f"of the gap from its labels' entropy to it." if "discriminator_closed" in metrics else "")
        paper = (f" At probability 0.5 its precision of \"replaced\" is {metrics['discriminator_precision']} and its "
                 f"recall {metrics['discriminator_recall']} (trained ELECTRA discriminators: about 0.80 and 0.5)."
                 if "discriminator_recall" in metrics else "")
        sampled = (f" (its samples are the original {metrics['generator_sample_accuracy']} of the time)"
                   if "generator_sample_accuracy" in metrics else "")
        return (f"discriminator loss {metrics['discriminator_loss']} against {metrics['label_entropy']}, the entropy "
                f"of its labels (the loss of always answering the replaced fraction "
                f"{metrics['replaced_fraction']}).{bayes}{paper} Accuracy {metrics['discriminator_accuracy']} against "
                f"{metrics['trivial_accuracy']} for \"all original\", ROC AUC {metrics['discriminator_auc']} (0.5 is "
                f"chance). Its generator reached {metrics.get('generator_accuracy', '')} accuracy{sampled}"
                + (f" and closed {closed['generator_loss']} of its learnable range" if closed.get("generator_loss")
                   else "") + ": the better the generator, the harder the discriminator's task.")

    def pooled_metrics(self, outputs: list[Output]) -> dict[str, float]:
        """Whether the discriminator has left its trivial answer, "everything is original" (accuracy 1 − replaced,
        loss H(replaced)), read as google-research/electra's metric_fn reads it: precision and recall of "replaced"
        at probability 0.5 (`disc_precision`, `disc_recall`), the accuracy on each label, and the ROC AUC of replaced
        against original, which shows learning even where no logit crosses 0.5 yet. A precision with nothing
        predicted replaced is 0, as tf.metrics.precision gives it."""
        if self.options.head != "discriminator":
            return {}
        logits = torch.cat([o.tensors["discriminator_logits"].flatten() for o in outputs]).double()
        labels = torch.cat([o.tensors["discriminator_labels"].flatten() for o in outputs]).bool()
        replaced = labels.double().mean().item()
        predicted = logits > 0
        hits = int((predicted & labels).sum())
        metrics = {"trivial_accuracy": max(replaced, 1 - replaced),
                   "label_entropy": 0.0 if replaced in (0.0, 1.0) else
                   -(replaced * math.log(replaced) + (1 - replaced) * math.log(1 - replaced)),
                   "discriminator_precision": hits / max(1, int(predicted.sum())),
                   "discriminator_predicted_replaced": predicted.double().mean().item()}
        if labels.any():
            metrics["discriminator_recall"] = hits / int(labels.sum())  # the accuracy on replaced tokens
        if not labels.all():
            metrics["discriminator_original_accuracy"] = int((~predicted & ~labels).sum()) / int((~labels).sum())
        if 0 < int(labels.sum()) < labels.numel():
            metrics["discriminator_auc"] = roc_auc(logits, labels)
        return metrics

    @torch.no_grad()
    def replacement_story(self, batch: Corrupted) -> tuple[Tensor, float]:
        """What the Bayes reference discriminator needs to know of the corruption: at every position, the generator's
        distribution over the vocabulary had that position been [MASK]ed too (at a position the batch masked, the very
        one its sample was drawn from), (N, L, vocab) probabilities; and the probability that a position is drawn,
        rate × mask (a kept position's draw, which saw the original, is counted as shown as it was). None for the
        ablations, whose question is not "which of all positions were replaced" (no reference is stated for them)."""
        if (self.options.head, self.options.supervise) != ("discriminator", "all"):
            return None
        N, L = batch.inputs.shape
        positions = torch.arange(L, device=batch.inputs.device)
        distributions = []
        chunk = max(1, 2 ** 18 // (N * L))  # positions per generator call: a bounded number of tokens at once
        for start in range(0, L, chunk):
            at = positions[start:start + chunk]
            variants = batch.inputs.unsqueeze(0).repeat(len(at), 1, 1)  # (positions, N, L), position t masked in t
            variants[torch.arange(len(at)), :, at] = self.vocab.MASK
            hidden = self.generator_states(variants.flatten(0, 1)).view(len(at), N, L, -1)
            hidden = hidden[torch.arange(len(at)), :, at]  # (positions, N, width): variant t read at t
            distributions.append(self.generator_logits(hidden).float().softmax(-1))
        return torch.cat(distributions).transpose(0, 1), self.options.rate * self.options.mask

    @classmethod
    def tuning_trials(cls, spec: str, rates: tuple[float, ...]) -> list[tuple[str, float]]:
        """Where the spec leaves its knobs to tuning (plain `electra`): the paper's setting (λ = 50, a generator ¼ of
        the discriminator's width), λ = 10, and a generator ½ as wide (the paper's Figure 3 range, ¼–½), each at the
        two rates below the grid's middle (the discriminator's loss, weighed by λ, takes the larger steps): as many
        trials as the others."""
        if spec != cls.name:
            return super().tuning_trials(spec, rates)
        settings = (cls.name, f"{cls.name}:disc_weight=10", f"{cls.name}:gen_width=0.5")
        middle = len(rates) // 2
        chosen = rates[max(0, middle - len(rates) // len(settings)):middle]
        return [(setting, rate) for setting in settings for rate in chosen]

    def bayes_floors(self) -> list[FloorSpec]:
        # the generator's masked-token loss; the discriminator's best loss depends on the generator, so it has none
        return [FloorSpec("generator_loss", "masked_token", keep=1 - self.options.mask, mask=self.options.mask)]

    def counted_positions(self, batch: Corrupted) -> int:
        return self.own_positions(batch) + batch.num_supervised  # the backbone's + the generator's

    def own_positions(self, batch: Corrupted) -> int:
        return batch.inputs.numel() if self.options.supervise == "all" else batch.num_supervised

    def loss_counts(self, batch: Corrupted) -> dict[str, int]:
        # The loss is a sum of two means over different positions: the generator's over the masked ones, the
        # discriminator's over all of them. Weighing both by one share is exact only when every row has the same
        # number of masked positions (rule=exact), so each mean is weighed by its own count.
        return {"generator": batch.num_supervised, self.backbone_task: self.own_positions(batch)}

    def generator_states(self, inputs: Tensor) -> Tensor:
        """The generator's hidden states over (masked) inputs, read through the shared embeddings."""
        return self.generator(self.generator_in(self.backbone.embed(inputs)), attention="bidirectional")

    def generator_logits(self, hidden: Tensor) -> Tensor:
        """The generator's MLM head on the rows given: dense, GELU, LayerNorm, then the tied embeddings."""
        return self.backbone.logits(self.generator_head(hidden))

    def forward(self, batch: Corrupted) -> Output:
        rows = batch.supervised
        generator_hidden = self.generator_states(batch.inputs)
        generator_hidden = generator_hidden.reshape(-1, generator_hidden.shape[-1]).index_select(0, rows)
        generator_logits = self.generator_logits(generator_hidden)
        generator_loss, generator_metrics = token_loss(generator_logits, batch.targets.reshape(-1)[rows])

        with torch.no_grad():  # Gumbel-max sampling at temperature 1; no gradient flows through the sample
            uniform = torch.rand(generator_logits.shape, device=generator_logits.device).clamp_(1e-9, 1.0)
            sampled = (generator_logits.float() - torch.log(-torch.log(uniform))).argmax(-1)
            fake = batch.original.reshape(-1).index_copy(0, rows, sampled).view_as(batch.original)
            labels = (fake != batch.original).float()  # a sample equal to the original counts as original

        hidden = self.backbone(fake, attention="bidirectional")
        # the backbone's loss over every position, or over the generator's (ELECTRA 15 %, Replace MLM)
        own = None if self.options.supervise == "all" else rows
        generator_metrics = {  # tensors: read when evaluating, never in a training step
            "generator_loss": generator_loss.detach(),
            "generator_accuracy": generator_metrics["accuracy"],
            # how often the generator's *sample* is the original (electra's sampled_masked_lm_accuracy)
            "generator_sample_accuracy": (sampled == batch.targets.reshape(-1)[rows]).float().mean(),
            "replaced_fraction": labels.mean(),
        }
        if self.options.head == "mlm":
            flat = hidden.reshape(-1, hidden.shape[-1])
            flat = flat if own is None else flat.index_select(0, own)
            originals = batch.original.reshape(-1)
            mlm_loss, mlm_metrics = token_loss(self.backbone.logits(self.mlm_head(flat)),
                                               originals if own is None else originals[own])
            return Output(generator_loss + mlm_loss, len(flat) + rows.numel(),
                          {**generator_metrics, "mlm_loss": mlm_loss.detach(), "mlm_accuracy": mlm_metrics["accuracy"]},
                          terms={"generator": generator_loss, "mlm": mlm_loss})
        discriminator_logits = self.discriminator_head(hidden).squeeze(-1).float()
        if own is not None:  # the head runs (and is counted) everywhere; its loss is read at the generator's rows
            discriminator_logits, labels = discriminator_logits.reshape(-1)[own], labels.reshape(-1)[own]
        discriminator_loss = F.binary_cross_entropy_with_logits(discriminator_logits, labels)
        weighted_discriminator_loss = self.options.disc_weight * discriminator_loss
        loss = generator_loss + weighted_discriminator_loss
        metrics = {**generator_metrics, "discriminator_loss": discriminator_loss.detach(),
                   "discriminator_accuracy": ((discriminator_logits > 0).float() == labels).float().mean(),
                   "replaced_fraction": labels.mean()}
        return Output(loss, labels.numel() + rows.numel(), metrics,
                      {"discriminator_inputs": fake, "discriminator_labels": labels,
                       "discriminator_logits": discriminator_logits.detach()},
                      terms={"generator": generator_loss, "discriminator": weighted_discriminator_loss})

    def _flops(self, batch_size: int, seq_len: int, generator_rows: float, own_rows: float) -> float:
        c, g = self.backbone.config, self.generator_config
        tokens = batch_size * seq_len
        generator = (Flops(dense=2 * tokens * c.d_model * g.d_model)  # generator_in
                     + self.generator.flops(batch_size, seq_len))
        backbone = self.backbone.flops(batch_size, seq_len, 0).training_step
        # generator head (width -> d) and the tied vocabulary projection, on the masked rows only
        per_row = Flops(dense=2 * g.d_model * c.d_model + 2 * c.d_model * c.vocab_size).training_step
        if self.options.head == "mlm":  # the transform and the tied decoder on the rows its loss reads
            head = Flops(dense=2 * c.d_model * c.d_model + 2 * c.d_model * c.vocab_size).training_step * own_rows
        else:  # the discriminator head, on every position whichever its loss reads
            head = Flops(dense=2 * tokens * c.d_model * (c.d_model + 1)).training_step
        return generator.training_step + backbone + head + per_row * generator_rows

    def flops(self, batch: Corrupted) -> int:
        batch_size, seq_len = batch.inputs.shape
        return int(self._flops(batch_size, seq_len, batch.num_supervised, self.own_positions(batch)))

    def expected_flops_per_sequence(self, seq_len: int) -> float:
        return self._flops(1, seq_len, self.generator_positions(seq_len), self.backbone_positions(seq_len))

