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
from bench.tuned import TUNED
from objectives import parse_objective_list
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


MAX_EXTENSIONS = 3  # rates added beyond an edge of the grid before a sweep gives up and says so


def sweep(fabric: Fabric, specs: list[str], rates: list[float], corpus: Corpus, config: TrainConfig, fraction: float,
          out: Path, progress: bool) -> dict:
    """{spec: {"losses": {rate: final held-out loss or None if diverged}, "chosen": rate, "flops": spent, "budget",
    "extended": rates added beyond the grid, "at_edge": whether the choice still lies at an edge of the rates
    tried}}. A choice at an edge of the grid says only that the best rate may lie beyond it, so the grid is extended
    there, one step of its own ratio at a time, until the choice lies inside it (or MAX_EXTENSIONS)."""
    budget, result = config.budget_flops * fraction, {}
    for spec in specs:
        losses, flops, extended = {}, 0, []
        tried = sorted(rates)
        for rate in tried:
            flops += sweep_run(fabric, spec, rate, corpus, replace(config, budget_flops=budget), out, progress, losses)
        while True:
            chosen = choose(fabric, spec, losses)
            beyond = next_rate(tried, chosen)
            if beyond is None or len(extended) == MAX_EXTENSIONS:
                break
            flops += sweep_run(fabric, spec, beyond, corpus, replace(config, budget_flops=budget), out, progress,
                               losses)
            tried, extended = sorted([*tried, beyond]), [*extended, beyond]
        result[spec] = {"losses": {f"{rate:g}": losses[f"{rate:g}"] for rate in tried}, "chosen": chosen,
                        "flops": flops, "budget": budget, "extended": extended,
                        "at_edge": len(tried) > 1 and chosen in (tried[0], tried[-1])}
    return result


def sweep_run(fabric: Fabric, spec: str, rate: float, corpus: Corpus, config: TrainConfig, out: Path,
              progress: bool, losses: dict) -> int:
    """Train `spec` (seed 0) at `rate` for the sweep's budget, record its final held-out loss (None: diverged) in
    `losses`, and return the FLOPs it spent."""
    run_dir = out / "sweep" / f"{run_name(spec, 0)}-lr{rate:g}"
    run, record = trained_or_reused(fabric, spec, 0, corpus, replace(config, lr=rate, probe_every_eval=False), run_dir,
                                    True, progress=progress)
    if record is not None:  # diverged at this rate
        losses[f"{rate:g}"] = None
        return record["flops"]
    # rank 0's read of the curve decides: another node's view of a shared folder can lag (NFS caches)
    losses[f"{rate:g}"] = run.curve[-1].metrics["loss"] if fabric.is_global_zero else None
    return run.flops


def choose(fabric: Fabric, spec: str, losses: dict) -> float:
    """The rate with the lowest loss, the same on every rank."""
    losses.update(fabric.broadcast(dict(losses), src=0))
    finite = {rate: loss for rate, loss in losses.items() if loss is not None and math.isfinite(loss)}
    if not finite:
        raise ConfigError(f"--lr-sweep: {spec} diverged at every rate ({', '.join(losses)}); try lower rates")
    return float(min(finite, key=finite.get))


def next_rate(tried: list[float], chosen: float) -> float | None:
    """One step beyond the edge of the grid the choice lies at, by the grid's own ratio there; None inside it."""
    if len(tried) < 2 or chosen not in (tried[0], tried[-1]):
        return None
    if chosen == tried[-1]:
        return float(f"{chosen * tried[-1] / tried[-2]:.3g}")
    return float(f"{chosen * tried[0] / tried[1]:.3g}")


def provenance(lr: str, default_lr: str, lr_sweep: str | None, setting: dict, specs: list[str]) -> dict:
    """Where a comparison's peak rates come from: its own sweep, the user's --lr, or borrowed from the sweep that
    chose the built-in default (DEFAULT_SWEEP), with how this comparison's setting differs from that one's and the
    objectives that sweep never tried."""
    if lr_sweep is not None:
        return {"kind": "swept", "grid": sweep_rates(lr_sweep)}
    if lr != default_lr:
        return {"kind": "given"}
    differs = [f"{key} {setting[key]} (swept at {value})" for key, value in DEFAULT_SWEEP["setting"].items()
               if str(setting.get(key)) != str(value)]
    never = [spec for spec in specs if spec not in DEFAULT_SWEEP["objectives"]]
    return {"kind": "borrowed", "from": DEFAULT_SWEEP, "differs": differs, "never_swept": never}


# The tuning that chose the built-in default rates (bench.config.TrainingConfig.lr, from bench/tuned.json): redo it
# (`python -m bench.tune --write-defaults`) when the default setting changes.
DEFAULT_SWEEP = {"command": TUNED["made_by"],
                 "setting": {key: TUNED["setting"][key] for key in ("budget", "seq_len", "model", "batch_size", "data")},
                 "objectives": parse_objective_list(TUNED["objectives"])}
