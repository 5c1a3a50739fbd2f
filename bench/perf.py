"""Speed against the tools researchers would otherwise use, measured in one run.

    python -m bench.perf [--model small] [--seq-len 128] [--batch-size 32] [--precision 32-true|bf16-mixed]
                         [--accelerator cpu|cuda] [--comparison-steps N] [--json]

Per objective, one training step (corruption, forward, backward, AdamW) of the suite against its Hugging Face peer at
the same width, depth, heads, vocabulary, length and batch, dropout off on both: mlm vs BertForMaskedLM fed by
DataCollatorForLanguageModeling; ar vs GPT2LMHeadModel; electra vs ElectraForMaskedLM + ElectraForPreTraining with
ELECTRA's recipe; span vs the AR peer at the same packed length (what span corruption costs elsewhere). MFU is model
FLOP/s (the suite's own count for ours, FlopCounterMode's for the peers) over the matrix-multiply peak of the dtype,
measured in the same run. Also: MLM masking against the collator, one process's share of a batch (its own rows) against
corrupting the whole batch, and KV-cached generation against recomputing the prefix for every new token. With
`--comparison-steps N`, N training steps of mlm at the default comparison's shape, through the training code: one run,
one run on one thread and two runs at once (two processes of one thread), each set beside the first as its peer, each
the median of 3 rounds that take the three in turn (comparison_rows). With `--accelerator cuda` the models run on the
GPU (corruption and the collator stay on the host, as in training), every timing synchronises the device, fp32 matmuls
run in TF32 as bench.training runs them, and MFU is against the device's dense peak
(bench.training.live_metrics.peak_flops: the datasheets' figures, then Lightning's table) instead of a measured matrix
product. The peers need `pip install -e ".[perf]"` (transformers); without it only the suite's own figures are printed.

This module is the command and its rows; how a step is timed (bench.speed.timing), the Hugging Face peers
(bench.speed.peers) and the --comparison-steps rows (bench.speed.throughput) are modules of their own.
"""

from __future__ import annotations

import contextlib
import math
import sys
from typing import Callable

import torch
from tabulate import tabulate

from backbone import Backbone, ConfigError, measure_flops, preset, resolve_model
from backbone.model import apply_rope, rope_tables
from bench.common.cli import MODEL_HELP, VOCAB_HELP, Parser, run
from bench.common.files import dumps
from bench.speed.peers import hf_tokenizer, peer_steps
from bench.speed.throughput import comparison_rows
from bench.speed.timing import matmul_peak, median_seconds, train_step
from bench.training.batches import training_batch
from bench.training.live_metrics import device_peak
from bench.training.recipe import configure_matmuls, single_seq_len, tf32_matmuls
from objectives import REGISTRY, Objective, Vocab, build_objective


DESCRIPTION = "Speed against the tools researchers would otherwise use, measured in one run."
AUTOCAST_DTYPES = {"32-true": None, "bf16-mixed": torch.bfloat16}  # the precisions bench.perf times


def ours(spec: str, model: str, vocab: Vocab, tokens: torch.Tensor, dtype, repeats: int,
         device: torch.device = torch.device("cpu")) -> dict:
    """One training step of `spec`: corruption on the host (tokens stay there), the step on `device`."""
    torch.manual_seed(0)
    backbone = Backbone(resolve_model(model, vocab.size, max_seq_len=tokens.shape[1]))
    objective = build_objective(spec, backbone, vocab).to(device)
    generator = torch.Generator().manual_seed(0)
    flops = objective.flops(objective.corrupt(tokens, torch.Generator().manual_seed(0)))
    loss_of = lambda: objective(objective.corrupt(tokens, generator).to(device)).loss  # noqa: E731
    seconds = median_seconds(train_step(objective, loss_of, dtype, device), repeats, device=device)
    return {"objective": objective, "seconds": seconds, "flops_per_step": flops}


def masking_rates(vocab: Vocab, tokens: torch.Tensor, repeats: int, objective: Objective) -> dict:
    generator = torch.Generator().manual_seed(0)
    ours_seconds = median_seconds(lambda: objective.corrupt(tokens, generator), repeats * 4)
    row = {"name": "masking (mlm corrupt)", "ours_tokens_per_s": tokens.numel() / ours_seconds}
    try:
        from transformers import DataCollatorForLanguageModeling
    except ImportError:
        return row
    collator = DataCollatorForLanguageModeling(hf_tokenizer(vocab.size), mlm_probability=0.15)  # as the BERT peer
    rows = [{"input_ids": r} for r in tokens.tolist()]
    # the collator's input is a list of examples; converting our batch to it is the data loader's work, not timed
    peer_seconds = median_seconds(lambda: collator(rows), repeats * 4)
    return {**row, "peer_tokens_per_s": tokens.numel() / peer_seconds}


