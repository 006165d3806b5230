"""Each variant's multiply-adds per predicted token, counted by fvcore on one executed
prediction step and set against the analytic counts (the measurement room,
`bench.measure.flop_count`; the counts are the model room's, `bench.model.cost` and
`bench.model.count`).

python -m bench.flops [--config tiny] [--config "paper small"]
"""

import argparse
import sys

import pandas as pd

import variants
from bench import plugins
from bench.cli import about
from bench.measure.flop_count import CONFIGS, compare


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.flops", description=about(__doc__))
    p.add_argument("--config", choices=sorted(CONFIGS), action="append",
                   help="repeatable; default: all")
    args = p.parse_args(argv)
    try:
        plugins.load()
    except plugins.PluginError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows = [compare(c, v) for c in args.config or CONFIGS for v in variants.names()]
    df = pd.DataFrame(rows)
    col = "counted/(max + output + q.p) - 1 (%)"
    err = df.pop(col)
    table = df.map(lambda v: f"{v:,.0f}" if isinstance(v, float | int) else v)
    table.insert(len(df.columns) - 1, col, err.map("{:+.4f}".format))
    align = ["left"] * 2 + ["right"] * (len(table.columns) - 3) + ["left"]
    print(table.to_markdown(index=False, disable_numparse=True, colalign=align))
    worst = err.abs().max()
    print("\nmultiply-adds per predicted token; analytic: the paper's #FLOPS convention (4 D^2 + "
          "2 D F + 2 D s per layer); the output layer, q.p and the cache re-projection are "
          f"executed on top; worst |counted/(analytic max + output + q.p) - 1| = {worst:.4f}%")
    return 0 if worst < 0.5 else 1



if __name__ == "__main__":
    raise SystemExit(main())
