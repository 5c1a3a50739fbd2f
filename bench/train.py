"""Train one objective until its accounted FLOPs reach the budget. Fabric is built and driven here: the commands
(bench.compare, bench.sweep) only pass its object along, and bench.live borrows Lightning's loggers.

Everything that makes runs comparable lives here:
- every objective and seed reads the same windows in the same order (step s reads windows s·B .. s·B + B − 1);
- a sequence-length schedule (bench.schedule) switches the window length when the FLOPs spent cross a phase's end:
  step s (the run's step, which also seeds its masks) then reads windows s·B .. s·B + B − 1 of that phase's
  windowing (the corpus's windows cut to its length), and each phase's steps, tokens, supervised positions and FLOPs
  are counted apart; held-out evaluation is at the last phase's length;
- the learning-rate schedule is a function of the fraction of the FLOP budget spent, so warm-up and decay end
  exactly at the budget for every objective, whatever its cost per step;
- evaluations happen at one log-spaced grid of FLOP checkpoints, on held-out windows corrupted identically for every
  run of an objective, so curves line up across seeds and objectives;
- each evaluation is appended to the run folder as it finishes, and the state (model, optimizer, counters; the data
  position is the step) is checkpointed with it, so an interrupted run resumes exactly. There is no RNG state to
  carry: each row of a step's batch is corrupted from its own generator, seeded from (seed, step, row) (bench.seeds,
  objectives.draws), so a process corrupts only its own rows and they are the rows of the whole batch, on any number
  of devices; and the global RNG (ELECTRA's sampling, dropout) is reseeded from (seed, step, rank) before every
  step, so each process draws its own noise and a resumed run draws the same noise as an uninterrupted one;
- how a step is executed does not change what it computes: micro-batches (--micro-batch) accumulate to the gradient of
  the whole batch, activation checkpointing recomputes the same values, and the FLOPs counted are the model's.

Long runs: the state is also saved every `checkpoint_every` minutes, and SIGTERM or SIGUSR1 (a scheduler's warning
before it ends a job) saves it at the end of the current step and exits with EXIT_STOPPED; rerunning resumes exactly.
A training step reads one number from the device, the global loss (with the stop and save requests of every process
beside it): that single synchronisation lets every process stop at the same step on a NaN or a signal. The next
step's rows are corrupted in a background thread while this one runs (`Prefetcher`), into pinned memory on CUDA, and
copied without blocking; the counts that step needs from the other processes' rows (supervised positions, FLOPs)
ride in this step's all-reduce, so a step makes one collective, on the training backend alone (no second, host-side
group whose address resolution can fail on a cluster where NCCL works).
"""

from __future__ import annotations

import inspect
import math
import os
import re
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Protocol

import torch
from lightning_fabric import Fabric
from lightning_fabric.strategies import DDPStrategy
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from backbone import Backbone, ConfigError, Transformer, resolve_model
from backbone.fused_loss import chunk_rows
from bench.data import Corpus
from bench.files import append_jsonl, read_json, read_jsonl, write_json
from bench.live import LiveMetrics
from bench.probes import ProbeConfig, run_probes
from bench.schedule import SeqLenSchedule
from bench.seeds import derive_seed
from objectives import Corrupted, Objective, Output, build_objective
from objectives.draws import RowGenerators


class Tasks(Protocol):
    """A comparison's downstream tasks (bench.downstream.Downstream), called by name: the loop imports none of their
    insides."""

    def curve_point(self, objective: Objective) -> dict[str, float]:
        """Frozen scores at a FLOP checkpoint."""

    def evaluate(self, objective: Objective, progress: bool = False, desc: str = "downstream") -> dict:
        """A final backbone's frozen and fine-tuned scores."""


EVAL_SEED = 1234  # held-out corruption is the same for every run: differences are the models', not the masks'
EXIT_STOPPED = 4  # exit status after a stop signal: the state is saved, rerun with --resume to continue
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))


@dataclass(frozen=True)
class TrainConfig:
    budget_flops: float
    model: str = "small"
    batch_size: int = 32  # global, the same for every objective
    lr: float = 1e-3
    warmup: float = 0.05  # share of the budget spent warming up
    min_lr_ratio: float = 0.1  # cosine decay ends at this share of the peak
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_points: int = 6  # log-spaced FLOP checkpoints, the last at the budget
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
    log_every: int = 10  # steps between rows of the live metrics (bench.live); 0: none
    # Window length per share of the budget (--seq-len 128:0.9,512:0.1); its longest must be the corpus's window
    # length. None: the corpus's window length throughout.
    seq_len_schedule: SeqLenSchedule | None = None


def make_fabric(accelerator: str = "cpu", devices: int | str = 1, num_nodes: int = 1, strategy: str = "auto",
                precision: str = "32-true", launch: bool = True) -> Fabric:
    """Fabric for these flags; with launch=False the processes are not started yet, so checks that can fail run
    once, in one process, and print one line."""
    problem = slurm_without_srun(os.environ, devices, num_nodes)
    if problem:
        raise ConfigError(problem)
    try:
        fabric = Fabric(accelerator=accelerator, devices=devices, num_nodes=num_nodes, strategy=ddp_settings(strategy),
                        precision=precision)
    except (ValueError, RuntimeError, TypeError) as error:  # Fabric reports bad flags this way
        raise ConfigError(f"Fabric: {str(error).splitlines()[0]}") from None
    if launch:
        launch_processes(fabric)
    return fabric


def slurm_without_srun(environ: Mapping[str, str], devices: int | str, num_nodes: int) -> str | None:
    """Why this command cannot run as started, inside a Slurm job without srun, or None. Fabric takes SLURM_NTASKS
    (set in an sbatch job's own shell) to mean Slurm started that many processes, and the one process that is there then
    waits for the others, for NCCL's or gloo's timeout (about 30 min). srun sets SLURM_STEP_NUM_TASKS for the tasks
    it starts; Fabric ignores Slurm in a job named bash or interactive (salloc's shell, `--job-name interactive`)."""
    if "SLURM_NTASKS" not in environ or "SLURM_STEP_NUM_TASKS" in environ or "TORCHELASTIC_RUN_ID" in environ:
        return None
    if environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None
    tasks = environ["SLURM_NTASKS"]
    if tasks == "1" and str(devices) == "1" and num_nodes == 1:
        return None  # one process, and Slurm's world of one agrees
    per_node = devices if str(devices).isdigit() else "DEVICES_PER_NODE"
    return (f"inside a Slurm job (SLURM_NTASKS={tasks}) the processes must be started by srun, one per device: "
            f"srun --ntasks-per-node {per_node} python -m bench.compare ... (run from the sbatch script; started "
            "without srun, this process would wait about 30 min for processes that never come)")


