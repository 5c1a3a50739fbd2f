"""Fair learning rates: one peak rate for every objective favours whichever it suits, so each objective can have
its own, given (`--lr 3e-3,electra=6e-3`) or chosen by a sweep (`--lr-sweep 3e-4,1e-3,3e-3`).

A sweep trains every objective with seed 0 at each rate on a fraction of the budget (with the schedule compressed
to that budget), and keeps per objective the rate with the lowest own held-out loss at its end. Its runs live in
their own folder and their FLOPs are reported apart: the comparison's budget and accounting are untouched.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from lightning_fabric import Fabric

from backbone import ConfigError
from bench.data.corpus import Corpus
from bench.training.config import TrainConfig, run_name
from bench.training.runs import trained_or_reused


def parse_rate(text: str, flag: str) -> float:
    try:
        rate = float(text)
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not a number") from None
    if not rate > 0 or math.isinf(rate):
        raise ConfigError(f"{flag} rates must be positive and finite, got {text}")
    return rate


def sweep_rates(text: str) -> list[float]:
    """"3e-4,1e-3,3e-3" -> the rates --lr-sweep tries."""
    return [parse_rate(rate, "--lr-sweep") for rate in text.split(",")]


def learning_rates(text: str, specs: list[str], strict: bool = True) -> dict[str, float]:
    """"3e-3,electra=6e-3" -> {spec: peak rate} for every spec: SPEC=LR matches the spec as written, else its name;
    the plain number is everyone else's. `strict`: a name that matches no spec is a mistake (a typo), as it is when
    the user wrote it; the built-in default may name objectives that are not being compared."""
    default, named = None, {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        key, _, value = part.rpartition("=")
        rate = parse_rate(value, "--lr")
        if not key:
            if default is not None:
                raise ConfigError(f"--lr {text!r} gives more than one rate for all objectives")
            default = rate
        elif key in named:
            raise ConfigError(f"--lr names {key!r} twice")
        else:
            named[key] = rate
    unknown = [key for key in named if key not in specs and key not in {s.split(":")[0] for s in specs}]
    if unknown and strict:
        raise ConfigError(f"--lr names {', '.join(unknown)}, which is not among --objectives ({', '.join(specs)})")
    missing = [s for s in specs if s not in named and s.split(":")[0] not in named]
    if default is None and missing:
        raise ConfigError(f"--lr {text!r} gives no rate for {', '.join(missing)}: add a plain number for the rest")
    return {s: named.get(s, named.get(s.split(":")[0], default)) for s in specs}


def sweep(fabric: Fabric, specs: list[str], rates: list[float], corpus: Corpus, config: TrainConfig, fraction: float,
          out: Path, progress: bool) -> dict:
    """{spec: {"losses": {rate: final held-out loss or None if diverged}, "chosen": rate, "flops": spent}}."""
    budget = config.budget_flops * fraction
    result = {}
    for spec in specs:
        losses, flops = {}, 0
        for rate in rates:
            run_dir = out / "sweep" / f"{run_name(spec, 0)}-lr{rate:g}"
            run_config = replace(config, budget_flops=budget, lr=rate, probe_every_eval=False)
            run, record = trained_or_reused(fabric, spec, 0, corpus, run_config, run_dir, True, progress=progress)
            if record is not None:  # diverged at this rate
                losses[f"{rate:g}"] = None
                flops += record["flops"]
                continue
            # rank 0's read of the curve decides: another node's view of a shared folder can lag (NFS caches)
            losses[f"{rate:g}"] = run["curve"][-1]["metrics"]["loss"] if fabric.is_global_zero else None
            flops += run["flops"]
        losses = fabric.broadcast(losses, src=0)  # so every rank chooses the same rate
        finite = {rate: loss for rate, loss in losses.items() if loss is not None and math.isfinite(loss)}
        if not finite:
            raise ConfigError(f"--lr-sweep: {spec} diverged at every rate ({', '.join(losses)}); try lower rates")
        result[spec] = {"losses": losses, "chosen": float(min(finite, key=finite.get)), "flops": flops,
                        "budget": budget}
    return result
