#!/usr/bin/env bash
# The main job and the shipped grids on one lent GPU (issue 58), as one command of at most
# 9 minutes that cannot waste its run. From the root of the copy the device tool makes, with
# carry/ brought along (made here first: python -m ci.bundle --python 3.12 --out carry, then
# python -m ci.carry; docs/tracking.md gives the exact `run` call):
#     bash ci/gpu_grids.sh [GRID ...]   (default: heads_grid span_limit adaptive_vs_dynamic
#                                        span_enwik8_floor, the main job and longest first)
# 1. Checks, in about a minute and a half, stopping the run at the first that fails, with its
#    reason: the bundle unpacked (Python's tarfile: no xz binary needed) and its guard; the
#    versions and every module bench.run imports, CUDA reachable; Ray sees the GPU and a
#    worker with a share of it reaches CUDA; MPS serves a CUDA client (where the machine has
#    MPS); the CUDA tests; a smoke sweep on cuda with its step captured, its report included.
# 2. The grids in order, each with its own deadline (the time left, less GRACE and PACK_S):
#    at its deadline the sweep gets SIGINT (to the driver alone), stops as Ctrl-C stops it and
#    writes its runs.csv, findings and partial.md; GRACE seconds later it is killed. Trials
#    run on the GPU or fail (`bench.provenance.device`), and every trial's config.json must name
#    the GPU, else the run stops there. heads_grid captures its step (train.compile=graphs);
#    the span grids' learned spans trim their windows, which a graph cannot hold: eager.
# 3. Always, whatever failed: compare.md (each grid's verdicts beside the CPU's committed
#    ones), then ci/pack.py packs it all into $OUT as at most 8 files: results.tar.xz (results,
#    logs and the MLflow store, without checkpoints, MLflow's artifact copies and Ray's
#    folders), compare.md, commands.md (each command, its exit status and wall time, a
#    failure's last lines) and machine.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
LIMIT=${LIMIT:-540}   # the whole command, seconds (the device tool allows 600 a call)
GRACE=${GRACE:-60}    # from a grid's SIGINT to its kill: Tune stops, its report is written
PACK_S=${PACK_S:-30}  # kept for the comparison and the packing
PY=${PYTHON:-python3}
CARRY=${CARRY:-carry}
BUNDLE=$CARRY/attnbench-py3.12.tar.xz
OUT=${OUT:-results/gpu}
WORK=${WORK:-/tmp/attnbench-gpu}
SITE=${SITE:-/tmp/attnbench-site}  # the bundle, unpacked
GRIDS=("$@")
[ ${#GRIDS[@]} -gt 0 ] || GRIDS=(heads_grid span_limit adaptive_vs_dynamic span_enwik8_floor)
rm -rf "$WORK" && mkdir -p "$WORK/results" "$WORK/logs" "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$SITE:$PWD
CMDS=$WORK/commands.md
echo "# ci/gpu_grids.sh ${GRIDS[*]}: each command, its exit status and wall time" > "$CMDS"

left() { echo $((LIMIT - PACK_S - $(date +%s) + START)); }

# run NAME "TIMEOUT OPTIONS" COMMAND...: under timeout, its output in logs/NAME.log, a line in
# commands.md (and its last lines where it failed); returns its exit status
run() {
    local name=$1 limits=$2 t0 rc wall
    shift 2
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086  # the options are words
    timeout $limits "$@" > "$WORK/logs/$name.log" 2>&1
    rc=$?
    wall=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}")
    echo "- $name: \`$(echo "$*" | tr '\n' ' ' | cut -c1-200)\`: exit $rc, $wall s" >> "$CMDS"
    if [ "$rc" -ne 0 ]; then
        { echo '  ```'; tail -n 25 "$WORK/logs/$name.log" | sed 's/^/  /'; echo '  ```'; } \
            >> "$CMDS"
    fi
    return "$rc"
}

# check NAME SECONDS COMMAND...: a check; its failure stops the run with its reason
check() {
    local name=$1 limit=$2
    shift 2
    run "$name" "-k 10 $limit" "$@" || { echo "STOPPED at the check $name (above)" >> "$CMDS"
                                          exit 1; }
}

# on_gpu NAME FOLDER: every trial under FOLDER ran on the GPU (its config.json names it)
on_gpu() {
    check "$1-on-gpu" 30 "$PY" - "$2" <<'PY'
import json, sys
from pathlib import Path
found = [json.loads(p.read_text()) for p in Path(sys.argv[1]).glob("trials/*/config.json")]
where = sorted({c.get("gpu") or f"CPU ({c.get('cpu')})" for c in found})
print(f"{len(found)} trials on: {', '.join(where)}")
sys.exit(0 if found and all(c.get("gpu") for c in found) else 1)
PY
}

finish() {
    "$PY" - "$WORK" "${GRIDS[@]}" > "$WORK/compare.md" 2>&1 <<'PY'
import sys
from pathlib import Path

import pandas as pd

work, grids = Path(sys.argv[1]), sys.argv[2:]
cpu = {"heads_grid": "results/heads_grid", "span_limit": "results/span_limit",
       "adaptive_vs_dynamic": "results/adaptive_vs_dynamic",
       "span_enwik8_floor": "results/enwik8-prefix/span_enwik8_floor"}
for g in grids:
    here = work / "results" / g
    gpu_csv, cpu_csv = here / "findings.csv", Path(cpu.get(g, "-")) / "findings.csv"
    cut = " (partial: cut at its deadline)" if (here / "partial.md").exists() else ""
    if not gpu_csv.exists() or not cpu_csv.exists():
        print(f"## {g}{cut}: no findings to compare (GPU: {gpu_csv.exists()}, CPU: "
              f"{cpu_csv.exists()})\n")
        continue
    a = pd.read_csv(cpu_csv).set_index("claim")[["verdict", "look", "effect", "p"]]
    b = pd.read_csv(gpu_csv).set_index("claim")[["verdict", "look", "effect", "p"]]
    both = a.join(b, lsuffix=" (CPU)", rsuffix=" (GPU)", how="outer")
    same = (both["verdict (CPU)"] == both["verdict (GPU)"]).sum()
    print(f"## {g}{cut}: {same} of {len(both)} decisions the same\n")
    print(both.to_markdown(floatfmt=".4g"), "\n")
PY
    [ ! -f "$WORK/logs/imports.log" ] || cat "$WORK/logs/imports.log" >> "$WORK/machine.txt"
    echo "- total: $(($(date +%s) - START)) s of $LIMIT" >> "$CMDS"
    "$PY" -m ci.pack "$WORK" "$OUT" "$WORK/compare.md" "$CMDS" "$WORK/machine.txt"
    cat "$CMDS"
}
trap finish EXIT

# 1. the checks
[ -n "${ATTNBENCH_GIT_COMMIT:-}" ] || [ ! -f "$CARRY/commit" ] ||
    export ATTNBENCH_GIT_COMMIT="$(cat "$CARRY/commit")"  # no .git here: the copy's commit
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  echo "$(nproc) CPU cores, $(free -g | awk '/Mem/ {print $2}') GB"
  echo "commit: ${ATTNBENCH_GIT_COMMIT:-unknown}"
  echo "carried: $(du -sm --exclude=.git . | cut -f1) MiB (the device tool's limit: 64 MiB)"
} > "$WORK/machine.txt" 2>&1
if [ ! -f "$BUNDLE" ]; then
    echo "STOPPED: no $BUNDLE (python -m ci.bundle --python 3.12 --out carry, then python -m" \
        "ci.carry, where the copy is made; carry=[\"carry\"] in the call)" >> "$CMDS"
    exit 1
