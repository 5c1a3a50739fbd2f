"""What changes in an objective's forward when the seeds of a stacked model run it under torch.func.vmap
(bench.training.stacking): SeedOps routes four kinds of call through rules of its own instead of functorch's, for
speed and so that each seed computes what its separate run computes:
- linear layers run seed by seed, as the very addmm / mm calls a separate run's F.linear and its backward make,
  written into one stacked output (functorch's batched products were 1.1-3.5x slower at the default shape);
- layer norms run seed by seed with the fused kernel (functorch's rule normalises, then scales and shifts apart);
- attention folds the seeds into the batch dimension (functorch has no batching rule for CPU's fused kernel);
- random draws in a forward (ELECTRA's Gumbel noise) come from each seed's own generator, seeded from (seed, step,
  0) as train_step seeds a separate run's, so each seed draws the numbers its separate run draws.
The fused vocabulary loss has its vmap rule in backbone.fused_loss. Any other random draw under vmap is an error.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

is_batched = torch._C._functorch.is_batchedtensor


def seed_first(tensor: Tensor | None, dim: int | None, seeds: int) -> Tensor | None:
    """An operand of a vmap rule with its seed dimension first; one that vmap does not batch, repeated."""
    if tensor is None:
        return None
    return tensor.expand(seeds, *tensor.shape) if dim is None else tensor.movedim(dim, 0)


def vmap_rule(rule: Callable) -> Callable:
    """A function that exists only under vmap, as an autograd.Function whose vmap staticmethod is `rule(seeds,
    in_dims, *operands) -> (output, out_dims)`; autograd records the ops the rule runs on the stacked tensors."""

    class Rule(torch.autograd.Function):
        @staticmethod
        def forward(*operands):
            raise RuntimeError(f"{rule.__name__} runs only under torch.func.vmap")

        @staticmethod
        def setup_context(ctx, inputs, output) -> None:
            pass

        @staticmethod
        def vmap(info, in_dims, *operands):
            return rule(info.batch_size, in_dims, *operands)

    Rule.__name__ = rule.__name__
    return Rule.apply


class _SeedLinear(torch.autograd.Function):
    """Linear layers of the seeds: inputs (seeds, ..., K), weights (seeds, O, K), biases (seeds, O) or None. Each
    seed's product is the addmm of a separate run's F.linear on contiguous input, and its backward the mm calls of
    torch's AddmmBackward, each written straight into its seed's slice of one stacked tensor."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        x = x.contiguous()
        out = x.new_empty(*x.shape[:-1], weight.shape[1])
        for seed in range(len(x)):
            rows, into = x[seed].reshape(-1, x.shape[-1]), out[seed].view(-1, weight.shape[1])
            if bias is None:
                torch.mm(rows, weight[seed].t(), out=into)
            else:
                torch.addmm(bias[seed], rows, weight[seed].t(), out=into)
        ctx.save_for_backward(x, weight)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight = ctx.saved_tensors
        need_x, need_weight, need_bias = ctx.needs_input_grad
        grad = grad.contiguous()
        grad_x = torch.empty_like(x) if need_x else None
        grad_weight = torch.empty_like(weight) if need_weight else None
        grad_bias = grad.new_empty(len(grad), grad.shape[-1]) if need_bias else None
        for seed in range(len(x)):
            rows = grad[seed].reshape(-1, grad.shape[-1])
            if need_x:
                torch.mm(rows, weight[seed], out=grad_x[seed].view(-1, x.shape[-1]))
            if need_weight:
                torch.mm(rows.t(), x[seed].reshape(-1, x.shape[-1]), out=grad_weight[seed])
            if need_bias:
                torch.sum(rows, 0, out=grad_bias[seed])
        return grad_x, grad_weight, grad_bias


@vmap_rule
def seed_linear(seeds: int, dims, x: Tensor, weight: Tensor, bias: Tensor | None):
    return _SeedLinear.apply(seed_first(x, dims[0], seeds), seed_first(weight, dims[1], seeds),
                             seed_first(bias, dims[2], seeds)), 0