TORCHRUN_FORWARDS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"  # what torchrun's agent handles unless told otherwise


def unforwarded_stop_signals(environ: Mapping[str, str]) -> list[str]:
    """The stop signals a torchrun agent would not pass on to this worker: one it does not handle ends the agent,
    and the workers with it, mid-step. A torchrun with --signals-to-handle records it in the workers' environment;
    older ones handle the default four only."""
    if "TORCHELASTIC_RUN_ID" not in environ:
        return []
    forwarded = {name.strip() for name in environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", TORCHRUN_FORWARDS).split(",")}
    return [signal.Signals(number).name for number in STOP_SIGNALS if signal.Signals(number).name not in forwarded]


def ddp_settings(strategy: str) -> object:
    """"ddp" (and "ddp_spawn", which the tests launch from pytest) as a DDPStrategy with the suite's settings; any
    other strategy as named. Gradients are views of DDP's all-reduce buckets, so no step copies them into and out of
    the buckets; buffers are not re-broadcast before every forward, since the only ones are RoPE's tables, which each
    rank builds from the same config (and a resumed run reloads nothing else)."""
    if strategy not in ("ddp", "ddp_spawn"):
        return strategy
    return DDPStrategy(start_method="spawn" if strategy == "ddp_spawn" else "popen", gradient_as_bucket_view=True,
                       **no_forward_buffer_sync())


def no_forward_buffer_sync() -> dict[str, bool]:
    """DDP's switch for re-broadcasting buffers before every forward: torch 2.13 renamed broadcast_buffers (which
    now warns on every launch) to forward_sync_buffers, which still syncs them once at init, harmless here."""
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


def launch_processes(fabric: Fabric) -> None:
    if os.environ.get("LT_CLI_USED", "0") != "1":  # `fabric run` has launched the processes already
        fabric.launch()


def device_memory_bytes(device: torch.device) -> int:
    """Memory free for this process now: on CUDA what the driver reports free (this process's context, other
    processes' use and the allocator's reserve already taken), on a CPU the kernel's MemAvailable."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


ALLOCATOR_SLACK = 1.10  # the caching allocator's fragmentation on top of the live tensors, about 5-15 % in training


@dataclass(frozen=True)
class StepMemory:
    """What one training step holds at its peak, in bytes, as check_memory estimates it."""

    activations: int  # what the transformer stacks keep for the backward pass
    heads: int  # what the heads and the fused vocabulary loss keep (its gradient buffers)
    chunk: int  # the fused loss's chunk of logits, alive while the loss is computed
    state: int  # fp32 weights, gradients and AdamW's two moments, and autocast's half copies of the weights

    @property
    def saved(self) -> int:
        """What autograd holds for the backward pass (tests/test_train.py measures it)."""
        return self.activations + self.heads

    @property
    def total(self) -> int:
        # DDP adds no gradient copy: the gradients are views of its all-reduce buckets (ddp_settings)
        return int((self.saved + self.chunk) * ALLOCATOR_SLACK) + self.state


def step_memory(objective: Objective, windows: int, seq_len: int, precision: str, device: torch.device,
                checkpointing: bool = False) -> StepMemory:
    """The peak memory of a training step of `windows` windows per forward; the objective may be on the meta
    device. Bounds rather than guesses where an objective's shape is not known here: each stack's head is counted
    as a vocabulary loss (ELECTRA's discriminator has a smaller one) with every position supervised."""
    value_bytes = 8 if precision.startswith("64") else 2 if "16" in precision else 4
    mixed = precision.endswith("-mixed")
    stacks = [stack for stack in objective.modules() if isinstance(stack, Transformer)]
    activations = sum(stack.activation_bytes(windows, seq_len, value_bytes, mixed, checkpointing) for stack in stacks)
    vocab = stacks[0].config.vocab_size
    float_bytes = max(4, value_bytes)  # the loss's buffers are fp32 at least (backbone.fused_loss)
    # the head's input and output, the gradients of the hidden rows and of the projection the loss keeps, and one
    # chunk of fp32 logits with their gradient cast to the compute dtype
    heads = sum(float_bytes * (3 * windows * seq_len + vocab) * stack.config.d_model for stack in stacks)
    chunk = chunk_rows(device, vocab) * vocab * (float_bytes + value_bytes)
    parameters = sum(p.numel() for p in objective.parameters())
    state = (4 * value_bytes if not mixed else 16 + 2) * parameters
    return StepMemory(activations, heads, chunk, state)


def check_memory(objective: Objective, windows: int, seq_len: int, precision: str, device: torch.device,
                 checkpointing: bool = False) -> None:
    """Refuse, before anything runs, a step whose activations, weights and optimizer state cannot fit the device's
    free memory: an out-of-memory shape would otherwise swap or hang for minutes. `windows`: those in one forward
    (the micro-batch, or a process's whole share of the batch). The objective may be on the meta device."""
    needed = step_memory(objective, windows, seq_len, precision, device, checkpointing)
    available = device_memory_bytes(device)
    if needed.total > available:
        raise ConfigError(f"{objective.spec()}: one training step needs about {needed.total / 2 ** 30:,.1f} GiB "
                          f"({needed.activations / 2 ** 30:,.1f} GiB of activations at {windows} windows per forward, "
                          f"T = {seq_len}) but the {device.type} has {available / 2 ** 30:,.1f} GiB free; lower "
                          "--micro-batch, --seq-len or --model, or add --activation-checkpointing")


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
    CPU the default implementation, whose numbers every CPU result so far was made with."""
    return torch.optim.AdamW(optimizer_groups(module, config.weight_decay), lr=config.lr, betas=(0.9, 0.98), eps=1e-6,
                             fused=fused_on(device))


def fused_on(device: torch.device) -> bool | None:
    return True if device.type == "cuda" else None


def match_optimizer_to_device(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """After loading a checkpoint: load_state_dict restores the saving machine's `fused` flag with the moments, so a
    CPU checkpoint resumed on a GPU would run unfused and a GPU one on a CPU fused. Set it for this device, with the
    step counts where that implementation keeps them (on the device when fused, on the host otherwise)."""
    fused = fused_on(device)
    for group in optimizer.param_groups:
        group["fused"] = fused
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


def learning_rate(fraction: float, config: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio, over the fraction of the FLOP budget spent."""
    if fraction < config.warmup:
        return config.lr * max(fraction, 1e-3) / config.warmup
    progress = min(1.0, (fraction - config.warmup) / max(1e-12, 1 - config.warmup))
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def run_name(spec: str, seed: int) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", spec).strip("-") + f"-seed{seed}"


ROW_STREAM = 0  # last part of a row's seed (seed, step, row, ROW_STREAM): apart from the per-process (seed, step, rank)


def row_generators(seed: int, step: int, rows: slice) -> RowGenerators:
    # A pure function of (seed, step, row): a row's masks are the same whether or not the run was resumed, and
    # whichever process corrupts it.
    return RowGenerators([derive_seed(seed, step, row, ROW_STREAM) for row in range(rows.start, rows.stop)])


def training_batch(objective: Objective, windows: Tensor, seed: int, step: int, batch_size: int,
                   rows: slice | None = None) -> Corrupted:
    """Rows `rows` (by default all) of the global batch of `step`: windows step·B .. step·B + B − 1 (wrapping
    around `windows`), corrupted afresh every time (dynamic masking, RoBERTa), each row from its own generator, or,
    for objectives with static copies, with copy (epoch mod copies) of each window's fixed corruptions (BERT's static
    masking with dupe_factor)."""
    rows = slice(0, batch_size) if rows is None else rows
    position = torch.arange(batch_size) + step * batch_size
    index = position % len(windows)
    if not objective.static_copies:
        return objective.corrupt_rows(windows[index], rows, row_generators(seed, step, rows))
    copies = (position // len(windows)) % objective.static_copies
    return Corrupted.concat([
        objective.corrupt(windows[i:i + 1], torch.Generator().manual_seed(derive_seed(seed, i, copy)))
        for i, copy in zip(index[rows].tolist(), copies[rows].tolist())])


@dataclass(frozen=True)
class StepCounts:
    """What a step's rows hold: this process's (local_counts), or the global batch's, summed over the processes.
    Each count is a sum over rows (FLOPs are linear in the rows and the projected positions), so the processes'
    counts add up to the whole batch's."""

    flops: int
    supervised_positions: int
    loss_counts: dict[str, int]  # the positions each mean of the loss averages over (Objective.loss_counts)

    def values(self) -> list[int]:
        return [self.flops, self.supervised_positions, *self.loss_counts.values()]

    def with_values(self, values: list[int]) -> StepCounts:
        flops, supervised, *summed = values
        return StepCounts(flops, supervised, dict(zip(self.loss_counts, summed)))


def local_counts(objective: Objective, rows: Corrupted) -> StepCounts:
    return StepCounts(objective.flops(rows), objective.counted_positions(rows), objective.loss_counts(rows))


def step_counts(fabric: Fabric, local: StepCounts) -> StepCounts:
    """The global batch's counts from this process's: an exact (int64) all-reduce on the training device, for a
    step whose counts did not ride in the previous step's all-reduce (a run's first step, a resumed run's)."""
    if fabric.world_size == 1:
        return local
    summed = torch.tensor(local.values(), dtype=torch.long).to(fabric.device)
    torch.distributed.all_reduce(summed)
    return local.with_values(summed.tolist())


class Prefetcher:
    """Builds the next step's rows in a background thread while the device runs this step: corruption is host-side
    work of a few to tens of milliseconds per step. A build is a pure function of (step, phase), so a prefetched
    batch is the one the loop would have built itself; the loop builds it in place when none was asked for."""

    def __init__(self, build: Callable[[int, int], tuple[Corrupted, StepCounts]]) -> None:
        self.build = build
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches")
        self.pending: tuple[tuple[int, int], Future] | None = None

    def start(self, step: int, phase: int) -> None:
        self.pending = ((step, phase), self.executor.submit(self.build, step, phase))

    def ahead(self) -> StepCounts:
        """The local counts of the batch being built (waiting for it): they ride in this step's all-reduce."""
        return self.pending[1].result()[1]

    def take(self, step: int, phase: int) -> tuple[Corrupted, StepCounts]:
        pending, self.pending = self.pending, None
        if pending is not None and pending[0] == (step, phase):
            return pending[1].result()
        return self.build(step, phase)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def run_schedule(config: TrainConfig, corpus: Corpus) -> SeqLenSchedule:
    """The run's sequence-length schedule: the config's, whose longest length must be the corpus's windows (the
    shorter phases' windows are cut from them), or the corpus's window length throughout."""
    schedule = config.seq_len_schedule or SeqLenSchedule.fixed(corpus.seq_len)
    if schedule.longest > corpus.seq_len:
        raise ConfigError(f"--seq-len {schedule.text}: length {schedule.longest} exceeds the model's max_seq_len "
                          f"{corpus.seq_len} (the corpus's window length)")
    if schedule.longest < corpus.seq_len:
        raise ConfigError(f"--seq-len {schedule.text}: the corpus's windows hold {corpus.seq_len} tokens but the "
                          f"schedule's longest length is {schedule.longest}; build the corpus at {schedule.longest}")
    return schedule


def build_run_objective(spec: str, config: TrainConfig, corpus: Corpus) -> Objective:
    backbone = Backbone(resolve_model(config.model, corpus.vocab.size, max_seq_len=corpus.seq_len))
    objective = build_objective(spec, backbone, corpus.vocab)
    for seq_len in dict.fromkeys(run_schedule(config, corpus).lengths):
        objective.check_seq_len(seq_len)  # e.g. a phase too short for span corruption
    return objective


def optimizer_groups(module: torch.nn.Module, weight_decay: float) -> list[dict]:
    # Decay matrices only: decaying norms' gains and biases pulls them towards zero for no benefit.
    params = [p for p in module.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def eval_batches(objective: Objective, corpus: Corpus, config: TrainConfig) -> list[Corrupted]:
    """The held-out evaluation batches of an objective: the same windows and masks for every seed and world size.
    Under a sequence-length schedule, windows of its last phase's length, the one the model is judged at: a
    schedule that ends at the corpus's length is evaluated on exactly the batches of a run at that length
    throughout."""
    windows = corpus.windows("heldout", run_schedule(config, corpus).final)[:config.eval_windows]
    return [objective.corrupt(windows[start:start + config.batch_size], torch.Generator().manual_seed(EVAL_SEED + i))
            for i, start in enumerate(range(0, len(windows), config.batch_size))]


@torch.no_grad()
def evaluate(fabric: Fabric, module: torch.nn.Module, batches: list[Corrupted],
             objective: Objective) -> dict[str, float]:
    """The objective's own loss and metrics, averaged over supervised positions, and its pooled metrics; every rank
    computes the same. Unlike a training step, this reads every batch's numbers from the device."""
    was_training = module.training
    module.eval()
    totals: dict[str, float] = {}
    outputs = []
    weight = 0  # supervised positions; a batch without any carries no loss and is skipped
    devices = [fabric.device] if fabric.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # ELECTRA samples; leave the training RNG where it was
        torch.manual_seed(EVAL_SEED)
        for batch in batches:
            with fabric.autocast():
                output = module(batch.to(fabric.device))
            if output.supervised_positions == 0:
                continue
            outputs.append(output)
            for key, value in {"loss": output.loss, **output.metrics}.items():
                totals[key] = totals.get(key, 0.0) + float(value) * output.supervised_positions
            weight += output.supervised_positions
    module.train(was_training)
    if weight == 0:
        return {"loss": float("nan")}
    return {**{key: value / weight for key, value in totals.items()}, **objective.pooled_metrics(outputs)}


class RunStopped(SystemExit):
    """A stop signal arrived: the state was saved at the end of a step and the process should exit. A SystemExit,
    so the command exits with EXIT_STOPPED (rank 0; the other ranks with 0, as they do after a finished comparison)
    unless a caller catches it."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(code)
        self.message = message


class StopRequest:
    """The signal handler: it only records the signal; the loop acts on it once the step's state is whole."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def __call__(self, signum: int, frame: object) -> None:
        self.signal_name = signal.Signals(signum).name


_active_request: StopRequest | None = None  # the handler in place, so that nested scopes share one


@contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """SIGTERM and SIGUSR1 ask for a save and a clean exit; the previous handlers come back after. Installed once for
    a whole command (bench.compare), so that a signal arriving between steps (in an evaluation, the final probes,
    between runs) is still there at the next safe point; a nested scope (train_run, fit) shares the outer request.
    Python delivers signals to the main thread only, so elsewhere (a notebook's worker thread) nothing changes."""
    global _active_request
    if _active_request is not None:
        yield _active_request
        return
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    previous = {number: signal.signal(number, request) for number in STOP_SIGNALS}
    _active_request = request
    try:
        yield request
    finally:
        _active_request = None
        for number, handler in previous.items():
            signal.signal(number, handler)


def current_stop_request() -> StopRequest:
    """The handler stop_on_signals installed (a fresh, never-signalled request outside one)."""
    return _active_request or StopRequest()


def stop_agreed(fabric: Fabric, request: StopRequest) -> bool:
    """Whether any process was asked to stop, the same answer on every process (a collective: call it where all
    of them pass)."""
    asked = request.signal_name is not None
    if fabric.world_size == 1:
        return asked
    return bool(fabric.all_reduce(torch.tensor(float(asked), device=fabric.device), reduce_op="max").item())


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: not a configuration mistake, so not a ConfigError. Carries what the report
    states about the run (the step, the last finite loss)."""

    def __init__(self, spec: str, seed: int, step: int, loss: float, last_finite_loss: float | None,
                 flops: int = 0) -> None:
        last = "none" if last_finite_loss is None else f"{last_finite_loss:.4g}"
        super().__init__(f"{spec} seed {seed} diverged: the loss became {loss} at step {step} (last finite loss "
                         f"{last}); try a lower --lr")
        self.record = {"objective": spec, "seed": seed, "diverged": True, "step": step,
                       "last_finite_loss": last_finite_loss, "flops": flops}


@dataclass
class Run:
    """One training run's moving parts: what setup_run builds and the loop updates."""

    spec: str
    seed: int
    config: TrainConfig
    objective: Objective
    module: torch.nn.Module  # the objective as Fabric wrapped it
    optimizer: torch.optim.Optimizer
    counters: dict
    run_dir: Path
    schedule: SeqLenSchedule
    grad_norm: Tensor | None = None  # of the last step, on the device: read only when it is logged

    @property
    def curve_path(self) -> Path:
        return self.run_dir / "curve.jsonl"

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoint.pt"

    def state(self, fabric: Fabric) -> dict:
        # the precision plugin holds the loss scaler under 16-mixed, whose state must resume too
        return {"model": self.module, "optimizer": self.optimizer, "counters": self.counters,
                "precision": fabric.strategy.precision.state_dict()}


def fresh_compile_caches(blocks: int) -> None:
    """Before a compiled run: every block shares one forward's code, and dynamo keeps a few compiled entries per
    code (8 by default) across everything the process compiled, so a comparison's later runs, or one run's many
    blocks (each a guard on its own module), silently ran uncompiled past the limit. Each run starts from empty
    caches, with room for each of its blocks in training and evaluation, with and without gradients."""
    import torch._dynamo

    torch._dynamo.reset()
    config, name = torch._dynamo.config, "recompile_limit"
    if not hasattr(config, name):  # its name before torch 2.6
        name = "cache_size_limit"
    setattr(config, name, max(getattr(config, name), 4 * blocks))


def setup_run(fabric: Fabric, spec: str, seed: int, corpus: Corpus, config: TrainConfig, run_dir: Path) -> Run:
    """Seed, build the objective, compile it if asked, and hand it to Fabric with its optimizer."""
    check_config(config, fabric.world_size)
    configure_matmuls(fabric.device, config.tf32)
    fabric.seed_everything(seed, verbose=False)
    objective = build_run_objective(spec, config, corpus)
    stacks = [m for m in objective.modules() if isinstance(m, Transformer)]
    if config.compile:
        fresh_compile_caches(sum(len(stack.blocks) for stack in stacks))
    for stack in stacks:
        stack.activation_checkpointing = config.activation_checkpointing
        if config.compile:  # in place: parameter names, checkpoints and copies (the probes') stay as they are
            for block in stack.blocks:  # per block: DDP's gradient all-reduce can start as each block's backward ends
                block.compile()
    module, optimizer = fabric.setup(objective, make_optimizer(objective, config, fabric.device))
    schedule = run_schedule(config, corpus)
    counters = {"step": 0, "flops": 0, "tokens": 0, "supervised_positions": 0, "train_seconds": 0.0,
                "wall_seconds": 0.0, "next_eval": 0, "last_finite_loss": None,
                "phases": [phase_counters(phase.seq_len, phase.share) for phase in schedule.phases]}
    return Run(spec, seed, config, objective, module, optimizer, counters, run_dir, schedule)


def phase_counters(seq_len: int, share: float, steps: int = 0, tokens: int = 0, supervised_positions: int = 0,
                   flops: int = 0) -> dict:
    """What one phase of the sequence-length schedule has spent; the phases' counts add up to the run's."""
    return {"seq_len": seq_len, "share": share, "steps": steps, "tokens": tokens,
            "supervised_positions": supervised_positions, "flops": flops}


def restore(fabric: Fabric, run: Run) -> None:
    """Continue from the run folder's checkpoint when there is one; evaluations appended after it are redone."""
    if not fabric.broadcast(run.checkpoint_path.exists(), src=0):  # rank 0 decides; agree_on_folder checked it
        if fabric.is_global_zero:
            run.curve_path.unlink(missing_ok=True)
        return
    state = run.state(fabric)
    fabric.load(run.checkpoint_path, state, weights_only=True)
    match_optimizer_to_device(run.optimizer, fabric.device)
    run.counters = state["counters"]  # Fabric replaces plain entries of `state` rather than updating them
    run.counters.setdefault("last_finite_loss", None)
    counters, schedule = run.counters, run.schedule
    if "phases" not in counters and schedule.is_fixed:  # saved before schedules: all of it at one length
        counters["phases"] = [phase_counters(schedule.final, 1.0, counters["step"], counters["tokens"],
                                             counters["supervised_positions"], counters["flops"])]
    saved = [(phase["seq_len"], phase["share"]) for phase in counters.get("phases", [])]
    if saved != [(phase.seq_len, phase.share) for phase in schedule.phases]:
        raise ConfigError(f"{run.checkpoint_path} was trained with another --seq-len than {schedule.text}; resume "
                          "it with the one it started with")
    fabric.strategy.precision.load_state_dict(state["precision"])
    if fabric.is_global_zero:
        kept = [row for row in read_jsonl(run.curve_path) if row["step"] <= run.counters["step"]]
        run.curve_path.unlink(missing_ok=True)
        for row in kept:
            append_jsonl(run.curve_path, row)
    fabric.barrier()


def train_step(fabric: Fabric, run: Run, rows: Corrupted, loss_counts: dict[str, int]) -> Tensor:
    """One optimizer step on this process's `rows` of the global batch, in micro-batches of config.micro_batch
    windows whose gradients add up to the share's; `loss_counts`: the global batch's (step_counts). Returns this
    process's part of the global batch's loss (the processes' parts sum to it) as a tensor on the device: nothing in
    the step reads a value back from the device (fit reads this one, once)."""
    world, rank, step = fabric.world_size, fabric.global_rank, run.counters["step"]
    objective, config = run.objective, run.config
    per_rank = config.batch_size // world
    size = config.micro_batch or per_rank
    for group in run.optimizer.param_groups:
        group["lr"] = learning_rate(run.counters["flops"] / config.budget_flops, config)
    torch.manual_seed(derive_seed(run.seed, step, rank))  # see the module docstring
    run.optimizer.zero_grad(set_to_none=True)
    parts = []
    for start in range(0, per_rank, size):
        micro = rows.rows(slice(start, start + size))
        # DDP all-reduces the gradients in the backward of the last micro-batch only; before it they accumulate
        with fabric.no_backward_sync(run.module, enabled=start + size < per_rank):
            with fabric.autocast():
                output = run.module(micro.to(fabric.device, non_blocking=True))
            loss = share_of_loss(objective, output, micro, loss_counts, world, whole=size == config.batch_size)
            fabric.backward(loss)
        parts.append(loss.detach())
    if config.grad_clip > 0:
        # a non-finite norm is not an error here: fit's check stops every process together, with one line
        run.grad_norm = fabric.clip_gradients(run.module, run.optimizer, max_norm=config.grad_clip,
                                              error_if_nonfinite=False)
    run.optimizer.step()
    return (parts[0] if len(parts) == 1 else torch.stack(parts).sum()) / world


def share_of_loss(objective: Objective, output: Output, micro: Corrupted, totals: dict[str, int], world: int,
                  whole: bool) -> Tensor:
    """The loss to back-propagate for one micro-batch, so that the gradients summed over micro-batches and averaged
    over processes (DDP) are the gradient of the global batch's loss. Each mean in the loss is weighed by this
    micro-batch's share of the positions it averages over in the global batch, times the number of processes DDP
    divides by: Bernoulli or whole-word batches, whose rows hold different numbers of masked positions, weigh every
    position as the whole batch does. `whole`: the micro-batch is the global batch, and its loss is used as it is."""
    if whole:
        return output.loss
    counts, terms = objective.loss_counts(micro), output.loss_terms()
    return sum(term * (counts[name] * world / totals[name] if totals[name] else 0.0)
               for name, term in terms.items())


@dataclass(frozen=True)
class Agreement:
    """What every process knows after a step's all-reduce."""

    loss: float  # the global batch's
    stop: bool  # whether any process was asked to stop
    save: bool  # whether any wants to save
    ahead: StepCounts | None  # the next step's global counts, when its local ones were given


HALF = 2 ** 32


def agree(fabric: Fabric, loss_part: Tensor, stop: bool, save: bool, ahead: StepCounts | None = None) -> Agreement:
    """The step's only synchronisation: the processes' loss parts summed (a NaN or inf on one reaches all), their
    requests or-ed and the next step's local counts (`ahead`) summed, in one all-reduce, read with one transfer to
    the host. Agreeing is what lets every process stop at the same step; one that stopped alone would leave the
    others waiting in a collective."""
    if fabric.world_size == 1:
        return Agreement(loss_part.item(), stop, save, ahead)
    # float64 adds integers exactly below 2**53, and a step's FLOPs pass that at scale: each count travels as two
    # 32-bit halves, exact summed over up to 2**20 processes. The values are filled on the device
    # (torch.tensor(list, device=cuda) would be a blocking copy), and the all-reduce is torch's own: Fabric's runs a
    # barrier before it, a second wait at every step.
    halves = [half for count in (ahead.values() if ahead else []) for half in divmod(count, HALF)]
    loss_part = loss_part.reshape(1).double()
    values = torch.cat([loss_part, *(loss_part.new_full((1,), float(value)) for value in (stop, save, *halves))])
    torch.distributed.all_reduce(values, op=torch.distributed.ReduceOp.SUM)
    total, stops, saves, *summed = values.tolist()
    counts = [int(high) * HALF + int(low) for high, low in zip(summed[::2], summed[1::2])]
    return Agreement(total, stops > 0, saves > 0, ahead.with_values(counts) if ahead else None)


def checkpoint_evaluation(fabric: Fabric, run: Run, corpus: Corpus, heldout: list[Corrupted], grid: list[float],
                          probe: ProbeConfig | None, started: float, downstream: Tasks | None = None) -> None:
    """Evaluate at the FLOP checkpoint just passed, append the row to curve.jsonl and checkpoint the state."""
    counters = run.counters
    while counters["next_eval"] < len(grid) and counters["flops"] >= grid[counters["next_eval"]]:
        counters["next_eval"] += 1
    row = {"checkpoint": grid[counters["next_eval"] - 1], "step": counters["step"], "flops": counters["flops"],
           "tokens": counters["tokens"], "supervised_positions": counters["supervised_positions"],
           **evaluate(fabric, run.module, heldout, run.objective)}
    if not math.isfinite(row["loss"]):  # the last update broke the weights: not a finished run
        raise TrainingDiverged(run.spec, run.seed, counters["step"], row["loss"], counters["last_finite_loss"],
                               counters["flops"])
    if run.config.probe_every_eval and fabric.is_global_zero:  # only rank 0 writes the row; the others need not wait
        with fabric.autocast():  # the readouts run on the device, under the run's precision
            if probe is not None:
                row.update(run_probes(run.objective, corpus, probe, finetune=False))
            if downstream is not None:
                row.update(downstream.curve_point(run.objective))
    counters["wall_seconds"] = time.perf_counter() - started
    if fabric.is_global_zero:
        append_jsonl(run.curve_path, row)
    save_checkpoint(fabric, run.checkpoint_path, run.state(fabric))


@dataclass
class Step:
    """A training step as the loop sees it: its index, its phase of the sequence-length schedule, this process's
    rows and the global batch's counts."""

    index: int
    phase: int
    rows: Corrupted
    spent: StepCounts


class TrainingLoop:
    """What `fit` keeps across steps (the progress bar, live metrics, the batch prefetcher, the counts carried from
    one step's all-reduce to the next, the time of the last save) and the named parts of a step."""

    def __init__(self, fabric: Fabric, run: Run, corpus: Corpus, probe: ProbeConfig | None, downstream: Tasks | None,
                 progress: bool, request: StopRequest) -> None:
        self.fabric, self.run, self.corpus, self.probe, self.downstream = fabric, run, corpus, probe, downstream
        self.request, config, counters = request, run.config, run.counters
        self.windows = [corpus.windows("train", phase.seq_len) for phase in run.schedule.phases]
        self.heldout, self.grid = eval_batches(run.objective, corpus, config), eval_grid(config)
        self.bar = tqdm(total=100, desc=run_name(run.spec, run.seed), unit="% budget", leave=True, mininterval=0.5,
                        disable=not (progress and fabric.is_global_zero),
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")
        self.bar.update(min(100.0, 100 * counters["flops"] / config.budget_flops))
        self.started, self.last_save = time.perf_counter() - counters["wall_seconds"], time.monotonic()
        self.live = LiveMetrics(run.run_dir, counters["step"], config.log_every, fabric.device,
                                fabric.strategy.precision.precision, fabric.world_size, enabled=fabric.is_global_zero)
        per_rank = config.batch_size // fabric.world_size
        self.share = slice(fabric.global_rank * per_rank, (fabric.global_rank + 1) * per_rank)
        self.prefetch = Prefetcher(self.build)
        self.carried: tuple[tuple[int, int], StepCounts] | None = None  # a step's global counts, from the step before
        self.upcoming = (counters["step"], 0)  # the (step, phase) being built ahead
        run.module.train()

    def build(self, step: int, phase: int) -> tuple[Corrupted, StepCounts]:
        """This process's rows of the step's batch, and their counts."""
        rows = training_batch(self.run.objective, self.windows[phase], self.run.seed, step,
                              self.run.config.batch_size, self.share)
        return (rows.pin_memory() if self.fabric.device.type == "cuda" else rows), local_counts(self.run.objective, rows)

    def take_batch(self) -> Step:
        """The step's rows (built ahead while the last step ran) and its global counts; starts building the next."""
        counters, budget, schedule = self.run.counters, self.run.config.budget_flops, self.run.schedule
        # a pure function of the counted FLOPs, which the checkpoint holds: a resumed run switches at the same
        # step. Its windows are indexed by the run's step, so a later phase does not continue the token stream
        # where the previous one stopped: it starts at window s·B of its own windowing, as a run at its length
        # throughout would read at step s.
        step, phase = counters["step"], schedule.phase_at(counters["flops"], budget)
        rows, local = self.prefetch.take(step, phase)
        carried = self.carried
        spent = carried[1] if carried and carried[0] == (step, phase) else step_counts(self.fabric, local)
        # the next step's phase is known now: its rows are corrupted while this step runs
        self.upcoming = (step + 1, schedule.phase_at(counters["flops"] + spent.flops, budget))
        self.prefetch.start(*self.upcoming)
        return Step(step, phase, rows, spent)

    def update(self, step: Step) -> Agreement:
        """The optimizer step, then the one all-reduce every process agrees on (loss, stop and save requests, and,
        on several processes, the next step's counts)."""
        config = self.run.config
        loss_part = train_step(self.fabric, self.run, step.rows, step.spent.loss_counts)
        save_due = config.checkpoint_every is not None and \
            time.monotonic() - self.last_save >= 60 * config.checkpoint_every
        agreed = agree(self.fabric, loss_part, self.request.signal_name is not None, save_due,
                       self.prefetch.ahead() if self.fabric.world_size > 1 else None)
        self.carried = (self.upcoming, agreed.ahead) if agreed.ahead else None
        return agreed

    def count(self, step: Step, loss: float) -> None:
        """The run's and its phase's counters, the bar and the live metrics; a non-finite loss ends the run (every
        rank sees the same loss, so every rank stops here)."""
        run, counters, spent = self.run, self.run.counters, step.spent
        if not math.isfinite(loss):
            self.bar.close()
            raise TrainingDiverged(run.spec, run.seed, step.index, loss, counters["last_finite_loss"],
                                   counters["flops"] + spent.flops)
        tokens = run.config.batch_size * step.rows.inputs.shape[1]
        counts = {"tokens": tokens, "supervised_positions": spent.supervised_positions, "flops": spent.flops}
        for totals in (counters, counters["phases"][step.phase]):  # the run's totals, and its phase's
            for key, value in counts.items():
                totals[key] += value
        counters["phases"][step.phase]["steps"] += 1
        counters.update(step=step.index + 1, last_finite_loss=loss)
        self.bar.update(min(100.0, 100 * counters["flops"] / run.config.budget_flops) - self.bar.n)
        self.bar.set_postfix_str(f"loss {loss:.3f}", refresh=False)
        self.live.step(counters["step"], loss, run.optimizer.param_groups[0]["lr"], tokens, spent.flops,
                       run.grad_norm, getattr(self.fabric.strategy.precision, "scaler", None))

    def evaluate_or_save(self, agreed: Agreement) -> None:
        """At a FLOP checkpoint: evaluate and save; else save when a process asked (a signal, --checkpoint-every)."""
        counters = self.run.counters
        if counters["flops"] >= self.grid[counters["next_eval"]]:
            checkpoint_evaluation(self.fabric, self.run, self.corpus, self.heldout, self.grid, self.probe,
                                  self.started, self.downstream)
            self.last_save = time.monotonic()
            self.live.restart()
        elif agreed.stop or agreed.save:
            counters["wall_seconds"] = time.perf_counter() - self.started
            save_checkpoint(self.fabric, self.run.checkpoint_path, self.run.state(self.fabric))
            self.last_save = time.monotonic()

    def stop_if_asked(self, agreed: bool) -> None:
        """After a signal the state is saved: end the command (closing the bar first, so the message has a line)."""
        if agreed:
            self.bar.close()
            raise stopped(self.fabric, self.run, self.request.signal_name)

    def close(self) -> None:
        self.bar.close()
        self.prefetch.close()
        self.live.close()


def fit(fabric: Fabric, run: Run, corpus: Corpus, probe: ProbeConfig | None, progress: bool,
        stop_after_steps: int | None, downstream: Tasks | None = None) -> bool:
    """Train until the accounted FLOPs reach the budget, evaluating at every checkpoint of the grid. Returns False
    when stopped early by `stop_after_steps` (which simulates an interruption). Raises RunStopped after saving the
    state when SIGTERM or SIGUSR1 arrives, TrainingDiverged when the loss stops being finite."""
    counters, early = run.counters, False
    with stop_on_signals() as request, closing(TrainingLoop(fabric, run, corpus, probe, downstream, progress,
                                                            request)) as loop:
        while not early and counters["flops"] < run.config.budget_flops:
            tick = time.perf_counter()  # the whole step, building the batch included: honest tokens/s
            # --- the step: its rows, the update, the one all-reduce
            step = loop.take_batch()
            agreed = loop.update(step)
            counters["train_seconds"] += time.perf_counter() - tick
            # --- what it counted, then an evaluation at each FLOP checkpoint (or a save when asked)
            loop.count(step, agreed.loss)
            loop.evaluate_or_save(agreed)
            loop.stop_if_asked(agreed.stop)
            early = stop_after_steps is not None and counters["step"] >= stop_after_steps
        if not early:
            counters["wall_seconds"] = time.perf_counter() - loop.started
            # a signal that arrived during the last evaluation: its checkpoint (at the budget) is saved, so stop now,
            # before the final probes; --resume runs them from there
            loop.stop_if_asked(stop_agreed(fabric, request))
    return not early


def stopped(fabric: Fabric, run: Run, signal_name: str | None) -> RunStopped:
    """Say (once, on rank 0) that the state is saved and how to go on; the exception ends the command."""
    return stop_message(fabric, f"after step {run.counters['step']} of {run.spec} seed {run.seed}: the state is saved "
                                f"in {run.checkpoint_path}", signal_name)


def stop_message(fabric: Fabric, where: str, signal_name: str | None) -> RunStopped:
    message = (f"stopped by {signal_name or 'a signal to another process'} {where}; run the same command with "
               "--resume to continue")
    if fabric.is_global_zero:
        print(message, file=sys.stderr, flush=True)
    return RunStopped(message, EXIT_STOPPED if fabric.is_global_zero else 0)


def run_result(fabric: Fabric, run: Run, corpus: Corpus) -> dict:
    """The finished run's record: counters (in total and per phase of the sequence-length schedule), throughput,
    sizes, the analytic counts and the curve. Per-sequence numbers are at the final length, the one the signal-density
    table and the evaluation are at: measured over the last phase's sequences (over all, should it have run none)."""
    counters, objective, batch_size = run.counters, run.objective, run.config.batch_size
    final = counters["phases"][-1]
    measured = final if final["steps"] else {"steps": counters["step"], **counters}
    return {
        "objective": run.spec, "seed": run.seed, "attention": objective.attention, "lr": run.config.lr,
        "control": control_name(objective),
        "steps": counters["step"],
        "flops": counters["flops"], "tokens": counters["tokens"], "supervised_positions": counters["supervised_positions"],
        "phases": [dict(phase) for phase in counters["phases"]],
        "supervised_per_sequence": measured["supervised_positions"] / (measured["steps"] * batch_size),
        "flops_per_step": counters["flops"] / counters["step"],
        "wall_seconds": counters["wall_seconds"], "train_seconds": counters["train_seconds"],
        "tokens_per_second": counters["tokens"] / counters["train_seconds"],
        "parameters": sum(p.numel() for p in objective.parameters()),
        "backbone_parameters": objective.backbone.num_parameters(),
        "expected_supervised_per_sequence": objective.expected_supervised_positions(run.schedule.final),
        "expected_flops_per_sequence": objective.expected_flops_per_sequence(run.schedule.final),
        "curve": read_jsonl(run.curve_path),  # complete on every rank: the last checkpoint ended in a barrier
    }


def train_run(fabric: Fabric, spec: str, seed: int, corpus: Corpus, config: TrainConfig, run_dir: Path,
              probe: ProbeConfig | None = None, progress: bool = True,
              stop_after_steps: int | None = None, downstream: Tasks | None = None) -> dict | None:
    """Train `spec` with `seed` to the budget, writing curve.jsonl, checkpoint.pt and finally result.json into
    run_dir. Resumes from run_dir's checkpoint when there is one. With `probe`, probes the final backbone (and, with
    config.probe_every_eval, the frozen backbone at every checkpoint); with `downstream`, the same for its tasks.
    Returns the result, or None when stopped early by `stop_after_steps`. Raises TrainingDiverged when the loss stops
    being finite, RunStopped after a stop signal (at the end of its step, after the evaluation it arrived in, or once
    result.json is written when it arrived during the final probes and tasks)."""
    with stop_on_signals() as request:  # the command's, when it installed one
        run = setup_run(fabric, spec, seed, corpus, config, run_dir)
        restore(fabric, run)
        if not fit(fabric, run, corpus, probe, progress, stop_after_steps, downstream):
            return None
        result, tick = run_result(fabric, run, corpus), time.perf_counter()
        # Probes and downstream tasks read one copy of the final weights, so rank 0 alone runs them (every rank holds
        # the same weights; the others would only repeat its work) and the others wait at the barrier below.
        with fabric.autocast():  # on the device, under the run's precision, as at every checkpoint
            if probe is not None and fabric.is_global_zero:
                result.update(probes=run_probes(run.objective, corpus, probe),
                              probe_seconds=time.perf_counter() - tick)
            if downstream is not None and fabric.is_global_zero:
                tick = time.perf_counter()
                scores = downstream.evaluate(run.objective, progress, desc=f"{run_name(spec, seed)} downstream")
                result.update(downstream=scores, downstream_seconds=time.perf_counter() - tick)
        if fabric.is_global_zero:
            write_json(run_dir / "result.json", result)
        fabric.barrier()
        if stop_agreed(fabric, request):  # arrived during the final probes or tasks: their results are kept
            raise stop_message(fabric, f"after {run_name(spec, seed)} finished (its result.json is written)",
                               request.signal_name)
        return result


def control_name(objective: Objective) -> str:
    """The untrained control an objective's runs are set beside: its backbone at initialisation, read as the
    objective reads it (causal or over the whole window; BERT's segment embeddings change the backbone itself)."""
    causal = objective.probe_attention(objective.backbone.config.max_seq_len)["attention"] == "causal"
    segments = " with segment embeddings" if objective.backbone.segment_embedding is not None else ""
    return f"untrained, {'causal' if causal else 'bidirectional'}{segments}"


def control_run(fabric: Fabric, spec: str, seed: int, corpus: Corpus, config: TrainConfig, run_dir: Path,
                probe: ProbeConfig | None = None, progress: bool = True,
                downstream: Tasks | None = None) -> dict | None:
    """The untrained control of seed `seed`: the very backbone a run of `spec` starts from (the same seeding and
    construction as setup_run), through the probes and downstream tasks at 0 FLOPs, never trained. Writes
    run_dir/result.json on rank 0 and returns it there (None elsewhere). Its evaluation FLOPs are reported, never
    charged: it spends no training compute."""
    if fabric.is_global_zero:
        tick = time.perf_counter()
        configure_matmuls(fabric.device, config.tf32)
        with torch.random.fork_rng(devices=[]):
            fabric.seed_everything(seed, verbose=False)
            objective = build_run_objective(spec, config, corpus).to(fabric.device)
        result = {"control": control_name(objective), "read_as": spec, "seed": seed,
                  "attention": objective.attention, "flops": 0}
        with fabric.autocast():  # read as the runs are read
            if probe is not None:
                result["probes"] = run_probes(objective, corpus, probe)
            if downstream is not None:
                result["downstream"] = downstream.evaluate(objective, progress, desc=f"{run_dir.name} downstream")
        result["wall_seconds"] = time.perf_counter() - tick
        write_json(run_dir / "result.json", result)
    fabric.barrier()
    return result if fabric.is_global_zero else None


def save_checkpoint(fabric: Fabric, path: Path, state: dict) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    fabric.save(temporary, state)
    if fabric.is_global_zero:
        os.replace(temporary, path)  # never a half-written checkpoint under the real name
    fabric.barrier()


def agree_on_folder(fabric: Fabric, out: Path) -> Path:
    """Rank 0's output folder for every process (a default folder is named by each process's own clock), checked to
    be one folder that every process sees: rank 0 decides what is finished and writes, the others read its
    checkpoints. Rank 0 leaves a marker; a process that cannot see it is on another filesystem."""
    out = Path(fabric.broadcast(str(out.absolute()), src=0))
    if fabric.world_size == 1:
        return out
    marker = out / f".shared-{fabric.broadcast(uuid.uuid4().hex, src=0)}"
    if fabric.is_global_zero:
        out.mkdir(parents=True, exist_ok=True)
        marker.touch()
    fabric.barrier()
    seen = fabric.all_reduce(torch.tensor(float(sees(marker)), device=fabric.device), reduce_op="min")
    fabric.barrier()
    if fabric.is_global_zero:
        marker.unlink()
    if seen.item() < 1:
        raise ConfigError(f"--out {out} is not one folder that every process sees (waited {FOLDER_WAIT_SECONDS:g} s); "
                          "on several nodes, give an --out on a filesystem they all share")
    return out


FOLDER_WAIT_SECONDS = 60.0  # an NFS client keeps an earlier "not there" for up to its acdirmax, 30-60 s by default


def sees(path: Path, poll_seconds: float = 1.0) -> bool:
    """Whether this process sees `path`, waiting up to FOLDER_WAIT_SECONDS for it: on NFS a folder this node looked
    at before rank 0 wrote into it can stay cached as it was. Listing the folder makes the client read it again."""
    deadline = time.monotonic() + FOLDER_WAIT_SECONDS
    while True:
        try:
            os.listdir(path.parent)
        except OSError:
            pass
        if path.exists():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_seconds)


def trained_or_reused(fabric: Fabric, spec: str, seed: int, corpus: Corpus, config: TrainConfig, run_dir: Path,
                      reuse: bool, probe: ProbeConfig | None = None, progress: bool = True,
                      downstream: Tasks | None = None) -> tuple[dict | None, dict | None]:
    """A run as (its result, None), or (None, its divergence record): with `reuse`, what run_dir holds from before
    (rank 0 decides, so every process takes the same branch); else trained by train_run. A run that diverges is
    recorded in run_dir/diverged.json, so that a resumed comparison does not train it again."""
    diverged = run_dir / "diverged.json"
    record, result = fabric.broadcast((read_json(diverged) if reuse and diverged.exists() else None,
                                       finished_result(run_dir) if reuse else None), src=0)
    if record is not None or result is not None:
        return result, record
    try:
        return train_run(fabric, spec, seed, corpus, config, run_dir, probe, progress, downstream=downstream), None
    except TrainingDiverged as error:
        print(f"warning: {error}", file=sys.stderr)
        if fabric.is_global_zero:
            write_json(diverged, error.record)
        return None, error.record


def finished_result(run_dir: Path) -> dict | None:
    path = run_dir / "result.json"
    return read_json(path) if path.exists() else None

