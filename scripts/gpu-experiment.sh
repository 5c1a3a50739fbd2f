#!/usr/bin/env bash
# The GPU experiment for a lent device (issue 58; README: GPUs and clusters): mlm, ar and electra with their
# untrained controls at ELECTRA-Small's shape on the Debian documentation corpus, sized to the command's limit and
# resumable across leases (bench/gpu_experiment.py says how).
#   bash scripts/gpu-experiment.sh [--resume] [--dry-run] [--limit SECONDS] ...   (from the repository root)
# Needs build/gpu-bundle (python scripts/build_gpu_bundle.py; carried, it is an ignored folder) or $BUNDLE, whose
# data.tar.xz it unpacks into build/gpu-bundle-data (or $DATA), not carried. Writes
# ${OUT:-.}/gpu-experiment/; an earlier lease's gpu-experiment/ in the repository root (carried back) is continued
# there with --resume. The device has no network: what its image lacks is installed from the bundle's wheels.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${BUNDLE:-$root/build/gpu-bundle}
out=${OUT:-$root}
experiment="$out/gpu-experiment"
export PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
python=${PYTHON:-python3}

if [[ ! -d "$bundle" ]]; then
    echo "error: no bundle at $bundle: build it with python scripts/build_gpu_bundle.py (and carry it)" >&2
    exit 2
fi
# the earlier leases' results, carried in the repository root, continue in $OUT (which is what comes back)
if [[ "$experiment" != "$root/gpu-experiment" && -d "$root/gpu-experiment" && ! -e "$experiment" ]]; then
    cp -r "$root/gpu-experiment" "$experiment"
fi
# the corpus, tasks and tokenizer unpacked outside the bundle (which must stay within the carry limit), again
# whenever the bundle's data.tar.xz is another one
unpacked=${DATA:-$root/build/gpu-bundle-data}
digest=$(sha256sum "$bundle/data.tar.xz" | cut -d" " -f1)
if [[ "$(cat "$unpacked/.sha256" 2>/dev/null)" != "$digest" ]]; then
    rm -rf "$unpacked" && mkdir -p "$unpacked"
    "$python" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" \
        "$bundle/data.tar.xz" "$unpacked"
    echo "$digest" >"$unpacked/.sha256"
fi
# what the suite imports; where one is missing, the bundle's wheels go into a venv that sees the image's torch
# (found, not imported: importing them all takes seconds)
needed="import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ('torch', 'lightning_fabric',
'datasets', 'tokenizers', 'numpy', 'scipy', 'sklearn', 'seqeval', 'tabulate', 'seaborn', 'pyarrow', 'pandas')))"
if ! "$python" -c "$needed"; then
    venv=${TMPDIR:-/tmp}/gpu-experiment-venv
    "$python" -m venv --system-site-packages "$venv"
    if ! "$venv/bin/python" -m pip install -q --no-index --find-links "$bundle/wheels" --no-deps \
            -r "$bundle/wheels/requirements.txt"; then
        echo "error: the bundle's wheels do not install here (built for Python" \
             "$("$python" -c "import json, sys; print(json.load(open(sys.argv[1]))['python'])" "$bundle/sources.json"),"\
             "this is $("$python" -c 'import platform; print(platform.python_version())')):" \
             "rebuild with python scripts/build_gpu_bundle.py --python MAJOR.MINOR" >&2
        exit 2
    fi
    python="$venv/bin/python"
    "$python" -c "$needed"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
cd "$root"
exec "$python" -m bench.gpu_experiment --data "$unpacked/data" --out "$experiment" "$@"