@vmap_rule
def seed_each(seeds: int, dims, function: Callable[..., Tensor], *operands: Tensor | None):
    """`function` seed by seed on each seed's slice of the operands (one that vmap does not batch, as it is): the
    kernels a separate run calls, where functorch's rule would compute something else (a layer norm's affine part
    apart from its normalisation, a loss's mean in another order)."""
    columns = [[operand] * seeds if dim is None else operand.movedim(dim, 0).unbind(0)
               for operand, dim in zip(operands, dims[1:])]
    return torch.stack([function(*row) for row in zip(*columns)]), 0


@vmap_rule
def seed_attention(seeds: int, dims, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
                   scale: float | None):
    q, k, v = (seed_first(t, dim, seeds).flatten(0, 1) for t, dim in zip((q, k, v), dims))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
    return out.unflatten(0, (seeds, -1)), 0


@vmap_rule
def seed_draws(seeds: int, dims, anchor: Tensor, draw: Callable[[], Tensor]):
    return draw(), 0


def _linear(input, weight, bias=None):
    return input, weight, bias


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


def _layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return (lambda x, w, b: F.layer_norm(x, normalized_shape, w, b, eps)), input, weight, bias


def _binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                      reduction="mean", pos_weight=None):
    plain = weight is None and pos_weight is None and size_average is None and reduce is None
    return (lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=reduction)), input, target, plain


DRAWS = {torch.rand: torch.rand, torch.randn: torch.randn, torch.rand_like: torch.rand, torch.randn_like: torch.randn}


class SeedOps(TorchFunctionMode):
    """Active inside the vmapped forward: the per-seed rules above for linear layers with stacked weights, layer
    norms with stacked gains, the binary cross-entropy, attention whose mask all seeds share, and random draws.
    `generators(i)`: seed i's generator for this step; `anchor`: a tensor vmap batches, for a draw's rule."""

    def __init__(self, generators: Callable[[int], torch.Generator], seeds: int, anchor: Tensor) -> None:
        super().__init__()
        self.generators, self.seeds, self.anchor = generators, seeds, anchor
        self.draws = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight, bias = _linear(*args, **kwargs)
            if is_batched(weight):
                return seed_linear(x, weight, bias)
        elif func is F.layer_norm:
            function, x, weight, bias = _layer_norm(*args, **kwargs)
            if weight is not None and is_batched(weight):
                return seed_each(function, x, weight, bias)
        elif func is F.binary_cross_entropy_with_logits:
            function, x, target, plain = _binary_cross_entropy_with_logits(*args, **kwargs)
            if plain and is_batched(x):
                return seed_each(function, x, target)
        elif func is F.scaled_dot_product_attention:
            q, k, v, mask, dropout, causal, scale, gqa = _sdpa(*args, **kwargs)
            if dropout == 0 and not gqa and (mask is None or not is_batched(mask)):
                return seed_attention(q, k, v, mask, causal, scale)
        elif func in DRAWS and kwargs.get("generator") is None:
            return self.draw(func, args, kwargs)
        elif func is Tensor.clamp_:
            # ELECTRA clamps its drawn noise in place, where functorch loops over the seeds (element-wise ops on a
            # few rows of the vocabulary, too small to time) and would warn once about the speed
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return func(*args, **kwargs)
        return func(*args, **kwargs)

    def draw(self, func, args, kwargs) -> Tensor:
        """Each seed's draw from its own generator, in the order its separate run's forward draws."""
        if func in (torch.rand_like, torch.randn_like):
            shape, kwargs = args[0].shape, {"dtype": args[0].dtype, "device": args[0].device, **kwargs}
        else:
            size = args or kwargs.get("size", ())
            shape = torch.Size(size[0] if len(size) == 1 and not isinstance(size[0], int) else size)
        options = {key: kwargs[key] for key in ("dtype", "device") if kwargs.get(key) is not None}
        self.draws += 1

        def drawn() -> Tensor:
            return torch.stack([DRAWS[func](shape, generator=self.generators(seed), **options)
                                for seed in range(self.seeds)])
        return seed_draws(self.anchor, drawn)
