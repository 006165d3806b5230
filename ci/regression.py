"""Small-scale bpc regression: tiny models of the main variants trained deterministically for a
fixed number of steps; dev bpc must not exceed its committed baseline by more than a tolerance
derived from the spread over seeds.

python -m ci.regression            # check against results/baselines/regression.json
python -m ci.regression --update   # re-measure (3 seeds) and rewrite the baselines
"""

import argparse
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

from bench import provenance
from bench.config import drop_untaken, parse_sets, resolve
from bench.training.loop import train

ROOT = provenance.ROOT
BASELINES = provenance.RESULTS / "baselines" / "regression.json"
SHARED = ROOT.parent / "shared" / "data"
VARIANTS = ("fixed", "adaptive", "dynamic-span", "talking-heads", "gbma")
MODEL = ["model.d_model=64", "model.n_layers=2", "model.n_heads=4", "model.d_ff=256",
         "model.span=64", "model.attn.ramp=16", "train.block=64", "train.batch_size=8",
         "train.steps=150", "train.eval_every=150", "train.warmup=10", "train.eval_tokens=20000",
         "train.amp=false"]  # fp32: CI means the same on every machine
DATA = {"enwik8": ["data.name=enwik8", f"data.path={SHARED / 'enwik8.head'}"],
        "synthetic": ["data.name=synthetic", "data.n_chars=200000"]}
METHOD = ("Each case is trained with seeds 0, 1, 2 (CPU, deterministic). The baseline is seed 0's"
          " dev bpc over the first eval_tokens dev characters; CI reruns seed 0. tolerance = "
          "max(3 x sample std over the seeds, 0.02 bpc): a change that moves a variant's dev bpc"
          " up by more than three seed-standard-deviations fails; a drop below that is reported"
          " but passes (update the baselines).")


def datasets() -> list[str]:
    if (SHARED / "enwik8.head").exists():
        return list(DATA)
    print(f"note: {SHARED} absent, skipping the enwik8 prefix cases", file=sys.stderr)
    return ["synthetic"]


def measure(variant: str, data: str, seed: int) -> float:
    """Dev bpc (on the first eval_tokens characters) of one deterministic tiny run."""
    tree = parse_sets([*MODEL, *DATA[data], f"model.variant={variant}", f"train.seed={seed}"])
    drop_untaken(tree, "tiny")  # the ramp is the learned spans'
    cfg = resolve(tree)
    with tempfile.TemporaryDirectory() as out:
        r = train(cfg, Path(out), progress=False)
    return r.history[-1]["dev_bpc"]


def check(baselines: dict, cases: list[tuple[str, str]]) -> pd.DataFrame:
    """One row per case: baseline, now, delta, tolerance, status (ok / REGRESSED / improved)."""
    rows = []
    for variant, data in cases:
        base = baselines["cases"][f"{variant}/{data}"]
        now = measure(variant, data, seed=0)
        delta = now - base["bpc"]
        status = ("REGRESSED" if delta > base["tolerance"] else
                  "improved" if delta < -base["tolerance"] else "ok")
        rows.append({"variant": variant, "data": data, "baseline": base["bpc"], "now": now,
                     "delta": delta, "tolerance": base["tolerance"], "status": status})
    return pd.DataFrame(rows)


def update(cases: list[tuple[str, str]], seeds: int) -> dict:
    out = {"commit": provenance.git_commit(), "date": datetime.date.today().isoformat(),
           "method": METHOD, "config": MODEL, "versions": provenance.versions(), "cases": {}}
    for variant, data in cases:
        runs = [measure(variant, data, s) for s in range(seeds)]
        out["cases"][f"{variant}/{data}"] = {
            "bpc": runs[0], "seeds": runs, "std": statistics.stdev(runs),
            "tolerance": max(3 * statistics.stdev(runs), 0.02)}
        print(f"{variant}/{data}: {runs}", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci.regression", description=__doc__.split("\n")[0])
    p.add_argument("--update", action="store_true", help="re-measure and rewrite the baselines")
    p.add_argument("--seeds", type=int, default=3, help="seeds measured by --update (>= 3)")
    args = p.parse_args(argv)
    cases = [(v, d) for d in datasets() for v in VARIANTS]
    if args.update:
        if args.seeds < 3:
            p.error("--seeds must be at least 3: the tolerance is derived from their spread")
        BASELINES.write_text(json.dumps(update(cases, args.seeds), indent=1) + "\n")
        print(f"wrote {BASELINES}")
        return 0
    if not BASELINES.exists():
        print(f"error: no baselines at {BASELINES}; run with --update", file=sys.stderr)
        return 2
    table = check(json.loads(BASELINES.read_text()), cases)
    print(table.to_markdown(index=False, floatfmt=".4f"))
    failed = table[table.status == "REGRESSED"]
    if len(failed):
        print(f"{len(failed)} regression(s): {', '.join(failed.variant + '/' + failed.data)}")
        return 1
    print(f"{len(table)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
