"""Write a ready grid file for one question: is variant X better than (or not worse than)
multi-head, on the main job's recall probe or on a text corpus, and (`--cheaper`) does it cost
less? The quality claim, its test, and looks sized (`bench.sweep.sizing`) to power 0.8 at q 0.9;
with `--cheaper flops|time` a cost claim after it in the same family (FLOPs per token kept by
its mask, or its training step time measured interleaved on this machine, as a ratio below
`--cost-bound`), for you to read, commit and run.

python -m bench.new window --plugin ablations/window.py --out ablations/window.yaml
python -m bench.new gbma --data enwik8 --expect not-worse --out ablations/gbma_text.yaml
python -m bench.new window --plugin ablations/window.py --expect not-worse --cheaper time

The probe's setting is the main job's (ablations/heads_grid.yaml: its model, corpus and
training) at h = 4; a text corpus gets the tiny preset and 1000 steps. Then:
python -m bench.pilot FILE (does each arm learn?), python -m bench.run FILE --dry-run (time
and power here), commit the file, python -m bench.run FILE --out results/NAME/seedsSTART
(the committed run's folder, docs/grids.md).
"""

import argparse
import math
import os
import sys
from pathlib import Path

import yaml

from bench.cli import about, add_set
from bench.config import ConfigError, merge, parse_sets
from bench.experiment.grid import Looks
from bench.experiment.open import Overrides, load_grid, open_grid
from bench.provenance import ROOT, GridText
from bench.sweep import feasible, sizing
from bench.sweep.trials import resolve_trials

MAIN_JOB = ROOT / "ablations" / "heads_grid.yaml"
FIRST = (4, 8)  # the looks the search starts from, stretched until the claim has its power
Q = 0.9  # the chance a seed lands on the claimed side the design is sized for
NOT_WORSE = {"probe": (math.log(2), "less than twice its bits per answer"),
             "text": (0.02, "at most 0.02 bpc more")}


def claim(variant: str, against: str, metric: str, expect: str, kind: str) -> dict:
    """The one claim: better (sign-flip on the mean paired difference, log scale on a probe)
    or not worse by a margin (the sign test on the median)."""
    on = "the recall probe's bits per answer" if kind == "probe" else "test bpc"
    out = {"id": f"{variant}_{'beats' if expect == 'better' else 'not_worse_than'}_{against}",
           "rows": {"model.variant": variant}, "baseline": {"model.variant": against},
           "metric": metric, "expect": "less"}
    if kind == "probe":
        out["log_offset"] = 0.005
    if expect == "better":
        return out | {"test": "sign-flip", "text": f"{variant} is better than {against} on "
                      f"{on}: the sign-flip test rejects no difference, one-sided"}
    margin, words = NOT_WORSE[kind]
    return out | {"test": "sign", "margin": round(margin, 3), "text": (
        f"{variant} is not worse than {against} on {on}: in the typical seed {words}: the "
        "sign test rejects the margin or more, one-sided")}


CHEAPER = {"flops": ("flops_kept", "fewer_flops", "keeps fewer FLOPs per token than {against}: "
                     "#FLOPS at the distances its mask keeps, as a ratio"),
           "time": ("step_time", "faster", "trains faster than {against} on this machine: its "
                    "training step time, measured interleaved with {against}'s, as a ratio")}


def cost_claim(variant: str, against: str, cheaper: str, bound: float) -> dict:
    """The cost claim after the quality claim: the ratio rows / baseline of `cheaper`'s cost
    below `bound` (docs/claims.md, Cost claims: FLOPs by construction where the mask is fixed,
    per seed where spans are learned; a time from the interleaved repetitions)."""
    metric, word, text = CHEAPER[cheaper]
    return {"id": f"{variant}_{word}_than_{against}", "type": "cost",
            "rows": {"model.variant": variant}, "baseline": {"model.variant": against},
            "metric": metric, "expect": "less", "margin": bound,
            "text": f"{variant} {text.format(against=against)} below {bound:g}"}


