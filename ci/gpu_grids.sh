#!/usr/bin/env bash
# The main job and the shipped grids on one lent GPU (issues 58 and 65), as one command that
# cannot waste its run whatever limit the call gives it, rehearsed on a CPU in CI. From the root
# of the copy the device tool makes, with carry/ brought along (made here first: python -m
# ci.bundle --python 3.12 --out carry, then python -m ci.carry; docs/tracking.md gives the call):
#     [LIMIT=S] [REHEARSE=1] bash ci/gpu_grids.sh [GRID ...]
# GRID: a grid of ablations/ by name (its `name:`), or a grid file (default:
#   heads_grid, the main job, alone); the first runs right after the checks it needs, the
#   others after it and the CUDA tests, each only where time is left.
# LIMIT: the whole command's seconds, from the call (its timeout_s less a minute, less where
#   little device time is left; default 420, within any 600 s call). GRACE: from a grid's
#   deadline (or a SIGTERM) to its kill, its time to write its partial report (default 60; at
#   least 30). PACK_S: kept for the last packing (default 30). GRID_S: a grid's deadline at
#   most (default: the time left; 90 s in a rehearsal).
# REHEARSE=1: the run rehearsed on a CPU (tests/test_gpu_script.py): what needs CUDA is skipped
#   (CUDA reachable, MPS, the CUDA tests, the captured step, each trial on the GPU), the rest
#   runs as on the GPU, the grids at a small size (20 steps a trial), and every file says it is
#   a rehearsal: never a GPU result.
# 1. The checks the main job cannot run without, stopping the run at the first that fails, with
#    its reason: the bundle unpacked (Python's tarfile: no xz binary needed) and its guard (a
#    rehearsal without a bundle uses this Python's packages); the versions and every module
#    bench.run imports, CUDA reachable (120 s: a cold machine's filesystem); one smoke trial
#    on cuda through Ray with its step captured, its report included (200 s). MPS (pipe and
#    log folders set here, as ci/gpu_check.sh sets them) must serve a CUDA client where the
#    machine has it, else a warning: its daemon is stopped (killed where `quit` hangs), CUDA
#    clients are pointed at an empty pipe folder, the grids run without it
#    (ATTNBENCH_MPS=off), slower, and compare.md says so.
# 2. The main job (the first grid), then the CUDA tests, then the other grids, each with its
#    own deadline (the time left less GRACE and PACK_S, at most GRID_S; under a minute and
#    GRID_S, not started): at it the sweep gets SIGINT (to the driver alone), stops as Ctrl-C
#    stops it and writes its runs.csv, findings and partial.md; GRACE seconds later it is
#    killed, and what is left of its process group after it. Trials run on the GPU or fail
#    (`bench.provenance.device`), and every trial's config.json must name the GPU, else the run
#    stops there. heads_grid captures its step (train.compile=graphs); the span grids' learned
#    spans trim their windows, which a graph cannot hold: eager.
# 3. $OUT holds the command log (commands.md: each step, its exit status and wall time, a
#    failure's last lines) and machine.txt after every step, and after the smoke sweep, after
#    each look's report of a grid (a look's report is written before the next look starts),
#    after each grid and at the end whatever failed, compare.md (ci/compare.py) and
#    results.tar.xz (ci/pack.py: results, logs and the MLflow store, without checkpoints,
#    MLflow's artifact copies and Ray's folders), at most 8 files, each written whole and
#    renamed, one packing at a time (a lock): a kill at any moment, SIGKILL included, leaves
#    what was done, a grid's last finished look's report among it. On SIGTERM (or Ctrl-C) the
#    running step and all it started are ended first: a grid's sweep as at its deadline, GRACE
#    seconds to write its partial report. MPS is stopped at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
bad() { echo "error: $*" >&2; exit 2; }
REHEARSE=${REHEARSE:-0}
[[ $REHEARSE =~ ^[01]$ ]] || bad "REHEARSE=$REHEARSE: expected 1 (a rehearsal on a CPU) or 0"
LIMIT=${LIMIT:-420}
GRACE=${GRACE:-60}
PACK_S=${PACK_S:-30}
GRID_S=${GRID_S:-$( ((REHEARSE)) && echo 90 || echo "$LIMIT")}
for knob in LIMIT GRACE PACK_S GRID_S; do
    [[ ${!knob} =~ ^[0-9]+$ ]] || bad "$knob=${!knob}: expected whole seconds"