fi
check unpack 60 "$PY" -c 'import shutil, sys, tarfile
shutil.rmtree(sys.argv[2], ignore_errors=True)
tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' "$BUNDLE" "$SITE"
check guard 20 "$PY" -c "import attnbench_bundle"  # built for another Python: it names both
check imports 60 "$PY" - "$WORK" <<'PY'
import importlib, sys
import torch
for m in ("ray", "ray.tune", "ray.tune.schedulers", "mlflow", "fvcore.nn", "pandas",
          "matplotlib", "seaborn", "bench.commands.run", "bench.commands.report",
          "bench.sweep.runner", "bench.findings.report", "bench.findings.figures"):
    importlib.import_module(m)
from bench import provenance
from bench.tracking import store
print("python", sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda)
print(provenance.versions(), "commit", provenance.git_commit())
store.open_store(f"sqlite:///{sys.argv[1]}/probe.db")  # MLflow's sqlite store, migrated
assert torch.cuda.is_available(), "torch finds no CUDA device"
print(torch.cuda.get_device_name(0))
PY
check ray-gpu 60 "$PY" - <<'PY'
import ray
from bench.sweep.workers import start_ray, stop_ray
print(start_ray(None))
try:
    gpus = ray.cluster_resources().get("GPU", 0)
    assert gpus >= 1, f"Ray sees no GPU: {ray.cluster_resources()}"

    @ray.remote(num_gpus=0.125)
    def where():
        import os, torch
        return os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.is_available()

    seen, cuda = ray.get(where.remote(), timeout=45)
    print(f"Ray: {gpus:g} GPUs; a worker with 0.125 of one sees CUDA_VISIBLE_DEVICES={seen}, "
          f"CUDA {cuda}")
    assert cuda, "a Ray worker handed a GPU share cannot reach CUDA"
