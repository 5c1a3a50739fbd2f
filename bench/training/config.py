"""What a run is told (TrainConfig) and what follows from it alone: the optimizer, the learning rate as a function
of the FLOPs spent, the evaluation grid, matmul precision.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from backbone import ConfigError
from backbone.flops import CONVENTIONS
from bench.training.schedule import SeqLenSchedule

EVAL_SEED = 1234  # held-out corruption is the same for every run: differences are the models', not the masks'


@dataclass(frozen=True)
class TrainConfig:
    budget_flops: float
    model: str = "small"
    batch_size: int = 32  # global, the same for every objective
    lr: float = 1e-3
    warmup: float = 0.05  # share of the budget spent warming up
    # share of a finished run's budget spent cooling down, linearly to zero: the last of the full run's, and of each
    # FLOP checkpoint's branch (learning_rate), so that every point on a curve is a run that finished its schedule
    cooldown: float = 0.2
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_points: int = 4  # log-spaced FLOP checkpoints, the last at the budget
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
    log_every: int = 10  # steps between rows of the live metrics (bench.training.live); 0: none
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


def check_config(config: TrainConfig, world_size: int) -> None:
    """The mistakes a TrainConfig can hold that no flag parser sees, as one-line ConfigErrors."""
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


def make_optimizer(module: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW; on CUDA its fused kernel (one launch for all parameters, and no host reads of the step counts). On
    CPU the foreach implementation, whose numbers are the default one's to the last bit (every CPU result so far was
    made with that one; CPU's fused kernel rounds differently)."""
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


def eval_grid(config: TrainConfig) -> list[float]:
    """FLOP checkpoints, log-spaced from first_eval · budget to the budget."""
    if config.eval_points == 1:
        return [config.budget_flops]
    ratio = config.first_eval ** (1 / (config.eval_points - 1))
    grid = [float(f"{config.budget_flops * ratio ** (config.eval_points - 1 - i):.6g}") for i in range(config.eval_points)]
    return grid[:-1] + [config.budget_flops]


def learning_rate(flops: float, budget: float, config: TrainConfig) -> float:
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


def cooldown_start(checkpoint: float, config: TrainConfig) -> float:
    """The FLOPs from which a run ending at `checkpoint` takes a lower rate than one ending later."""
    return (1 - config.cooldown) * checkpoint


def run_name(spec: str, seed: int) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", spec).strip("-") + f"-seed{seed}"


def optimizer_groups(module: torch.nn.Module, weight_decay: float) -> list[dict]:
    # Decay matrices only: decaying norms' gains and biases pulls them towards zero for no benefit.
    params = [p for p in module.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