done
[ "$GRACE" -ge 30 ] || bad "GRACE=$GRACE: expected at least 30 s (a sweep's partial report)"
PY=${PYTHON:-python3}
CARRY=${CARRY:-carry}
BUNDLE=$CARRY/attnbench-py3.12.tar.xz
OUT=${OUT:-results/gpu}
WORK=${WORK:-/tmp/attnbench-gpu}
SITE=${SITE:-/tmp/attnbench-site}  # the bundle, unpacked
[ $# -gt 0 ] || set -- heads_grid
GRIDS=() FILES=()
for arg; do
    file=$arg
    [[ $arg == *.yaml ]] || file=$(grep -lxF "name: $arg" ablations/*.yaml | head -n 1)
    [ -f "$file" ] || bad "grid $arg: no such file, and no grid of ablations/ named $arg" \
        "(expected a grid of ablations/ by name, or a file)"
    name=$(sed -n 's/^name: *\([A-Za-z0-9_.-]*\) *$/\1/p' "$file" | head -n 1)
    [ -n "$name" ] || bad "$file: expected a line 'name: NAME' (letters, digits, '.', '_', '-')"
    GRIDS+=("$name") FILES+=("$file")
done
rm -rf "$WORK" && mkdir -p "$WORK/results" "$WORK/logs" "$OUT" ||
    bad "WORK=$WORK, OUT=$OUT: expected folders this script can write"
export PYTHONUNBUFFERED=1 PYTHONPATH=$SITE:$PWD
# MPS's folders where this script writes (NVIDIA's defaults failed on an H100), its pipes outside
# $WORK (the archive): the environment's pipe folder where it names one
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/attnbench-mps}
export CUDA_MPS_LOG_DIRECTORY=$WORK/logs/mps
CMDS=$WORK/commands.md MACHINE=$WORK/machine.txt COMPARE=$WORK/compare.md
MODE="on the GPU"
((REHEARSE)) && MODE="a rehearsal on the CPU (REHEARSE=1): what needs CUDA skipped, no GPU result"
echo "# ci/gpu_grids.sh ${GRIDS[*]}, $MODE, LIMIT=$LIMIT s: each step, its exit status and" \
    "wall time" > "$CMDS"
NOTES=()  # what compare.md says first (MPS not used)
CHILD=""  # the running step's process group
SWEEP=""  # set while that step is a grid's sweep (SIGTERM then gives it GRACE)
WATCH=""  # the packing after each look's report, while a grid runs

left() { echo $((LIMIT - PACK_S - $(date +%s) + START)); }
within() { local l; l=$(left); echo $((l < $1 ? l : $1)); }  # SECONDS, or the time left

# keep: the command log and the machine into $OUT as they stand, each written whole and renamed
keep() {
    local f
    for f in "$CMDS" "$MACHINE"; do
        [ ! -f "$f" ] || { cp "$f" "$OUT/.${f##*/}.part" &&
                           mv -f "$OUT/.${f##*/}.part" "$OUT/${f##*/}"; }
    done
}

# run NAME "TIMEOUT OPTIONS" COMMAND...: under timeout in its own process group (so that a
# SIGTERM here ends it and all it started), its stdin as given (a heredoc), its output in
# logs/NAME.log, a line in commands.md (and its last lines where it failed); returns its status
run() {
    local name=$1 limits=$2 t0 rc wall
    shift 2
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086  # the options are words
    setsid timeout $limits "$@" 0<&0 > "$WORK/logs/$name.log" 2>&1 &
    CHILD=$!
    wait "$CHILD"
    rc=$?
    [ -z "$SWEEP" ] || kill -KILL -- -"$CHILD" 2> /dev/null  # what the sweep left running
    CHILD=""
    wall=$(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}")
    echo "- $name: \`$(echo "$*" | tr '\n' ' ' | cut -c1-200)\`: exit $rc, $wall s" >> "$CMDS"
    if [ "$rc" -ne 0 ]; then
        { echo '  ```'; tail -n 25 "$WORK/logs/$name.log" | sed 's/^/  /'; echo '  ```'; } \
            >> "$CMDS"
    fi
    keep
    return "$rc"
}