finally:
    stop_ray()
PY
check mps 60 "$PY" -c 'import shutil
from bench.sweep.gpus import start_mps
said = start_mps(8)
print(said)
assert said.startswith("MPS used") or not shutil.which("nvidia-cuda-mps-control"), said'
if "$PY" -m pytest --version > /dev/null 2>&1; then
    check cuda-tests 120 "$PY" -m pytest -o addopts="" -q -x -p no:cacheprovider \
        tests/test_variants.py tests/test_train.py tests/test_onto.py -k "cuda or captured"
else
    echo "- cuda-tests: not run, no pytest in this image" >> "$CMDS"
fi
check smoke 90 "$PY" -m bench.run ablations/smoke.yaml --results-dir "$WORK/smoke" \
    --set train.device=cuda --set train.compile=graphs --set train.optimizer=adamw \
    --set train.clip_mode=global
! grep -q "running eagerly" "$WORK/logs/smoke.log" ||
    { echo "STOPPED: the smoke sweep's step was not captured (logs/smoke.log)" >> "$CMDS"; exit 1; }
on_gpu smoke "$WORK/smoke/smoke"

# 2. the grids, each with its own deadline
for grid in "${GRIDS[@]}"; do
    budget=$(($(left) - GRACE))
    if [ "$budget" -lt 60 ]; then
        echo "- $grid: not run, $(left) s left" >> "$CMDS"
        continue
    fi
    args=(ablations/"$grid".yaml --results-dir "$WORK/results")
    [ "$grid" = heads_grid ] && args+=(--set train.compile=graphs)
    corpus=../shared/data/enwik8.head  # where span_enwik8_floor reads it; carried as .xz
    if grep -q "$corpus" ablations/"$grid".yaml && [ ! -f "$corpus" ]; then
        mkdir -p ../shared/data 2> /dev/null || { corpus=$WORK/enwik8.head
                                                  args+=(--set data.path="$corpus"); }
        "$PY" -c 'import lzma, shutil, sys
shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
            "$CARRY/shared/data/enwik8.head.xz" "$corpus"
    fi
    run "$grid" "--foreground -s INT -k $GRACE $budget" "$PY" -m bench.run "${args[@]}"
    [ $? -ne 124 ] || echo "  (cut at its deadline, $budget s: its report is marked partial)" \
        >> "$CMDS"
    on_gpu "$grid" "$WORK/results/$grid"
done
