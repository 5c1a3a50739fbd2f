"""What a run is told (RunConfig) and what follows from it alone: the optimizer, the learning rate as a function
of the FLOPs spent, the evaluation grid, matmul precision, and the sequence-length schedule (--seq-len) with its
accounting.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from backbone import ConfigError
from backbone.flops import CONVENTIONS


EVAL_SEED = 1234  # held-out corruption is the same for every run: differences are the models', not the masks'


@dataclass(frozen=True)
class RunConfig:
    """What a run computes, as the plan (bench.orchestration.planning.run_config) builds it from the command's
    configuration; the defaults below are the command's too (bench.orchestration.config reads them), and the training
    recipe's own."""

    budget_flops: float
    model: str  # a size of backbone.MODEL_SIZES, with options
    batch_size: int = 32  # global, the same for every objective
    lr: float | None = None  # the spec's peak rate, which the plan gives each spec (Plan.learning_rates); None: unset
    warmup: float = 0.05  # share of the budget spent warming up
    # share of a finished run's budget spent cooling down, linearly to zero: the last of the full run's, and of each
    # FLOP checkpoint's branch (learning_rate), so that every point on a curve is a run that finished its schedule
    cooldown: float = 0.2
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_points: int = 3  # log-spaced FLOP checkpoints, the last at the budget
    first_eval: float = 0.05  # share of the budget at the first checkpoint
    eval_windows: int = 128
    probe_every_eval: bool = False  # also fit the frozen probes at every FLOP checkpoint
    compile: bool = False  # torch.compile every transformer block (the backbone's, ELECTRA's generator's)
    micro_batch: int | None = None  # windows per forward/backward on each process; None: its whole share at once
    # Recompute each block's activations in the backward pass instead of keeping them. The FLOPs counted stay the
    # model's (one forward, one backward): the recomputation is a memory-for-time trade of the hardware setup, like
    # micro-batching, and charging it would let the setup decide how many steps an objective gets for its budget.
    activation_checkpointing: bool = False
    checkpoint_every: float | None = None  # minutes: also save the state between evaluations once this much has passed
    tf32: bool = False  # fp32 matmuls in TensorFloat-32 (CUDA under 32-true; see tf32_matmuls)
    log_every: int = 10  # steps between rows of the live metrics (bench.training.loop); 0: none
    # Window length per share of the budget (--seq-len 128:0.9,512:0.1); its longest must be the corpus's window
    # length. None: the corpus's window length throughout.
    seq_len_schedule: SeqLenSchedule | None = None
    # How attention FLOPs are charged against the budget (backbone.flops): "dense", the full T × T (what
    # FlopCounterMode measures), or "executed", only the blocks a tiled kernel computes under a causal or prefix mask.
    flops: str = "dense"


def check_batch_split(batch_size: int, world_size: int, micro_batch: int | None = None) -> None:
    if batch_size % world_size:
        raise ConfigError(f"--batch-size {batch_size} does not split evenly over {world_size} processes")
    per_process = batch_size // world_size
    if micro_batch is not None and (micro_batch < 1 or per_process % micro_batch):
        raise ConfigError(f"--micro-batch {micro_batch} does not divide the {per_process} windows each process gets "
                          f"(--batch-size {batch_size} over {world_size} processes)")


def check_config(config: RunConfig, world_size: int) -> None:
    """The mistakes a RunConfig can hold that no flag parser sees, as one-line ConfigErrors."""
    check_batch_split(config.batch_size, world_size, config.micro_batch)
    if config.log_every < 0:
        raise ConfigError(f"--log-every must be >= 0 steps, got {config.log_every}")
    if config.flops not in CONVENTIONS:
        raise ConfigError(f"--flops must be one of {', '.join(CONVENTIONS)}, got {config.flops!r}")
    if not 0 < config.cooldown <= 1:
        raise ConfigError(f"the cool-down must be a share of the budget in (0, 1], got {config.cooldown:g}")
    if not 0 <= config.warmup <= 1:
        raise ConfigError(f"the warm-up must be a share of the budget in [0, 1], got {config.warmup:g}")
    if config.checkpoint_every is not None and not 0 < config.checkpoint_every < math.inf:
        raise ConfigError(f"--checkpoint-every must be a positive number of minutes, got {config.checkpoint_every:g}")


def tf32_matmuls(device: torch.device, precision: str) -> bool:
    """Whether fp32 matmuls run in TensorFloat-32: on CUDA under 32-true, where its units are several times faster
    than fp32's, with fp32's range and sums and a 10-bit mantissa in the products. The mixed precisions already
    multiply in 16 bits, and 64-true asks for float64."""
    return device.type == "cuda" and precision == "32-true"