# check NAME SECONDS COMMAND...: a check, given SECONDS but never past the time left; its
# failure stops the run with its reason
check() {
    local name=$1 limit
    limit=$(within "$2")
    shift 2
    if [ "$limit" -lt 5 ]; then
        echo "STOPPED before the check $name: $(left) s left of LIMIT=$LIMIT" >> "$CMDS"
        exit 1
    fi
    run "$name" "-k 10 $limit" "$@" ||
        { echo "STOPPED at the check $name (above; it had $limit s)" >> "$CMDS"; exit 1; }
}

skip() { echo "- $1: skipped, $2" >> "$CMDS"; keep; }

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

# pack: compare.md and the archive into $OUT (after the smoke sweep, each grid, and at the end)
# (one at a time: `watch` packs while a grid runs; the lock's file is left out of the archive)
pack() {
    local flags=()
    ((REHEARSE)) && flags+=(--rehearsal)
    for note in "${NOTES[@]}"; do flags+=(--note "$note"); done
    {
        flock -w 150 9 || { echo "- pack: the lock was not free in 150 s" >> "$CMDS"; return; }
        timeout 60 "$PY" -m ci.compare "$WORK" "${GRIDS[@]}" "${flags[@]}" > "$COMPARE" \
            2> "$WORK/logs/compare.log" || echo "- compare: failed (logs/compare.log)" >> "$CMDS"
        timeout 120 "$PY" -m ci.pack "$WORK" "$OUT" "$COMPARE" "$CMDS" "$MACHINE" \
            > "$WORK/logs/pack.log" 2>&1 || echo "- pack: failed (logs/pack.log)" >> "$CMDS"
        keep
    } 9> "$WORK/pack.lock"
}

# watch LOG: while a grid runs, a pack once each look's report is written, which its log says
# by naming the next look; ends with the script (gone, or a zombie its caller has not reaped:
# a SIGKILLed script's watcher must not live on, holding the caller's pipes)
watch() {
    local seen=1 looks
    while [ -r "/proc/$$/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$$/status"; do
        sleep 2
        looks=$(grep -c ": look [0-9]* of [0-9]*, seeds " "$1" 2> /dev/null)
        if [ "${looks:-0}" -gt "$seen" ]; then
            echo "  (packing the report of look $seen)" >> "$CMDS"
            seen=$looks
            pack
        fi
    done
}

stop_mps() {  # NVIDIA's MPS daemon, where it runs: killed where `quit` hangs
    [ -e "$CUDA_MPS_PIPE_DIRECTORY/control" ] || return 0
    if echo quit | timeout 20 nvidia-cuda-mps-control; then
        echo "- mps: stopped" >> "$CMDS"
    else
        kill -KILL $(pgrep -f '(^|/)nvidia-cuda-mps-(control|server)( |$)') 2> /dev/null
        echo "- mps: \`quit\` failed or hung 20 s: its daemon killed" >> "$CMDS"
    fi
}

no_mps() {  # MPS failed its check: its daemon stopped, CUDA clients kept from its pipes
    stop_mps
    CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d)  # an empty folder: no daemon answers there
    export CUDA_MPS_PIPE_DIRECTORY ATTNBENCH_MPS=off
}

