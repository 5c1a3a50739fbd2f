"""Vocabulary projection and cross-entropy in one pass over row chunks.

With a large vocabulary, the logits of a causal LM (4,064 rows × 8,292 ids at T = 128, batch 32) are 135 MB; PyTorch's
log_softmax + nll_loss then write and re-read that tensor several times (log-probabilities, a zero-filled gradient,
the softmax gradient), which costs as much time as the projection itself on a CPU. Here each chunk of rows is
projected, reduced to its loss, and turned into its gradient in place (softmax − one-hot) while it is still warm;
the gradients of the hidden rows and of the weight are computed at once and handed to autograd in backward. The
matrix products are exactly those of the plain path (one forward, two backward), so the FLOP count does not change.
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK_ROWS = 1024  # on a CPU: a chunk of logits that stays in cache while it is reduced (measured, bench.perf)
GPU_CHUNK_BYTES = 2 ** 28  # on a GPU the cache argument does not hold: fewer, larger chunks mean fewer launches


def chunk_rows(device: torch.device, vocab_size: int) -> int:
    """Rows projected at once: CHUNK_ROWS on a CPU; on a GPU as many as fit in GPU_CHUNK_BYTES of fp32 logits."""
    if device.type == "cpu":
        return CHUNK_ROWS
    return max(CHUNK_ROWS, GPU_CHUNK_BYTES // (4 * vocab_size))


def _compute_dtype(tensor: Tensor) -> torch.dtype:
    device = tensor.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else tensor.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, need_grad: bool) -> tuple[Tensor, Tensor]:
        dtype = _compute_dtype(hidden)
        # fp16 cannot hold (softmax − one-hot) / rows before the loss scaler's factor arrives: do those products in fp32
        grad_dtype = torch.float32 if dtype == torch.float16 else dtype
        with torch.autocast(hidden.device.type, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)
            w_grad = w.to(grad_dtype)
            rows = len(targets)
            loss = torch.zeros((), dtype=torch.promote_types(dtype, torch.float32), device=hidden.device)
            correct = torch.zeros((), dtype=torch.long, device=hidden.device)
            grad_hidden = torch.empty_like(hidden) if need_grad else None
            grad_weight = torch.zeros_like(weight, dtype=loss.dtype) if need_grad else None
            step = chunk_rows(hidden.device, len(weight))
            for start in range(0, rows, step):
                chunk = slice(start, start + step)
                target = targets[chunk, None]
                logits = (h[chunk] @ w.T).to(torch.promote_types(dtype, torch.float32))
                target_logit = logits.gather(1, target)
                correct += (logits.argmax(-1, keepdim=True) == target).sum()
                shift = logits.amax(-1, keepdim=True)
                unnormalized = logits.sub_(shift).exp_()  # in place: the chunk is reused for the gradient
                total = unnormalized.sum(-1, keepdim=True)
                loss += (shift + total.log() - target_logit).sum()
                if need_grad:  # d loss / d logits = (softmax − one-hot) / rows
                    grad_logits = unnormalized.div_(total * rows)
                    grad_logits.scatter_add_(1, target, torch.full(target.shape, -1.0 / rows, dtype=grad_logits.dtype,
                                                                   device=target.device))
                    grad_logits = grad_logits.to(grad_dtype)
                    grad_hidden[chunk] = grad_logits @ w_grad
                    grad_weight += grad_logits.T @ h[chunk].to(grad_dtype)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return loss / rows, correct

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_correct: Tensor):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_loss, (grad_weight * grad_loss).to(ctx.weight_dtype), None, None


def linear_cross_entropy(hidden: Tensor, weight: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """(mean cross-entropy of hidden @ weightᵀ against targets, number of rows whose arg-max is the target).
    The gradient products run only when a gradient will be asked for (not under no_grad, as in evaluation)."""
    need_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    return _LinearCrossEntropy.apply(hidden, weight, targets, need_grad)