def sized(grid: dict) -> list[int]:
    """The fewest looks, FIRST stretched, whose quality claim (the first) has power 0.8 at
    q = Q: a cost claim needs no seeds where it is measured or fixed by construction."""
    parsed = load_grid(GridText(yaml.safe_dump(grid), "new grid", ROOT))
    looks = FIRST
    for n in range(FIRST[-1], sizing.MOST + 1):
        looks = sizing.stretched(FIRST, n)
        seeds = Looks(looks=list(looks), start=grid["seeds"]["start"], futility=0.5)
        rates = feasible.rates(parsed.claims, parsed.grid, seeds, (Q,))
        if rates[f"power q {Q:g}"].iloc[0] >= sizing.TARGET:
            break
    return list(looks)


def grid_file(args: argparse.Namespace) -> dict:
    """The grid as YAML data (module doc)."""
    kind = "text" if args.data else "probe"
    if kind == "probe":
        base = load_grid(MAIN_JOB).base.model_dump(mode="json", exclude_unset=True)
        base["model"]["n_heads"] = 4
        metric = f"test_probe_bpc.{args.probe}"
    else:
        base = {"preset": "tiny", "data": {"name": args.data},
                "train": {"steps": 1000, "eval_every": 250, "checkpoint_every": 500}}
        metric = "final_test_bpc"
    grid = {"name": args.out.stem, "status": "primary", "base": base,
            "grid": {"model.variant": [args.against, args.variant]},
            "seeds": {"looks": list(FIRST), "start": args.seed_start, "futility": 0.5},
            "design_seeds": [0, 1], "resources": {"cpu": 1},
            "report": {"baseline": {"model.variant": args.against}},
            "claims": [claim(args.variant, args.against, metric, args.expect, kind)]}
    if args.cheaper:
        grid["claims"].append(cost_claim(args.variant, args.against, args.cheaper,
                                         args.cost_bound))
    if args.plugin:
        grid["plugins"] = [os.path.relpath(args.plugin.resolve(), args.out.resolve().parent)]
    grid["base"] = merge(grid["base"], parse_sets(args.sets))
    grid["seeds"]["looks"] = sized(grid)
    return grid


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.new", description=about(__doc__))
    p.add_argument("variant", help="the variant to test (registered, or by --plugin)")
    p.add_argument("--against", default="fixed", help="the baseline (default fixed: multi-head)")
    p.add_argument("--plugin", type=Path, help="the plugin file that registers the variant")
    p.add_argument("--probe", default="recall", help="the main job's probe (default recall)")
    p.add_argument("--data", help="a text corpus instead of the probe (enwik8, text8, a path)")
    p.add_argument("--expect", choices=["better", "not-worse"], default="better")
    p.add_argument("--cheaper", choices=list(CHEAPER), help="also claim it costs less: flops "
                   "(FLOPs per token its mask keeps) or time (training step time, measured "
                   "interleaved on this machine); a cost claim after the quality claim")
    p.add_argument("--cost-bound", type=float, default=1.0, metavar="RATIO",
                   help="the cost claim's bound on rows / baseline (default 1: cheaper; 0.8: "
                   "at least 20%% less; 1.1: at most 1.1x)")
    p.add_argument("--seed-start", type=int, default=100, help="the confirmation seeds' first")
    add_set(p, "set a base config key, e.g. model.span=64 or model.attn.keep=40")
    p.add_argument("--out", type=Path, required=True, help="the grid file to write (.yaml)")
    args = p.parse_args(argv)
    if args.out.exists():
        print(f"error: --out {args.out}: exists; choose a new file", file=sys.stderr)
        return 2
    if not args.out.parent.is_dir():
        print(f"error: --out {args.out}: no folder {args.out.parent}", file=sys.stderr)
        return 2
    if not args.cost_bound > 0:
        print(f"error: --cost-bound {args.cost_bound:g}: a ratio > 0 expected", file=sys.stderr)
        return 2
    if args.plugin and not args.plugin.is_file():
        print(f"error: --plugin {args.plugin}: no such file", file=sys.stderr)
        return 2
    try:
        text = yaml.safe_dump(grid_file(args), sort_keys=False, width=100, default_flow_style=None)
        folder = args.out.resolve().parent
        grid = open_grid(GridText(text, str(args.out), folder), Overrides())
        resolve_trials(grid, True)  # every trial's config, as bench.run's dry run checks it
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args.out.write_text(text)
    print(f"wrote {args.out}. Next: python -m bench.pilot {args.out}; python -m bench.run "
          f"{args.out} --dry-run; git add {args.out} && git commit; python -m bench.run "
          f"{args.out} --out results/{grid.name}/seeds{args.seed_start}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
