#!/usr/bin/env bash
# The GPU checks (issue "Grids on a GPU as their users run them"), one run of at most 8 minutes on
# one CUDA GPU, from the repository root:
#     bash ci/gpu_check.sh OUT_DIR            (default: $OUT, else results/speed/gpu)
# 1. the CUDA tests (CUDA = CPU layers; the captured step replays the eager step; a captured
#    run's losses against the eager run's);
# 2. a main-job trial (bench.train, the main job's settings, 1000 steps) alone, eager and with its
#    step captured as one CUDA graph (train.compile=graphs): tokens/s;
# 3. bench.speed at the main job's sizes, fp32 and bf16, eager and captured;
# 4. eight main-job trials at once on the GPU (the 6 settings and 2 more seeds), eager and
#    captured, then the same under NVIDIA's MPS where the machine has it: each trial's tokens/s,
#    their sum, and every token over the wall time (startup and evaluation included);
# 5. bench.speed at the small preset, batch 64, fp32 against bf16 (S 256, then 512).
# Each writes under OUT_DIR: machine.txt, cuda_tests.txt, trials.md, speed_mainjob.md,
# speed_small.md, log.txt (what failed, with its last lines). Where the one-run commands'
# packages (pydantic, fvcore, ...) are missing, as on this project's GPU machines, carry the
# offline bundle (python -m ci.bundle --python 3.12 --out carry, where pip reaches PyPI): BUNDLE
# (default carry/attnbench-py3.12.tar.xz) is unpacked into /tmp/attnbench-site with Python's
# tarfile (no xz binary needed) and put on the path.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-${OUT:-results/speed/gpu}}
PY=${PYTHON:-python3}
STEPS=${STEPS:-1000}
TRIAL_S=120  # each trial process at most
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
BUNDLE=${BUNDLE:-carry/attnbench-py3.12.tar.xz}
if [ -f "$BUNDLE" ]; then
    "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
        "$BUNDLE" /tmp/attnbench-site && export PYTHONPATH=/tmp/attnbench-site:$PWD
    "$PY" -c "import attnbench_bundle" || exit 2  # built for another Python: it says which
fi
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
  echo "$(nproc) CPU cores"; } > "$OUT/machine.txt" 2>&1
log() { echo "== $1 (exit $2)" >> "$OUT/log.txt"; tail -n 15 "$3" >> "$OUT/log.txt"; }

# 1. the CUDA tests
timeout 150 "$PY" -m pytest -o addopts="" -q -rs -p no:cacheprovider -p no:warnings \
    tests/test_variants.py tests/test_train.py -k "cuda or captured" > "$OUT/cuda_tests.txt" 2>&1

# the main job's settings (ablations/heads_grid.yaml's base, but its lengths) as --set options
mapfile -t MAINJOB < <("$PY" - <<'PY'
import yaml
base = yaml.safe_load(open("ablations/heads_grid.yaml"))["base"]
skip = {"train.steps", "train.eval_every", "train.checkpoint_every", "train.eval_tokens"}
def flat(d, pre):
    for k, v in d.items():
        yield from flat(v, f"{pre}{k}.") if isinstance(v, dict) else [(f"{pre}{k}", v)]
for key, v in (kv for s in ("model", "data", "train") for kv in flat(base[s], s + ".")):
    if key not in skip:
        print("--set")
        print(f"{key}={v}")
PY
)

# 2 and 4. main-job trials: $2 at once, train.compile=$3
TRIALS=(fixed:2 fixed:4 fixed:8 talking-heads:2 talking-heads:4 talking-heads:8 fixed:8
        talking-heads:8)
trials() {  # $1: label, $2: trials at once, $3: train.compile
    local dir=/tmp/trials/$1 start end n
    rm -rf "$dir" && mkdir -p "$dir" && start=$(date +%s.%N)
    for ((n = 0; n < $2; n++)); do
        local t=${TRIALS[$n]}
        timeout "$TRIAL_S" "$PY" -m bench.train --no-progress --preset tiny --variant "${t%%:*}" \
            --set "model.n_heads=${t##*:}" "${MAINJOB[@]}" --set train.steps="$STEPS" \
            --set train.eval_every="$STEPS" --set train.eval_tokens=4000 \
            --set train.compile="$3" --set train.seed=$n --out "$dir/$n" > "$dir/$n.log" 2>&1 &
    done
    wait
    end=$(date +%s.%N)
    for ((n = 0; n < $2; n++)); do
        [ -f "$dir/$n/result.json" ] || log "$1 trial $n" failed "$dir/$n.log"
    done
    "$PY" - "$1" "$dir" "$start" "$end" <<'PY' >> "$OUT/trials.md"
import json, sys
from pathlib import Path
label, d, start, end = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
done = [json.loads(p.read_text()) for p in sorted(d.glob("*/result.json"))]
precision = json.loads((d / "0" / "config.json").read_text())["precision"] if done else "-"
each = [r["tokens_per_s"] for r in done]
wall = sum(r["tokens"] for r in done) / (end - start)
print(f"| {label} | {len(done)} | {precision} | {end - start:.1f} "
      f"| {sum(each):,.0f} | {wall:,.0f} | {', '.join(f'{e:,.0f}' for e in each)} |")
PY
}
{ echo "$STEPS steps of the main job's trials (bench.train), each trial's tokens/s over its"
  echo "training steps; 'sum' adds them (the trials overlap), 'wall' is every token over the"
  echo "wall time of the whole batch, startup, capture and evaluation included."
  echo
  echo "| run | trials | precision | wall s | sum tokens/s | wall tokens/s | each trial |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"; } > "$OUT/trials.md"
trials eager-1 1 false
trials graphs-1 1 graphs

# 3. bench.speed at the main job's sizes
timeout 150 "$PY" -m bench.speed --preset tiny "${MAINJOB[@]}" --spans 32 --heads 4 \
    --variants talking-heads --amp --graphs --repeats 10 > "$OUT/speed_mainjob.md" 2>&1 ||
    log speed_mainjob $? "$OUT/speed_mainjob.md"

trials eager-8 8 false
trials graphs-8 8 graphs

# 5. the small preset at batch 64: fp32 against bf16 (at S 1024 its activations outgrow 80 GB)
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
for S in 256 512; do
    timeout 120 "$PY" -m bench.speed --preset small --set train.batch_size=64 --spans $S \
        --heads 8 --variants fixed --amp --repeats 3 >> "$OUT/speed_small.md" 2>&1 ||
        log "speed_small S=$S" $? "$OUT/speed_small.md"
done

# 4 under MPS, where the machine has it
if command -v nvidia-cuda-mps-control > /dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
    mkdir -p /tmp/mps /tmp/mps-log
    if nvidia-cuda-mps-control -d; then
        TRIAL_S=90
        trials eager-8-mps 8 false
        trials graphs-8-mps 8 graphs
        echo quit | nvidia-cuda-mps-control
    fi
else
    echo "(no nvidia-cuda-mps-control on this machine: MPS not measured)" >> "$OUT/trials.md"
fi
tail -n 12 "$OUT/trials.md" "$OUT/cuda_tests.txt"
