#!/usr/bin/env bash
# The GPU checks (issue "Grids on a GPU as their users run them"), one run of at most 8 minutes on
# one CUDA GPU, from the repository root:
#     bash ci/gpu_check.sh OUT_DIR            (default: $OUT, else results/speed/gpu)
# 1. the CUDA tests (CUDA = CPU layers, the training loop on CUDA, a captured step's losses);
# 2. bench.speed at the main job's sizes and at the small preset (batch 64), fp32 and bf16, eager
#    and with the step captured as CUDA graphs (train.compile=graphs);
# 3. trials packed on one GPU: the main job's 6 settings and 2 more seeds (one look's worth), one
#    alone then 8 concurrent bench.train processes, eager and captured: tokens/s each, and the
#    aggregate (every trial's tokens over the wall time).
# Each writes under OUT_DIR: machine.txt, cuda_tests.txt, speed_mainjob.md, speed_small.md,
# packing.md. Where the one-run commands' packages (pydantic, fvcore, ...) are missing, as on
# this project's GPU machines, put them in .whl/ first (bash ci/gpu_wheels.sh, where pip reaches
# PyPI): they are installed into /tmp/site here.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-results/speed/gpu}}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
        --no-cache-dir --target /tmp/site .whl/* && export PYTHONPATH=/tmp/site:$PWD
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
  git log -1 --format='commit %h %s' 2>/dev/null; } > "$OUT/machine.txt" 2>&1

# 1. CUDA tests (about a minute)
timeout 180 "$PY" -m pytest -q -p no:cacheprovider tests/test_variants.py -k cuda \
    tests/test_train.py > "$OUT/cuda_tests.txt" 2>&1

# the main job's model and training (its grid's base), as --set options
sets() {  # $1: the sections to take
    "$PY" - "$1" <<'PY'
import sys, yaml
base = yaml.safe_load(open("ablations/heads_grid.yaml"))["base"]
skip = ("steps", "eval_every", "checkpoint_every", "eval_tokens")
out = [f"{s}.{k}={yaml.safe_dump(v, default_flow_style=True).strip()}"
       for s in sys.argv[1].split(",") for k, v in base[s].items() if k not in skip]
print(" ".join(f"--set {o}" for o in out).replace("\n", ""))
PY
}
MODEL=$(sets model,train)
DATA=$(sets data)

# 2. speed at the main job's sizes (h = 2, 4, 8), then at the small preset, batch 64
timeout 150 "$PY" -m bench.speed --preset tiny $MODEL --spans 32 --heads 2,4,8 \
    --variants talking-heads --amp --graphs --repeats 5 > "$OUT/speed_mainjob.md" 2>&1
timeout 150 "$PY" -m bench.speed --preset small --set train.batch_size=64 --spans 1024 \
    --heads 8 --variants talking-heads --amp --graphs --repeats 3 > "$OUT/speed_small.md" 2>&1

# 3. packing: the main job's trials at 600 steps, 1 alone then 8 at once, eager and captured
TRIALS="fixed:2 fixed:4 fixed:8 talking-heads:2 talking-heads:4 talking-heads:8 fixed:8
        talking-heads:8"
pack() {  # $1: label, $2: trials at once, $3: train.compile
    local dir=/tmp/pack/$1 n=0 start
    rm -rf "$dir" && mkdir -p "$dir" && start=$(date +%s.%N)
    for t in $TRIALS; do
        [ "$n" -ge "$2" ] && break
        timeout 150 "$PY" -m bench.train --no-progress --variant "${t%%:*}" \
            --set "model.n_heads=${t##*:}" $MODEL $DATA --set train.steps=600 \
            --set train.eval_every=600 --set train.compile="$3" --set train.seed=$n \
            --out "$dir/$n" > "$dir/$n.log" 2>&1 &
        n=$((n + 1))
    done
    wait
    "$PY" - "$1" "$dir" "$start" "$(date +%s.%N)" <<'PY' >> "$OUT/packing.md"
import json, sys
from pathlib import Path
label, d, start, end = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
done = [json.loads(p.read_text()) for p in sorted(d.glob("*/result.json"))]
tokens = sum(r["tokens"] for r in done)
each = ", ".join(f"{r['tokens_per_s']:,.0f}" for r in done)
print(f"| {label} | {len(done)} | {end - start:.1f} | {tokens / (end - start):,.0f} | {each} |")
PY
}
{ echo "| run | trials finished | wall s | aggregate tokens/s | each trial's tokens/s (steps) |"
  echo "| --- | --- | --- | --- | --- |"; } > "$OUT/packing.md"
pack eager-1 1 false
pack eager-8 8 false
pack graphs-1 1 graphs
pack graphs-8 8 graphs
tail -n 8 "$OUT"/*.md "$OUT/cuda_tests.txt"