def pipeline_rates(objective: Objective, tokens: torch.Tensor, repeats: int, processes: int = 8) -> dict:
    """The host side of a training step for one of `processes` processes: its own rows of the global batch, each row
    from its own generator (bench.training.batches.training_batch), against corrupting the whole batch and keeping a
    share, which every process did before rows had generators of their own."""
    processes = math.gcd(len(tokens), processes)
    share = slice(0, len(tokens) // processes)
    rows = median_seconds(lambda: training_batch(objective, tokens, 0, 1, len(tokens), share), repeats * 4)
    whole = median_seconds(lambda: objective.corrupt(tokens, torch.Generator().manual_seed(0)).rows(share),
                           repeats * 4)
    share_tokens = (share.stop - share.start) * tokens.shape[1]
    return {"name": f"{objective.spec()} batch, one of {processes} processes (its rows vs the whole batch)",
            "ours_tokens_per_s": share_tokens / rows, "peer_tokens_per_s": share_tokens / whole}


def generation_rates(model: str, vocab: Vocab, new_tokens: int, repeats: int, batch_size: int,
                     device: torch.device = torch.device("cpu")) -> dict:
    """Greedy decoding of `new_tokens` after a 16-token prompt, for `batch_size` sequences at once. At batch 1 a
    cached step is bound by reading the weights once per token, so batching is where the cache pays most."""
    prompt_len = 16
    torch.manual_seed(0)
    objective = build_objective("ar", Backbone(resolve_model(model, vocab.size, max_seq_len=prompt_len + new_tokens)),
                                vocab).eval().to(device)
    prompt = torch.randint(vocab.first_ordinary, vocab.end_ordinary, (batch_size, prompt_len)).to(device)

    @torch.no_grad()
    def recompute() -> torch.Tensor:
        tokens = prompt
        for _ in range(new_tokens):
            hidden = objective.backbone(tokens, attention="causal")
            tokens = torch.cat([tokens, objective.backbone.logits(hidden[:, -1]).argmax(-1, keepdim=True)], dim=1)
        return tokens

    cached = median_seconds(lambda: objective.generate(prompt, new_tokens, temperature=0), repeats, device=device)
    full = median_seconds(recompute, max(1, repeats // 2), device=device)
    return {"name": f"generation, batch {batch_size} ({new_tokens} tokens, KV cache vs recompute)",
            "ours_tokens_per_s": batch_size * new_tokens / cached, "peer_tokens_per_s": batch_size * new_tokens / full}


def pairwise_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE as the suite computed it before (issue 22, item 9): strided even and odd halves, promoted to fp32
    tables, rotated, stacked back together and cast back; `cos`/`sin` are the (T, head_dim / 2) angle tables."""
    even, odd = x[..., 0::2].float(), x[..., 1::2].float()
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2).to(x.dtype)


def rope_rates(model: str, vocab: Vocab, batch_size: int, seq_len: int, dtype, repeats: int,
               device: torch.device = torch.device("cpu")) -> dict:
    """Rotating q (or k) of one layer, forward and backward, in the activations' dtype: whole-width passes with the
    tables in that dtype (backbone.apply_rope) against the pairwise fp32 form it replaced."""
    config = resolve_model(model, vocab.size, max_seq_len=seq_len)
    head_dim = config.d_model // config.n_head
    cos, sin = rope_tables(head_dim, seq_len)
    cos, sin = cos.to(device), sin.to(device)
    half_cos, half_sin = cos[:, 0::2].contiguous(), sin[:, 1::2].contiguous()
    x = torch.randn(batch_size, config.n_head, seq_len, head_dim, generator=torch.Generator().manual_seed(0))
    x = x.to(device, dtype or torch.float32).requires_grad_()
    grad = torch.ones_like(x)

    def step(rotate: Callable) -> Callable[[], object]:
        return lambda: torch.autograd.grad(rotate(x), x, grad)

    ours_seconds = median_seconds(step(lambda t: apply_rope(t, cos, sin)), repeats * 4, device=device)
    peer_seconds = median_seconds(step(lambda t: pairwise_rope(t, half_cos, half_sin)), repeats * 4, device=device)
    return {"name": f"RoPE forward + backward, {str(x.dtype).removeprefix('torch.')} (whole width vs pairwise fp32)",
            "ours_tokens_per_s": batch_size * seq_len / ours_seconds,
            "peer_tokens_per_s": batch_size * seq_len / peer_seconds}


def perf_device(accelerator: str, precision: str) -> torch.device:
    """The device to time on, checked: a one-line ConfigError where it is missing or lacks the precision."""
    if accelerator == "cpu":
        return torch.device("cpu")
    if accelerator != "cuda":
        raise ConfigError(f"--accelerator must be cpu or cuda, got {accelerator!r}")
    if not torch.cuda.is_available():
        raise ConfigError("--accelerator cuda: no CUDA device is visible to PyTorch here")
    device = torch.device("cuda", torch.cuda.current_device())
    if precision == "bf16-mixed" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ConfigError(f"--precision bf16-mixed: {torch.cuda.get_device_name(device)} has no bf16; use 32-true")
    return device


def objective_rows(model: str, vocab: Vocab, tokens: torch.Tensor, dtype, repeats: int, device: torch.device,
                   peers: dict) -> list[dict]:
    """One row per registered objective (one registered later too), in the registry's order, beside its peer."""
    rows, peer_seconds = [], {}
    for spec in REGISTRY:
        measured = ours(spec, model, vocab, tokens, dtype, repeats, device)
        row = {"name": spec, "ours_tokens_per_s": tokens.numel() / measured["seconds"],
               "flops_per_step": measured["flops_per_step"], "ours_flops_per_s": measured["flops_per_step"]
               / measured["seconds"]}
        peer = measured["objective"].perf_peer  # span's is ar's: the same model at the same length, timed once
        if peer in peers:
            if peer not in peer_seconds:
                step, counted = peers[peer]
                peer_seconds[peer] = (median_seconds(step, repeats, device=device), measure_flops(counted))
            seconds, flops = peer_seconds[peer]
            row.update(peer_tokens_per_s=tokens.numel() / seconds, peer_flops_per_s=flops / seconds)
        rows.append(row)
    return rows


def measure(model: str = "small", seq_len: int = 128, batch_size: int = 32, precision: str = "32-true",
            vocab_size: int = 8192, repeats: int = 5, new_tokens: int = 256,
            accelerator: str = "cpu", comparison_steps: int = 0) -> tuple[list[dict], str | None]:
    """The rows of the table, and a note when the peers could not be measured."""
    if precision not in AUTOCAST_DTYPES:
        raise ConfigError(f"--precision must be one of {', '.join(AUTOCAST_DTYPES)}, got {precision!r}")
    dtype = AUTOCAST_DTYPES[precision]
    device = perf_device(accelerator, precision)
    configure_matmuls(device, tf32_matmuls(device, precision))  # as bench.training runs them
    vocab = Vocab.for_tokenizer(vocab_size)
    tokens = torch.randint(vocab.first_ordinary, vocab.end_ordinary, (batch_size, seq_len),
                           generator=torch.Generator().manual_seed(0))  # on the host, where corruption runs
    listed = device_peak(device, precision)  # a GPU's from the datasheets' table; a CPU's is measured
    first_peak = listed[0] if listed else matmul_peak(dtype or torch.float32, device=device)
    note, peers = None, {}
    try:
        peers = peer_steps(model, vocab.size, tokens, dtype, device)
    except ImportError:
        note = 'the peer columns need transformers: pip install -e ".[perf]"'
    rows = objective_rows(model, vocab, tokens, dtype, repeats, device, peers)
    mlm = build_objective("mlm", Backbone(preset("tiny", vocab.size, max_seq_len=seq_len)), vocab)
    rows.append(masking_rates(vocab, tokens, repeats, mlm))
    rows.append(pipeline_rates(mlm, tokens, repeats))
    rows.append(rope_rates(model, vocab, batch_size, seq_len, dtype, repeats, device))
    for generation_batch in (1, 8):
        rows.append(generation_rates(model, vocab, new_tokens, max(1, repeats // 2), generation_batch, device))
    rows.extend(comparison_rows(comparison_steps) if comparison_steps and device.type == "cpu" else [])
    # measured: the device's best, before and after
    peak = listed[0] if listed else max(first_peak, matmul_peak(dtype or torch.float32, device=device))
    for row in rows:
        if "peer_tokens_per_s" in row:
            row["ratio"] = row["ours_tokens_per_s"] / row["peer_tokens_per_s"]
        row["mfu"] = row.pop("ours_flops_per_s") / peak if "ours_flops_per_s" in row else None
        if "peer_flops_per_s" in row:
            row["peer_mfu"] = row.pop("peer_flops_per_s") / peak
        row["matmul_peak_flops"] = peak
        row["peak_source"] = listed[1] if listed else "measured matrix product"
    return rows, note


def format_table(rows: list[dict]) -> str:
    fmt = lambda value, spec: "" if value is None else format(value, spec)  # noqa: E731
    table = [[row["name"], fmt(row["ours_tokens_per_s"], ",.0f"), fmt(row.get("peer_tokens_per_s"), ",.0f"),
              fmt(row.get("ratio"), ".2f"), fmt(row["mfu"] and 100 * row["mfu"], ".1f"),
              fmt(row.get("peer_mfu") and 100 * row["peer_mfu"], ".1f")] for row in rows]
    return tabulate(table, headers=["", "ours tokens/s", "peer tokens/s", "ratio", "ours MFU %", "peer MFU %"],
                    tablefmt="github", disable_numparse=True, colalign=("left",) + ("right",) * 5)


def main(argv: list[str] | None = None) -> None:
    parser = Parser(prog="python -m bench.perf", description=DESCRIPTION)
    parser.add_argument("--model", default="small", help=MODEL_HELP + " (default small)")
    parser.add_argument("--seq-len", type=single_seq_len, default=128, help="sequence length (default 128)")
    parser.add_argument("--batch-size", type=int, default=32, help="batch size in sequences (default 32)")
    parser.add_argument("--precision", default="32-true", choices=list(AUTOCAST_DTYPES),
                        help="fp32, or bf16 autocast with fp32 weights (default 32-true)")
    parser.add_argument("--vocab-size", type=int, default=8192, help=VOCAB_HELP + " (default 8192)")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per measurement, median kept (default 5)")
    parser.add_argument("--new-tokens", type=int, default=256, help="tokens generated in the generation row "
                                                                   "(default 256)")
    parser.add_argument("--accelerator", default="cpu", choices=["cpu", "cuda"],
                        help="where the models run; corruption and the collator stay on the host (default cpu)")
    parser.add_argument("--comparison-steps", type=int, default=0,
                        help="also time STEPS training steps of mlm at the default comparison's shape (mini, T = 64, "
                             "batch 32, on the CPU): one run, one run on one thread, two runs at once, "
                             "each the median of 3 rounds; 60 takes about a minute (default 0: left out)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of rows instead of the table")
    args = parser.parse_args(argv)
    for name in ("seq_len", "batch_size", "repeats", "new_tokens", "comparison_steps"):
        if getattr(args, name) < {"seq_len": 2, "comparison_steps": 0}.get(name, 1):
            raise ConfigError(f"--{name.replace('_', '-')} is too small: {getattr(args, name)}")
    # what the measuring prints goes to stderr, so that --json's stdout is the rows alone (torch 2.4's module tracker,
    # which FlopCounterMode runs, prints a warning of its own to stdout)
    with contextlib.redirect_stdout(sys.stderr):
        rows, note = measure(args.model, args.seq_len, args.batch_size, args.precision, args.vocab_size, args.repeats,
                             args.new_tokens, args.accelerator, args.comparison_steps)
    if args.json:
        print(dumps(rows, indent=2))
        return
    where = (torch.cuda.get_device_name() if args.accelerator == "cuda" else f"{torch.get_num_threads()} CPU threads")
    print(f"One training step at {args.model}, T = {args.seq_len}, batch {args.batch_size}, vocabulary "
          f"{args.vocab_size}, {args.precision}, {where}; matrix-multiply peak {rows[0]['matmul_peak_flops'] / 1e9:,.0f} "
          f"GFLOP/s ({rows[0]['peak_source']}).\n")
    print(format_table(rows))
    if note:
        print(f"\n{note}")


if __name__ == "__main__":
    run(main)