def configure_matmuls(device: torch.device, tf32: bool) -> None:
    if device.type == "cuda":  # a process-wide switch; CPU matmuls are left as torch sets them
        torch.set_float32_matmul_precision("high" if tf32 else "highest")


def make_optimizer(module: torch.nn.Module, config: RunConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; on CUDA its fused kernel (one launch for all parameters, and no host reads of the step counts). On
    CPU the foreach implementation, whose numbers are the default one's to the last bit (every CPU result so far was
    made with that one; CPU's fused kernel rounds differently)."""
    if config.lr is None:  # a silent default rate would train every spec at a rate nobody chose
        raise ValueError("a run's RunConfig needs its spec's learning rate (lr)")
    return torch.optim.AdamW(optimizer_groups(module, config.weight_decay), lr=config.lr, betas=(0.9, 0.98), eps=1e-6,
                             fused=fused_on(device), foreach=foreach_on(device))


def fused_on(device: torch.device) -> bool | None:
    return True if device.type == "cuda" else None


def foreach_on(device: torch.device) -> bool | None:
    # the default's per-parameter loop wraps each scalar in a tensor: 1.3 ms a default step against 0.8 ms
    return None if fused_on(device) else True


def match_optimizer_to_device(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """After loading a checkpoint: load_state_dict restores the saving machine's `fused` flag with the moments, so a
    CPU checkpoint resumed on a GPU would run unfused and a GPU one on a CPU fused. Set it for this device, with the
    step counts where that implementation keeps them (on the device when fused, on the host otherwise)."""
    fused = fused_on(device)
    for group in optimizer.param_groups:
        group["fused"], group["foreach"] = fused, foreach_on(device)
        for parameter in group["params"]:
            state = optimizer.state.get(parameter, {})
            if "step" in state:
                state["step"] = state["step"].to(parameter.device if fused else "cpu", torch.float32)


def eval_grid(config: RunConfig) -> list[float]:
    """FLOP checkpoints, log-spaced from first_eval · budget to the budget."""
    if config.eval_points == 1:
        return [config.budget_flops]
    ratio = config.first_eval ** (1 / (config.eval_points - 1))
    grid = [float(f"{config.budget_flops * ratio ** (config.eval_points - 1 - i):.6g}") for i in range(config.eval_points)]
    return grid[:-1] + [config.budget_flops]


def learning_rate(flops: float, budget: float, config: RunConfig) -> float:
    """Warmup-stable-decay (Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training
    Durations"; MiniCPM) after `flops` FLOPs of a run that ends at `budget`: a linear warm-up over the first `warmup`
    share of the full budget (in FLOPs, the same for every budget), the peak rate, then a linear cool-down to zero
    over the last `cooldown` share of `budget`. `budget` is the full one, or a FLOP checkpoint's: until that
    checkpoint's cool-down starts the two rates are equal, so a branch that cools down from there is exactly the run
    trained to the checkpoint's budget."""
    warm_up = config.warmup * config.budget_flops
    warm = max(flops / warm_up, 0.02) if warm_up else 1.0  # the first step at 2 % of the peak, not at zero
    cool = (budget - flops) / (config.cooldown * budget)
    return config.lr * max(0.0, min(1.0, warm, cool))


def cooldown_start(checkpoint: float, config: RunConfig) -> float:
    """The FLOPs from which a run ending at `checkpoint` takes a lower rate than one ending later."""
    return (1 - config.cooldown) * checkpoint


def run_name(spec: str, seed: int) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", spec).strip("-") + f"-seed{seed}"


def optimizer_groups(module: torch.nn.Module, weight_decay: float) -> list[dict]:
    # Decay matrices only: decaying norms' gains and biases pulls them towards zero for no benefit.
    params = [p for p in module.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


# --- Sequence-length schedules: `--seq-len 128:0.9,512:0.1` trains at T = 128 for the first 90 % of the FLOP budget,
# then at T = 512 (BERT's schedule, stated in FLOPs instead of steps, so that it means the same for every objective).
#
# A schedule is a list of phases LENGTH:SHARE, SHARE the fraction of the FLOP budget spent in the phase; a plain
# length is one phase with the whole budget. Which phase a step runs in is a pure function of the FLOPs counted before
# it (phase k runs while flops < budget · (share_0 + ... + share_k)), so it depends only on checkpointed counters and a
# resumed run switches at the same step as an uninterrupted one. The corpus is built at the longest length; shorter
# phases read its windows cut into pieces (bench.data.corpus.CutWindows).
#
# predict_phases is the accounting: what a schedule gives per phase (steps, token positions, supervised positions,
# FLOPs) for a budget, a batch size and an objective's cost per sequence, without training.


SHARE_TOLERANCE = 1e-6  # shares written with a few decimals (0.333,0.333,0.334) still sum to 1


@dataclass(frozen=True)
class Phase:
    seq_len: int  # window length T of this phase
    share: float  # fraction of the FLOP budget spent in it
    piece: int = 0  # the piece of an objective schedule that trains in it (objectives.schedule); 0 for the others


@dataclass(frozen=True)
class SeqLenSchedule:
    phases: tuple[Phase, ...]

    def __post_init__(self) -> None:
        if not self.phases:
            raise ConfigError("--seq-len needs at least one LENGTH:SHARE phase")
        for phase in self.phases:
            if isinstance(phase.seq_len, bool) or not isinstance(phase.seq_len, int) or phase.seq_len < 2:
                raise ConfigError(f"--seq-len {self.text}: length {phase.seq_len} must be a whole number >= 2")
            if not phase.share > 0 or math.isinf(phase.share):  # `not >` also refuses NaN
                raise ConfigError(f"--seq-len {self.text}: share {phase.share:g} of length {phase.seq_len} must be a "
                                  "positive fraction of the budget")
        total = math.fsum(phase.share for phase in self.phases)
        if abs(total - 1) > SHARE_TOLERANCE:
            raise ConfigError(f"--seq-len {self.text}: the shares sum to {total:g}, not 1")

    @classmethod
    def fixed(cls, seq_len: int) -> "SeqLenSchedule":
        """One phase at `seq_len` for the whole budget: what a plain --seq-len means."""
        return cls((Phase(seq_len, 1.0),))

    @property
    def is_fixed(self) -> bool:
        return len(self.phases) == 1

    @property
    def lengths(self) -> list[int]:
        return [phase.seq_len for phase in self.phases]

    @property
    def longest(self) -> int:
        """The corpus's window length and the model's max_seq_len: every phase's windows are cut from it."""
        return max(self.lengths)

    @property
    def final(self) -> int:
        """The length the model is judged at: held-out evaluation runs on windows of the last phase's length."""
        return self.phases[-1].seq_len

    @property
    def text(self) -> str:
        """The schedule as --seq-len takes it; a single phase is its plain length."""
        if self.is_fixed:
            return str(self.final)
        return ",".join(f"{phase.seq_len}:{phase.share!r}" for phase in self.phases)

    def recorded(self) -> int | str:
        """What config.json records: a plain int for one phase, exactly as before schedules existed, so old folders
        still --resume and `--config` reruns still work; the text otherwise."""
        return self.final if self.is_fixed else self.text

    def ends(self, budget: float) -> list[float]:
        """The FLOPs at which each phase ends. The last ends at the budget itself, whatever rounding the shares'
        sum carries, so the last phase runs until training stops."""
        cumulative = [budget * math.fsum(phase.share for phase in self.phases[:k + 1])
                      for k in range(len(self.phases) - 1)]
        return cumulative + [budget]

    def split_at(self, starts: tuple[float, ...]) -> "SeqLenSchedule":
        """The phases cut where an objective schedule's pieces start (`starts`, shares of the budget, the first 0):
        each phase then runs one length and one piece. Without a schedule (one start) the phases are these."""
        if len(starts) == 1:
            return self
        ends, total = [], 0.0
        for phase in self.phases[:-1]:
            total += phase.share
            ends.append(total)
        # a start meant at a phase's end may differ from the float sum of the shares before it (0.1 + 0.2 is not
        # 0.3): it is that end, or the cut between them would be a phase of no length that no step can run
        starts = starts[:1] + tuple(next((end for end in ends if abs(end - start) <= SHARE_TOLERANCE), start)
                                    for start in starts[1:])
        if len(set(starts)) < len(starts):
            raise ConfigError(f"two of the objective schedule's switches ({', '.join(f'{s:g}' for s in starts[1:])}) "
                              "fall on one phase end of --seq-len: a piece between them would get no step")
        cuts = sorted(set(ends) | set(starts[1:]) | {1.0})
        phases, begin = [], 0.0
        for cut in cuts:
            length = next(phase.seq_len for phase, end in zip(self.phases, ends + [1.0]) if begin < end)
            piece = max(k for k, start in enumerate(starts) if start <= begin)
            phases.append(Phase(length, cut - begin, piece))
            begin = cut
        return SeqLenSchedule(tuple(phases))

    def merged(self, split: list[dict], counts: tuple[str, ...]) -> list[dict]:
        """Counts of the phases of split_at (dicts, in order, each with its "share") summed back into this
        schedule's phases: an objective schedule's runs seen per length."""
        ends, total = [], 0.0
        for phase in self.phases:
            total += phase.share
            ends.append(total)
        merged = [{"seq_len": phase.seq_len, "share": phase.share, **dict.fromkeys(counts, 0)}
                  for phase in self.phases]
        index, spent = 0, 0.0
        for part in split:
            for key in counts:
                merged[index][key] += part[key]
            spent += part["share"]
            if spent >= ends[index] - SHARE_TOLERANCE and index + 1 < len(merged):
                index += 1
        return merged

    def phase_at(self, flops: float, budget: float) -> int:
        """The phase a step starts in after `flops` counted FLOPs: the first whose end is still ahead."""
        return next((k for k, end in enumerate(self.ends(budget)) if flops < end), len(self.phases) - 1)

    def describe(self) -> str:
        """One line for the report's setup."""
        if self.is_fixed:
            return str(self.final)
        phases = ", then ".join(f"T = {phase.seq_len} for {phase.share:.3g}" for phase in self.phases)
        return (f"{self.text}: {phases} of each run's FLOPs; the shorter phases read the windows of {self.longest} "
                f"cut to their length; held-out evaluation at T = {self.final}")


PHASE = re.compile(r"^\s*([^:\s]+)\s*:\s*([^:\s]+)\s*$")


def parse_seq_len(value: int | str | SeqLenSchedule) -> SeqLenSchedule:
    """--seq-len as given: a plain length (an int, or its text, as config.json records it) or LENGTH:SHARE phases
    separated by commas. Every mistake is one ConfigError line that names it."""
    if isinstance(value, SeqLenSchedule):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 2:
            raise ConfigError(f"--seq-len must be >= 2, got {value}")
        return SeqLenSchedule.fixed(value)
    text = str(value).strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return parse_seq_len(int(text))
    phases = []
    for part in text.split(","):
        match = PHASE.match(part)
        if match is None:
            raise ConfigError(f"--seq-len {text!r}: {part.strip()!r} is not LENGTH:SHARE (write a plain length, "
                              "or phases such as 128:0.9,512:0.1)")
        length, share = match.groups()
        if not re.fullmatch(r"[+-]?\d+", length):
            raise ConfigError(f"--seq-len {text!r}: length {length!r} is not a whole number")
        try:
            share_value = float(share)
        except ValueError:
            raise ConfigError(f"--seq-len {text!r}: share {share!r} is not a number") from None
        phases.append(Phase(int(length), share_value))
    return SeqLenSchedule(tuple(phases))


def single_seq_len(text: str) -> int:
    """argparse type for the commands whose --seq-len is one length (bench.positions, bench.perf): a schedule is
    refused with one line that says where schedules belong."""
    if ":" in text or "," in text:
        raise argparse.ArgumentTypeError(f"{text!r} is a schedule; this command takes one length (schedules are "
                                         "for bench.compare)")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


@dataclass(frozen=True)
class PhaseCount:
    """What one phase gives: steps, token positions that flow through the model, supervised (loss-bearing)
    positions and training FLOPs."""

    seq_len: int
    steps: int
    tokens: int
    supervised_positions: float | None  # None when no supervised_per_sequence was given
    flops: float


PerSequence = Callable[[int], float]


def predict_phases(schedule: SeqLenSchedule, budget: float, batch_size: int,
                   flops_per_sequence: PerSequence | Sequence[PerSequence],
                   supervised_per_sequence: PerSequence | Sequence[PerSequence] | None = None) -> list[PhaseCount]:
    """The accounting of a schedule without training, by the training loop's own rule: a step starts in the phase
    whose end is still ahead of the FLOPs spent, costs batch_size · flops_per_sequence(T) (an objective's
    expected_flops_per_sequence; under an objective schedule, one per piece, indexed by the phase's piece), and
    training stops at the first step that reaches the budget. A phase therefore overshoots its end by less than one
    of its steps, and the next starts that much later. Exact for objectives whose cost per step is fixed (BERT's
    masking rule, AR, ELECTRA, span); an expectation for Bernoulli masking."""
    def of_piece(per_sequence, piece: int):
        return per_sequence[piece] if isinstance(per_sequence, (list, tuple)) else per_sequence

    spent, counts = 0.0, []
    for phase, end in zip(schedule.phases, schedule.ends(budget)):
        step_flops = batch_size * of_piece(flops_per_sequence, phase.piece)(phase.seq_len)
        steps = max(0, math.ceil((end - spent) / step_flops))
        # the loop's own test, `spent < end` before each step, fixes what rounding in the division may have moved
        while steps > 0 and spent + (steps - 1) * step_flops >= end:
            steps -= 1
        while spent + steps * step_flops < end:
            steps += 1
        supervised = None if supervised_per_sequence is None else \
            steps * batch_size * of_piece(supervised_per_sequence, phase.piece)(phase.seq_len)
        counts.append(PhaseCount(phase.seq_len, steps, steps * batch_size * phase.seq_len, supervised,
                                 steps * step_flops))
        spent += steps * step_flops
    return counts
