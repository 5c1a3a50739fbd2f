"""Causal language modelling: predict x[t+1] from x[..t] at every position of a window (T − 1 supervised positions),
and generate with a KV cache."""

from __future__ import annotations

import torch
from torch import Tensor

from backbone import ConfigError
from objectives.base import IGNORE, Corrupted, FloorSpec, Objective, Output, lm_flops, lm_forward
from objectives.draws import Randomness


class CausalLM(Objective):
    name = "ar"
    attention = "causal"
    can_generate = True
    tagging_ceiling = "filtering"  # its features at t have seen tokens up to t only

    def corrupt(self, tokens: Tensor, generator: Randomness) -> Corrupted:
        # Nothing is random; `generator` is accepted so every objective has the same signature.
        targets = torch.full_like(tokens, IGNORE)
        targets[:, :-1] = tokens[:, 1:]
        return Corrupted(tokens, targets, "causal", tokens)

    @property
    def signals(self) -> frozenset[str]:
        return frozenset({"next_token"})

    def check_seq_len(self, seq_len: int) -> None:
        super().check_seq_len(seq_len)
        if seq_len < 2:
            raise ConfigError(f"ar needs seq_len >= 2 (one token to read, one to predict), got {seq_len}")

    def expected_supervised_positions(self, seq_len: int) -> float:
        return float(seq_len - 1)

    def bayes_floors(self) -> list[FloorSpec]:
        return [FloorSpec("loss", "next_token")]

    def forward(self, batch: Corrupted) -> Output:
        return lm_forward(self.backbone, batch)

    def flops(self, batch: Corrupted) -> int:
        return lm_flops(self.backbone, batch)

    def expected_flops_per_sequence(self, seq_len: int) -> float:
        return float(self.backbone.flops(1, seq_len, seq_len - 1, "causal").training_step)

    @torch.no_grad()
    def generate(self, prompt: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None) -> Tensor:
        """Continue `prompt` (batch, P) by `max_new_tokens` tokens, feeding one new token per step through the KV
        cache. temperature 0 is greedy decoding; top_k keeps only the k most likely tokens before sampling."""
        batch_size, prompt_len = prompt.shape
        total = prompt_len + max_new_tokens
        if total > self.backbone.config.max_seq_len:
            raise ConfigError(f"prompt ({prompt_len}) + max_new_tokens ({max_new_tokens}) exceeds max_seq_len "
                              f"{self.backbone.config.max_seq_len}")
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature}")
        was_training = self.training
        self.eval()  # no dropout while decoding
        cache = self.backbone.new_kv_cache(batch_size, total)
        hidden = self.backbone(prompt, attention="causal", kv_cache=cache)
        out = [prompt]
        for _ in range(max_new_tokens):
            logits = self.backbone.logits(hidden[:, -1]).float()
            next_token = sample_token(logits, temperature, top_k, generator)
            out.append(next_token)
            hidden = self.backbone(next_token, attention="causal", kv_cache=cache)
        self.train(was_training)
        return torch.cat(out, dim=1)


def sample_token(logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None) -> Tensor:
    """(batch, vocab) logits -> (batch, 1) token ids."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator)
