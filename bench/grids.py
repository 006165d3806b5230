"""Write docs/grids.md, the table of every grid file in ablations/: its experiment, its status,
its committed results folders and their verdicts, generated, never written by hand.

python -m bench.grids [--check]

A grid whose `of` or `superseded_by` leads to no primary grid exits 2, naming the file.
"""

import argparse
import sys

from bench.cli import about, generated
from bench.config import ConfigError
from bench.experiment.catalogue import entries, render
from bench.provenance import RESULTS, ROOT

TABLE = ROOT / "docs" / "grids.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grids", description=about(__doc__))
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the "
                   "committed docs/grids.md is not what the grid files and results give")
    args = p.parse_args(argv)
    try:
        text = render(entries(ROOT / "ablations", RESULTS), ROOT)
    except ConfigError as err:
        print(f"bench.grids: {err}", file=sys.stderr)
        return 2
    return generated(TABLE, text, args.check, "python -m bench.grids")


if __name__ == "__main__":
    raise SystemExit(main())
