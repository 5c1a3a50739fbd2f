#!/usr/bin/env bash
# The device check of issues 22 and 33, prepared to run once on one GPU (an H200 lent by the workplace, or any CUDA
# machine): about 11 minutes on an H200, everything under ${OUT:-gpu-check}/. Not part of CI, which has no GPU.
#   bash scripts/gpu-check.sh [STEP ...]     (from the repository root, with the suite installed)
# With step names (tests, perf-small, perf-base-512, perf-experiment, sync-debug, compare, jobs-throughput,
# jobs-compare),
# only those run: a lease shorter than the whole check spends itself on what it must answer.
# Where a step fails, the ones after it still run, and summary.txt says which failed.
set -uo pipefail
out=${OUT:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
chosen=" $* "
failed=()
step() {  # step NAME SECONDS COMMAND...: run it with a time limit, its output in $out/NAME.txt
    local name=$1 limit=$2
    shift 2
    if [[ "$chosen" != "  " && "$chosen" != *" $name "* ]]; then
        return 0
    fi
    echo "=== $name" | tee -a "$out/summary.txt"
    local start=$SECONDS
    timeout "$limit" "$@" >"$out/$name.txt" 2>&1
    local status=$?
    echo "($((SECONDS - start)) s)" | tee -a "$out/summary.txt"
    if ((status != 0)); then
        failed+=("$name")
        echo "FAILED (status $status, see $name.txt)" | tee -a "$out/summary.txt"
    fi
    tail -3 "$out/$name.txt" | tee -a "$out/summary.txt"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/device.txt" 2>&1
python -c "import torch; print(torch.__version__, torch.cuda.get_device_name(), \
torch.cuda.is_bf16_supported(including_emulation=False))" >>"$out/device.txt" 2>&1
# the tests whose CUDA branches run only where a GPU is (they are skipped or mocked elsewhere)
step tests 150 python -m pytest -q -x tests/commands/test_perf.py tests/backbone/
step perf-small 90 python -m bench.perf --accelerator cuda --precision bf16-mixed --model small --json
step perf-base-512 120 python -m bench.perf --accelerator cuda --precision bf16-mixed --model base --seq-len 512 \
    --batch-size 32 --repeats 3 --json
# issue 58: a step of each objective at the GPU experiment's shape (bench/gpu_experiment.py SHAPE: ELECTRA-Small,
# 12 x 256, T = 128, batch 256), what scripts/gpu-experiment.sh's own measurement sizes its budget from
step perf-experiment 120 python -m bench.perf --accelerator cuda --precision bf16-mixed --model small:n_layer=12 \
    --seq-len 128 --batch-size 256 --repeats 5 --json
# one training step under the sync debug mode: every implicit host-device synchronisation is a warning
step sync-debug 60 python - <<'PY'
import warnings
from pathlib import Path

import torch
from bench.data.corpus import load_corpus
from bench.training.batches import local_counts, training_batch
from bench.training.recipe import RunConfig
from bench.training.distributed import make_fabric, step_counts
from bench.training.loop import train_step
from bench.orchestration.memory import step_memory
from bench.training.state import Context, Work, setup_run

fabric = make_fabric("cuda", precision="bf16-mixed")
corpus = load_corpus("synthetic", 128)
for spec in ("mlm", "ar", "electra", "span"):
    run = setup_run(fabric, Work(spec, 0, RunConfig(budget_flops=1e12, model="small", batch_size=32, lr=1e-3),
                                 Path("/tmp/gpu-check-step")), Context(corpus))
    rows = training_batch(run.objective, corpus.windows("train"), 0, 0, 32, slice(0, 32)).pin_memory()
    spent = step_counts(fabric, local_counts(run.objective, rows))
    torch.cuda.reset_peak_memory_stats()
    train_step(fabric, run, rows, spent.loss_counts)  # warm-up: creates AdamW's moments
    torch.cuda.synchronize()
    # the memory check's estimate beside what the allocator reached in the step (issue 22, item 8)
    estimate = step_memory(run.objective, 32, 128, "bf16-mixed", fabric.device).total
    print(spec, f"peak {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB allocated, "
          f"{torch.cuda.max_memory_reserved() / 2**20:,.0f} MiB reserved; estimate {estimate / 2**20:,.0f} MiB")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        train_step(fabric, run, rows, spent.loss_counts)
        torch.cuda.set_sync_debug_mode(0)
    print(spec, len(caught), "implicit synchronisations in one step", *(str(w.message)[:200] for w in caught))
PY
# the README's single-GPU command at a small budget: tokens/s, MFU and peak memory are in the runs' live metrics
step compare 420 python -m bench.compare --objectives mlm,ar,electra,span --accelerator cuda --precision bf16-mixed \
    --model base --seq-len 512 --batch-size 256 --micro-batch 64 --budget 2e15 --seeds 1 --no-probes --quiet \
    --out "$out/compare"
for metrics in "$out"/compare/runs/*/logs/from-step-0/metrics.csv; do
    [[ -f "$metrics" ]] && echo "$metrics: $(tail -1 "$metrics")" >>"$out/summary.txt"
done
# issue 33: small runs side by side on one GPU. Tokens/s of 1, 2, 4 and 8 default-shape runs (mini, T = 64, batch
# 32, fp32/TF32) at once, each a process of its own started together; the
# memory each process reserved says how many such runs the GPU holds (bench.orchestration.jobs.PER_GPU_SMALL's choice)
# (a file, not stdin: the processes are spawned, and each imports the script's functions again)
cat >"$out/jobs_throughput.py" <<'PY'
import multiprocessing, tempfile, time
from pathlib import Path

import torch
from bench.data.corpus import load_corpus
from bench.training.distributed import make_fabric
from bench.training.runs import train_run
from bench.training.state import Context, Work
from bench.speed.throughput import steps_config

STEPS = 600


def one(seed, ready, results):
    corpus, fabric = load_corpus("synthetic", 64), make_fabric("cuda")
    config = steps_config("mlm", corpus, STEPS, "mini", 32)
    with tempfile.TemporaryDirectory() as folder:
        ready.wait(timeout=600)
        result = train_run(fabric, Work("mlm", seed, config, Path(folder)), Context(corpus))
    results.put((result.tokens, result.train_seconds, torch.cuda.max_memory_reserved()))


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    for count in (1, 2, 4, 8):
        ready, results = context.Barrier(count), context.Queue()
        workers = [context.Process(target=one, args=(seed, ready, results)) for seed in range(count)]
        for worker in workers:
            worker.start()
        done = [results.get(timeout=600) for _ in workers]
        for worker in workers:
            worker.join()
        tokens, seconds, reserved = sum(d[0] for d in done), max(d[1] for d in done), max(d[2] for d in done)
        print(f"{count} at once: {tokens / seconds:,.0f} tokens/s together, {reserved / 2**20:,.0f} MiB reserved "
              f"per run (+ its CUDA context): about {torch.cuda.mem_get_info()[1] // (reserved + 2**30)} fit")
PY
step jobs-throughput 300 python "$out/jobs_throughput.py"
# the pool through the command, on the GPU: 2 objectives x 2 seeds at the default shape
step jobs-compare 240 python -m bench.compare --objectives mlm,ar --seeds 2 --budget 2e12 --accelerator cuda \
    --downstream none --no-probes --jobs 4 --out "$out/jobs"
echo "failed: ${failed[*]:-none}" | tee -a "$out/summary.txt"
