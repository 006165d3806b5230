"""Recompute a committed result's verdicts from its folder and git alone, and check its
pre-registration, as a reviewer would (the findings room, `bench.findings.verify`).

python -m bench.verify results/heads_grid          # one result
python -m bench.verify results --allow-unverified  # every result below (what CI runs)

One line per claim: its verdict and whether it is confirmatory, exploratory or unverified, and
why; the results elsewhere in the repository that hold its trials; where today's analysis code
is not the registered one, what today's code decides otherwise (the verdicts are the
registered code's). Exit 1 where a committed findings.csv disagrees with what is recomputed; 2
for a folder without grid.yaml, runs.csv and findings.csv, a runs.csv or findings.csv that
cannot be read as the grid's (naming the line or column), or (without --allow-unverified) a
result whose pre-registration cannot be checked.
"""

import argparse
import sys
from pathlib import Path

from bench.cli import VERDICTS, about
from bench.config import ConfigError
from bench.findings.verify import folders, verify


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.verify", description=about(__doc__),
                                epilog=VERDICTS)
    p.add_argument("paths", nargs="+", type=Path, help="result folders, or folders above them")
    p.add_argument("--allow-unverified", action="store_true", help="exit 0 for results whose "
                   "runs predate the plan records, where their findings say unverified")
    args = p.parse_args(argv)
    code = 0
    try:
        for folder in folders(args.paths):
            checked = verify(folder)
            for line in [*checked.lines, *filter(None, [checked.shared]), *checked.moved]:
                print(f"{folder}: {line}")
            for line in checked.differ:
                print(f"{folder}: DIFFERS: {line}", file=sys.stderr)
            if checked.differ:
                code = 1
            elif checked.evidence == "unverified" and not args.allow_unverified:
                code = max(code, 2)
    except ConfigError as err:
        print(f"bench.verify: {err}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
