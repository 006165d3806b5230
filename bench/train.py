"""Train and evaluate one character-level LM (the one-run room, `bench.training`).

python -m bench.train --variant adaptive --data enwik8 --preset tiny --set train.steps=500
"""

import argparse
import sys
import time
from pathlib import Path

import variants
from bench import data, plugins, provenance
from bench.cli import about, add_preset, add_set
from bench.config import ConfigError, parse_sets, resolve, set_dotted
from bench.training.loop import train
from bench.training.state import Diverged


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.train", description=about(__doc__))
    p.add_argument("--variant", help="registered variant name (model.variant)")
    p.add_argument("--data", help="registered dataset: synthetic, enwik8, text8, file, or a "
                   "plugin's (data.name)")
    add_preset(p)
    add_set(p)
    p.add_argument("--out", type=Path, help="run directory (default runs/train/<variant>-<time>)")
    p.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    try:
        plugins.load()
        tree = parse_sets(args.sets)
        if args.variant:
            set_dotted(tree, "model.variant", args.variant)
        if args.data:
            set_dotted(tree, "data.name", args.data)
        cfg = resolve(tree, args.preset)
        out = args.out or provenance.LOCAL / "train" / (
            f"{cfg.model.variant}-{time.strftime('%Y%m%d-%H%M%S')}")
        r = train(cfg, out, progress=not args.no_progress, resume=not args.fresh)
    except (ConfigError, data.DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except variants.OptionError as err:  # a policy's check that needs its Shape (S, h, D)
        print(f"error: {'; '.join(err.lines(lambda k: f'model.attn.{k}'))}", file=sys.stderr)
        return 2
    except Diverged as err:
        print(f"diverged: {err}", file=sys.stderr)
        return 1
    label = " (on a prefix of the dataset: not comparable with full-dataset bpc)" if r.prefix \
        else ""
    floor = f"  floor {r.floor_bpc:.4f}" if r.floor_bpc else ""
    print(f"dev bpc {r.dev_bpc:.4f}  test bpc {r.test_bpc:.4f}{floor}{label}\n"
          f"mean span {r.mean_span:.1f}  params {r.params:,}  "
          f"tokens/s {r.tokens_per_s:,.0f}  flops/token {r.flops_max:,.0f}\nrun dir {out}")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