# on SIGTERM (the call's limit) or Ctrl-C: the running step and all it started ended, then exit
stopped() {  # $1: the signal, $2: the exit status it gives
    local waits=5 i
    echo "- stopped by SIG$1 after $(($(date +%s) - START)) s" >> "$CMDS"
    [ -z "$WATCH" ] || kill "$WATCH" 2> /dev/null
    if [ -n "$CHILD" ] && [ -n "$SWEEP" ]; then  # a grid: as at its deadline, to the driver alone
        kill -TERM "$CHILD" 2> /dev/null  # (timeout hands it on, and kills GRACE s later)
        waits=$((GRACE + 5))
    elif [ -n "$CHILD" ]; then
        kill -TERM -- -"$CHILD" 2> /dev/null
    fi
    if [ -n "$CHILD" ]; then
        for ((i = 0; i < waits; i++)); do kill -0 "$CHILD" 2> /dev/null && sleep 1; done
        kill -KILL -- -"$CHILD" 2> /dev/null
    fi
    exit "$2"
}

finish() {
    trap '' TERM INT  # the last packing goes on (a SIGKILL ends it: $OUT holds the one before)
    stop_mps
    echo "- total: $(($(date +%s) - START)) s of LIMIT=$LIMIT" >> "$CMDS"
    pack
    cat "$CMDS"
}
trap finish EXIT
trap 'stopped TERM 143' TERM
trap 'stopped INT 130' INT

# 1. the checks
[ -n "${ATTNBENCH_GIT_COMMIT:-}" ] || [ ! -f "$CARRY/commit" ] ||
    export ATTNBENCH_GIT_COMMIT="$(cat "$CARRY/commit")"  # no .git here: the copy's commit
{ echo "run: $MODE, LIMIT=$LIMIT s"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores," \
      "$(free -g | awk '/Mem/ {print $2}') GB"
  echo "commit: ${ATTNBENCH_GIT_COMMIT:-unknown}"
  echo "carried: $(du -sm --exclude=.git --exclude=.venv . | cut -f1) MiB (the device tool's" \
      "limit: 64 MiB)"
} > "$MACHINE" 2>&1
keep
if [ -f "$BUNDLE" ]; then
    check unpack 60 "$PY" -c 'import shutil, sys, tarfile
shutil.rmtree(sys.argv[2], ignore_errors=True)
tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' "$BUNDLE" "$SITE"
    check guard 20 "$PY" -c "import attnbench_bundle"  # built for another Python: it names both
elif ((REHEARSE)); then
    skip "unpack, guard" "no $BUNDLE: this Python's own packages are used"
else
    echo "STOPPED: no $BUNDLE (python -m ci.bundle --python 3.12 --out carry, then python -m" \
        "ci.carry, where the copy is made; carry=[\"carry\"] in the call)" >> "$CMDS"
    exit 1
fi
check imports 120 "$PY" - "$WORK" "$REHEARSE" <<'PY'
import importlib, sys
import torch
for m in ("ray", "ray.tune", "ray.tune.schedulers", "mlflow", "fvcore.nn", "pandas",
          "matplotlib", "seaborn", "bench.run", "bench.report",
          "bench.sweep.runner", "bench.findings.presentation.render",
          "bench.findings.presentation.figures"):
    importlib.import_module(m)
from bench import provenance
from bench.tracking import store
print("python", sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda)
print(provenance.versions(), "commit", provenance.git_commit())
store.open_store(f"sqlite:///{sys.argv[1]}/probe.db")  # MLflow's sqlite store, migrated
if sys.argv[2] == "1":
    print("CUDA: not checked (a rehearsal)")
else:
    assert torch.cuda.is_available(), "torch finds no CUDA device"
    print(torch.cuda.get_device_name(0))
PY
cat "$WORK/logs/imports.log" >> "$MACHINE"
if ((REHEARSE)); then
    skip "mps, cuda-tests" "they need CUDA"
else
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if [ "$(within 60)" -lt 5 ] || ! run mps "-k 10 $(within 60)" "$PY" -c 'import shutil
from bench.sweep.gpus import start_mps
said = start_mps(8)
print(said)
assert said.startswith("MPS used") or not shutil.which("nvidia-cuda-mps-control"), said'; then
        NOTES+=("MPS failed its check (commands.md, logs/mps.log): the grids ran without it \
(ATTNBENCH_MPS=off), their trials sharing the GPU time-sliced, slower")
        echo "- WARNING: ${NOTES[-1]}" >> "$CMDS"
        no_mps
    fi
