"""The Bayes-optimal loss of T5 span corruption on the embedded language (objectives.span), exactly.

Span corruption shows the raw words with each noise span replaced by one sentinel, so the input tells the visible
words and how many fall between two sentinels, never how long a span was; the targets are each span's sentinel and
words, then EOS. The spans' lengths are a uniform composition of the noise count into the span count, drawn
independently of the words, so the pair (inputs, targets) is an invertible function of (words, lengths) and

    -log p(targets | inputs) = -log p(words) + log sum_c p(visible words placed as lengths c put them)

(the composition's probability is the same for every c and cancels). The sum runs over every composition c of the
noise into spans of at least one word: a forward pass over the raw positions that also carries how many noise words
came so far and whether the last position was hidden (a hidden position is summed out: no emission). Its sum is each
sequence's loss over all its target tokens; the sentinels and EOS that the lengths fix are part of it, as the chain
rule over the targets counts them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bench.data import synthetic


def span_nll(language: synthetic.Language, words: Tensor, noise: Tensor) -> Tensor:
    """(N,): -log p(targets | inputs) of span corruption in nats, summed over each sequence's targets. `words` (N, R)
    are the raw words, `noise` (N, R) bool the noise mask: segments alternate visible, noise, ..., starting visible
    and ending with noise, every row with the same noise count and the same number of spans."""
    synthetic._check_words(words, language.emission.shape[-1])
    if noise.shape != words.shape or noise.dtype != torch.bool:
        raise ValueError(f"noise must be a bool tensor of the words' shape {tuple(words.shape)}")
    batch, raw = words.shape
    span_starts = noise & ~torch.nn.functional.pad(noise[:, :-1], (1, 0))
    noise_count, spans = noise.sum(1), span_starts.sum(1)
    if (noise_count != noise_count[0]).any() or (spans != spans[0]).any():
        raise ValueError("every row needs the same noise count and the same number of spans")
    if noise[:, 0].any() or not noise[:, -1].all():
        raise ValueError("each row's segments must start visible and end with noise")
    total_noise = int(noise_count[0])
    visible = words[~noise].view(batch, raw - total_noise)
    # A_i: visible words before span i starts, the only places a span may begin
    boundaries = (~noise).cumsum(1)[span_starts].view(batch, -1)  # (batch, spans)
    return -synthetic.log_likelihood_from(language, words) + _log_visible(language, visible, boundaries, total_noise)


def _log_visible(language: synthetic.Language, visible: Tensor, boundaries: Tensor, total_noise: int) -> Tensor:
    """(N,): log sum_c p(the visible words at the positions composition c gives them), by a forward pass over the
    raw positions whose state is (noise so far n, last position hidden h, component k, HMM state s)."""
    batch, shown = visible.shape
    raw = shown + total_noise
    K, S = language.initial.shape
    noise_so_far = torch.arange(total_noise + 1)
    emission = language.emission.permute(0, 2, 1)  # (K, V, S)
    # joint[b, n, h, k, s]: p(component k, state s at the last position, the evidence so far) over the paths with n
    # noise words so far, the last of them hidden (h = 1) or shown (h = 0); rescaled per row, the scale kept in log
    joint = torch.zeros(batch, total_noise + 1, 2, K, S, dtype=language.emission.dtype)
    joint[:, 0, 0] = language.prior[None, :, None] * language.initial[None] * emission[:, visible[:, 0]].transpose(0, 1)
    log_scale = torch.zeros(batch, dtype=joint.dtype)
    for t in range(1, raw):
        predicted = torch.einsum("bnhks,kst->bnhkt", joint, language.transition)
        shown_before = t - noise_so_far[None, :]  # (1, n+1): visible words before position t on each path
        at_boundary = (shown_before[..., None] == boundaries[:, None, :]).any(-1)  # (batch, n+1)
        after_last = shown_before == shown  # every visible word shown (the last span ends the row): only noise remains
        word = visible.gather(1, shown_before.clamp(0, shown - 1).expand(batch, -1))  # (batch, n+1)
        emit = emission[:, word].permute(1, 2, 0, 3)  # (batch, n+1, K, S)
        shown_state, hidden_state = predicted[:, :, 0], predicted[:, :, 1]
        next_joint = torch.zeros_like(joint)
        inside = ~at_boundary & (shown_before >= 0) & (shown_before < shown)
        # inside a visible segment: the word at this position is the next visible one
        next_joint[:, :, 0] += torch.where(inside[..., None, None], shown_state * emit, 0.0)
        # a segment just ended: a span starts (one more noise word); or a span goes on
        hide = torch.where(at_boundary[..., None, None], shown_state + hidden_state, 0.0)
        next_joint[:, 1:, 1] += hide[:, :-1]
        # a span (of at least one word) ends where the next segment starts, unless no segment is left
        resume = at_boundary & ~after_last
        next_joint[:, :, 0] += torch.where(resume[..., None, None], hidden_state * emit, 0.0)
        scale = next_joint.flatten(1).amax(1).clamp_min(torch.finfo(joint.dtype).tiny)
        joint = next_joint / scale[:, None, None, None, None]
        log_scale += scale.log()
    return joint[:, total_noise, 1].sum((1, 2)).log() + log_scale
