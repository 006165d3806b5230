"""Recompute a committed result's verdicts from its folder and git alone, and check its
pre-registration, as a reviewer would (the findings room, `bench.findings.provenance.verify`).

python -m bench.verify results/heads_grid/seeds100          # one result
python -m bench.verify results --allow-unverified  # every result below (what CI runs)

Each row is held against the trial its grid, setting, seed, precision and corpus make
(`bench.sweep.recompute`: a row that is not its trial makes the result exploratory). One line
per claim: its verdict and whether it is confirmatory, exploratory or unverified, and why; the
results elsewhere in the repository that hold its trials; where today's analysis code is not
the registered one, what today's code decides otherwise (the verdicts are the registered
code's). The committed findings.md must be the page regenerated whole: the registered code's,
with today's pre-registration and Shared runs lines (a hand edit is named: a table cell by its
claim and column, else the first line that differs). A registered seed start that no result
holds is named, and exits 5 unless a grid file withdraws it with a reason.
Exit codes: `EXIT_CODES` (the --help says them too).
"""

import argparse
import sys
from pathlib import Path

from bench.cli import VERDICTS, about
from bench.config import ConfigError
from bench.findings.presentation.page import differs, regenerate
from bench.findings.provenance.verify import folders, verify
from bench.sweep import recompute

EXIT = {"confirmatory": 0, "exploratory": 3, "unverified": 4}  # a result's evidence -> exit
UNPUBLISHED = 5
SEVERITY = (0, 3, 4, UNPUBLISHED, 1, 2)  # the worst of several: bad input, then a difference
EXIT_CODES = ("Exit codes, for the worst result checked: 0 confirmatory (or a result without "
              "claims); 3 exploratory; 4 unverified (with --allow-unverified, 0 for either "
              "where the committed files agree); 5 a seed start its grid registers that no "
              "result holds and no grid file withdraws (seeds.withdrawn, with a reason): the "
              "published results are not the whole registered set (--allow-unverified does "
              "not change it); 1 a committed findings.csv or findings.md that differs from "
              "what is regenerated (the first line that differs, named); 2 a folder without "
              "grid.yaml, runs.csv, findings.csv and findings.md, or a file that cannot be "
              "read as the grid's (naming the line or column: a bits value above log2 of the "
              "corpus's vocabulary among them).")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.verify", description=about(__doc__),
                                epilog=f"{EXIT_CODES} {VERDICTS}")
    p.add_argument("paths", nargs="+", type=Path, help="result folders, or folders above them")
    p.add_argument("--allow-unverified", action="store_true", help="exit 0 for exploratory "
                   "and unverified results (runs that predate the plan records, pilots) where "
                   "their committed files agree with what is recomputed: what CI checks")
    args = p.parse_args(argv)
    worst = 0
    try:
        for folder in folders(args.paths):
            checked = verify(folder, recompute.rows)
            differ = [*checked.differ, *differs(folder / "findings.md", regenerate(checked))]
            for line in [*checked.lines, *filter(None, [checked.shared, checked.unpublished,
                                                        checked.withdrawn]), *checked.moved]:
                print(f"{folder}: {line}")
            for line in differ:
                print(f"{folder}: DIFFERS: {line}", file=sys.stderr)
            code = 1 if differ else 0 if args.allow_unverified else EXIT.get(checked.evidence, 0)
            worst = max(worst, code, UNPUBLISHED if checked.unpublished else 0,
                        key=SEVERITY.index)
    except ConfigError as err:
        print(f"bench.verify: {err}", file=sys.stderr)
        return 2
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