fi
SMOKE=(--set model.variant=talking-heads  # one trial: Ray, CUDA, MPS and the captured step
       --set train.optimizer=adamw --set train.clip_mode=global)
((REHEARSE)) || SMOKE+=(--set train.device=cuda --set train.compile=graphs)
check smoke 200 "$PY" -m bench.run examples/smoke.yaml --results-dir "$WORK/smoke" "${SMOKE[@]}"
if ! ((REHEARSE)); then
    ! grep -q "running eagerly" "$WORK/logs/smoke.log" ||
        { echo "STOPPED: the smoke sweep's step was not captured (logs/smoke.log)" >> "$CMDS"
          exit 1; }
    on_gpu smoke "$WORK/smoke/smoke"
fi
pack

# 2. the main job, then the CUDA tests and the other grids, each only where time is left
FAILED=0
SMALL=(--set train.steps=20 --set train.warmup=5 --set train.eval_every=10
       --set train.checkpoint_every=10 --set train.eval_tokens=1000)  # a rehearsal's size

run_grid() {  # $1: the grid's index in GRIDS, run with its own deadline
    local grid=${GRIDS[$1]} budget args corpus rc
    budget=$(($(left) - GRACE))
    [ "$budget" -le "$GRID_S" ] || budget=$GRID_S
    if [ "$budget" -lt 60 ] && [ "$budget" -lt "$GRID_S" ]; then  # too short to finish a trial
        echo "- $grid: not run, $(left) s left" >> "$CMDS"
        keep
        return
    fi
    args=("${FILES[$1]}" --results-dir "$WORK/results")
    if ((REHEARSE)); then
        args+=("${SMALL[@]}")
    elif [ "$grid" = heads_grid ]; then
        args+=(--set train.compile=graphs)
    fi
    corpus=../shared/data/enwik8.head  # where span_enwik8_floor reads it; carried as .xz
    if grep -q "$corpus" "${FILES[$1]}" && [ ! -f "$corpus" ]; then
        mkdir -p ../shared/data 2> /dev/null || { corpus=$WORK/enwik8.head
                                                  args+=(--set data.path="$corpus"); }
        "$PY" -c 'import lzma, shutil, sys
shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
            "$CARRY/shared/data/enwik8.head.xz" "$corpus"
    fi
    SWEEP=1
    watch "$WORK/logs/$grid.log" < /dev/null > /dev/null 2>&1 &
    WATCH=$!
    run "$grid" "--foreground -s INT -k $GRACE $budget" "$PY" -m bench.run "${args[@]}"
    rc=$?
    kill "$WATCH" 2> /dev/null
    WATCH="" SWEEP=""
    case $rc in
        0) ;;
        124) echo "  (cut at its deadline, $budget s: its report is marked partial)" >> "$CMDS" ;;
        137) echo "  (cut at its deadline, $budget s, and killed GRACE=$GRACE s later: its" \
                 "report may be incomplete)" >> "$CMDS" ;;
        *) FAILED=1 ;;
    esac
    ((REHEARSE)) || on_gpu "$grid" "$WORK/results/$grid"
    pack
}

run_grid 0
if ! ((REHEARSE)); then
    if [ "$(within 120)" -lt 60 ]; then
        skip cuda-tests "$(left) s left"
    elif "$PY" -m pytest --version > /dev/null 2>&1; then
        run cuda-tests "-k 10 $(within 120)" "$PY" -m pytest -o addopts="" -q -x \
            -p no:cacheprovider tests/test_variants.py tests/test_train.py tests/test_onto.py \
            -k "cuda or captured" || FAILED=1
    else
        skip cuda-tests "no pytest in this image"
    fi
fi
for ((i = 1; i < ${#GRIDS[@]}; i++)); do
    run_grid "$i"
done
exit "$FAILED"
