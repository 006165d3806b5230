python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --target /tmp/site .whl/* && export PYTHONPATH=/tmp/site:$PWD
M="--no-progress --preset tiny --set model.d_model=32 --set model.n_layers=2 --set model.d_ff=128 --set model.span=32 --set model.attn.width=8 --set data.n_chars=2000000 --set data.p_copy=0 --set data.recall.rate=0.9 --set data.recall.keys=36 --set data.recall.stored=8 --set data.recall.values=2 --set data.recall.queries=12 --set train.block=64 --set train.batch_size=16 --set train.warmup=50 --set train.optimizer=adamw --set train.lr=0.003 --set train.clip_mode=global --set train.clip=1.0 --set train.steps=2500 --set train.eval_every=2500 --set train.eval_tokens=4000 --set train.compile=graphs"
T() { timeout 100 python3 -m bench.train --variant ${1%%:*} --set model.n_heads=${1##*:} $M --set train.seed=$2 --out /tmp/r/$3/$2 > /tmp/r/$3-$2.log 2>&1; }
mkdir -p /tmp/r /tmp/mps /tmp/mpsl
for t in fixed:2 talking-heads:8; do T $t 0 alone-$t; done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpsl
nvidia-cuda-mps-control -d; s=$(date +%s.%N); i=0
for t in fixed:2 fixed:4 fixed:8 talking-heads:2 talking-heads:4 talking-heads:8 fixed:8 talking-heads:8; do T $t $i mps8 & i=$((i+1)); done
wait; e=$(date +%s.%N); echo quit | nvidia-cuda-mps-control
tail -n 3 /tmp/r/*.log > $OUT/logs.txt
python3 - $s $e <<'P' | tee $OUT/trials_2500.md
import json, sys
from pathlib import Path
s, e = map(float, sys.argv[1:])
def row(label, paths):
    rs = [json.loads(p.read_text()) for p in paths]
    c = [json.loads((p.parent / "config.json").read_text())["config"]["model"] for p in paths]
    each = ", ".join(f"{m['variant']}:{m['n_heads']} {r['tokens_per_s']:,.0f}" for m, r in zip(c, rs))
    tot = sum(r["tokens_per_s"] for r in rs)
    print(f"| {label} | {len(rs)} | {tot:,.0f} | {each} |")
    return rs
print("| run | trials | sum tokens/s | each trial's tokens/s |\n| --- | --- | --- | --- |")
for t in ("fixed:2", "talking-heads:8"):
    row(f"graphs alone {t}", sorted(Path(f"/tmp/r/alone-{t}").glob("*/result.json")))
rs = row("graphs, 8 at once, MPS", sorted(Path("/tmp/r/mps8").glob("*/result.json")))
print(f"\n8 at once under MPS: {len(rs)} trials, wall {e - s:.1f} s, every token over the wall: {sum(r['tokens'] for r in rs) / (e - s):,.0f} tokens/s")
P
