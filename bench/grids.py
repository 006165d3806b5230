"""Write the pages of the committed results, generated, never written by hand: each experiment
folder's README (results/<experiment>/README.md: its grids, claims, runs, their verdicts and
evidence, figures) and their index, docs/grids.md.

python -m bench.grids [--check]

A grid whose `of` or `superseded_by` leads to no primary grid, or a grid file not named after
its experiment (`ablations/<experiment>[.<variation>].yaml`), exits 2, naming the file.
"""

import argparse
import sys

from bench.cli import about, generated
from bench.config import ConfigError
from bench.experiment.catalogue import check_names, entries
from bench.findings.presentation.folders import pages
from bench.provenance import RESULTS, ROOT


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grids", description=about(__doc__))
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed "
                   "page (docs/grids.md, a results/<experiment>/README.md) is not what the "
                   "grid files and results give")
    args = p.parse_args(argv)
    try:
        grids = entries(ROOT / "ablations", RESULTS)
        check_names(grids)
        found = pages(grids, ROOT)
    except ConfigError as err:
        print(f"bench.grids: {err}", file=sys.stderr)
        return 2
    return max(generated(path, text, args.check, "python -m bench.grids")
               for path, text in found.items())


if __name__ == "__main__":
    raise SystemExit(main())
