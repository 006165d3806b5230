#!/usr/bin/env bash
# The shipped grids on one GPU as users run them (issue "The main job on one GPU, end to end"):
# `python -m bench.run`, Ray scheduling the trials packed on the GPU (`bench.sweep.gpus`, MPS
# where the machine has it), MLflow beside it, the report; then each grid's verdicts against the
# CPU's committed findings, claim by claim. One command of at most 8 minutes, from the root of a
# checkout whose ../shared/data holds enwik8.head, on an offline machine with the bundle:
#     bash ci/gpu_grids.sh OUT_DIR [GRID ...]    (default: heads_grid span_limit
#                                                 adaptive_vs_dynamic span_enwik8_floor)
# BUNDLE (default dist/attnbench-py3.12.tar.xz, from `python -m ci.bundle --python 3.12`) is
# unpacked into /tmp/attnbench-site first, and found there by a later call on the same machine
# (the bundle, 54 MB, and the project nearly fill a 64 MiB carry: a second call brings the
# real-text grid's data instead, ../shared/data copied into an ignored carry/shared/, which the
# script puts back at ../shared). The real-text grid is span_enwik8_floor, the primary setting as
# `bench.run` runs it today (span_enwik8_adamw reads raw spans without a declared floor, refused
# now). heads_grid runs its step captured as one CUDA graph (train.compile=graphs); the span
# grids' learned spans trim their windows, which a graph cannot hold, so they run eagerly (said in
# run.txt). Writes under OUT_DIR: machine.txt, run.txt (each grid's command, exit status and wall
# time), <grid>/ (bench.run's folder: runs.csv, findings, tables, figures; <grid>.log its output)
# and compare.md (the GPU's verdicts beside the CPU's).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-results/gpu}}
shift || true
GRIDS=("$@")
[ ${#GRIDS[@]} -gt 0 ] || GRIDS=(heads_grid span_limit adaptive_vs_dynamic span_enwik8_floor)
PY=${PYTHON:-python3}
BUNDLE=${BUNDLE:-dist/attnbench-py3.12.tar.xz}
BUDGET=${BUDGET:-470}  # seconds left for the grids, of the command's 8 minutes
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d "${SHARED:-carry/shared}" ] && [ ! -e ../shared/data/enwik8.head ]; then
    mkdir -p ../shared && cp -r "${SHARED:-carry/shared}"/. ../shared/  # the real-text prefix
fi
if [ -f "$BUNDLE" ]; then  # unpacked once: a later call on the same machine finds it there
    mkdir -p /tmp/attnbench-site && tar xJf "$BUNDLE" -C /tmp/attnbench-site
fi
if [ -d /tmp/attnbench-site ]; then
    export PYTHONPATH=/tmp/attnbench-site:$PWD
    "$PY" -c "import attnbench_bundle" || exit 2  # built for another Python: it says which
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
  echo "$(nproc) CPU cores"; git rev-parse HEAD; } > "$OUT/machine.txt" 2>&1
start=$(date +%s)
for grid in "${GRIDS[@]}"; do
    left=$((BUDGET - $(date +%s) + start))
    if [ "$left" -lt 30 ]; then
        echo "$grid: not run, ${left} s left of ${BUDGET}" >> "$OUT/run.txt"; continue
    fi
    capture=()
    [ "$grid" = heads_grid ] && capture=(--set train.compile=graphs)
    args=(ablations/$grid.yaml "${capture[@]}" --results-dir "$OUT")
    t0=$(date +%s.%N)
    timeout "$left" "$PY" -m bench.run "${args[@]}" > "$OUT/$grid.log" 2>&1
    rc=$?
    wall=$(awk "BEGIN {printf \"%.0f\", $(date +%s.%N) - $t0}")
    how=$([ ${#capture[@]} -gt 0 ] && echo "captured step" || echo "eager")
    echo "$grid: python -m bench.run ${args[*]}: exit $rc, ${wall} s wall ($how)" \
        >> "$OUT/run.txt"
done
"$PY" - "$OUT" "${GRIDS[@]}" > "$OUT/compare.md" 2>&1 <<'PY'
import sys
from pathlib import Path

import pandas as pd

out, grids = Path(sys.argv[1]), sys.argv[2:]
cpu = {"heads_grid": "results/heads_grid", "span_limit": "results/span_limit",
       "adaptive_vs_dynamic": "results/adaptive_vs_dynamic",
       "span_enwik8_floor": "results/enwik8-prefix/span_enwik8_floor"}
for g in grids:
    gpu_csv, cpu_csv = out / g / "findings.csv", Path(cpu.get(g, "-")) / "findings.csv"
    if not gpu_csv.exists() or not cpu_csv.exists():
        print(f"## {g}: no findings to compare (GPU: {gpu_csv.exists()}, CPU: "
              f"{cpu_csv.exists()})\n")
        continue
    a = pd.read_csv(cpu_csv).set_index("claim")[["verdict", "look", "effect", "p"]]
    b = pd.read_csv(gpu_csv).set_index("claim")[["verdict", "look", "effect", "p"]]
    both = a.join(b, lsuffix=" (CPU)", rsuffix=" (GPU)", how="outer")
    same = (both["verdict (CPU)"] == both["verdict (GPU)"]).sum()
    print(f"## {g}: {same} of {len(both)} decisions the same\n")
    print(both.to_markdown(floatfmt=".4g"), "\n")
PY
cat "$OUT/run.txt"
