"""Measure what a finished result's claims' rows cost against their baselines, side by side on this
machine (the measurement room, `bench.measure.cost`): cost.csv into the result's folder and the cost
block of its findings.md (`bench.findings.presentation.costs`), nothing else of it rewritten. For a
result whose sweep did not measure it (committed before), or to measure again on a quiet machine.

python -m bench.cost results/window/seeds100 [results/heads_grid/seeds600 ...] [--reps 9]
python -m bench.cost results          # every result folder below (those with findings.csv)

The arms are the trials of the folder's grid.yaml (its plugins found where the runs say the grid
file lay, as named today: `recompute.opened`), built and timed here, alone: run it on an idle
machine, one folder after another. Then
`python -m bench.grids` puts the tables into the experiments' READMEs.
"""

import argparse
import sys
from pathlib import Path

import pandas as pd

from bench.cli import about
from bench.config import ConfigError
from bench.findings.presentation import costs
from bench.findings.provenance.verify import folders
from bench.findings.reading import measurement
from bench.measure import cost as measured
from bench.sweep import estimate
from bench.sweep.recompute import opened
from bench.sweep.trials import resolve_trials

TOP = Path(__file__).resolve().parents[1]


def put_block(page: str, block: str) -> str:
    """findings.md with its cost block replaced by `block`, or `block` appended."""
    kept = costs.without_block(page).rstrip("\n")
    return f"{kept}\n\n{block}\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cost", description=about(__doc__))
    p.add_argument("paths", nargs="+", type=Path, help="result folders (grid.yaml, runs.csv, "
                   "findings.md), or folders above them")
    p.add_argument("--reps", type=int, default=measured.REPS,
                   help=f"interleaved repetitions (default {measured.REPS})")
    args = p.parse_args(argv)
    if args.reps < 2:
        p.error(f"--reps: expected at least 2 (got {args.reps})")
    try:  # every folder's grid and trials resolved before anything is timed
        todo = []
        for folder in folders(args.paths):
            if missing := [f for f in ("grid.yaml", "runs.csv", "findings.md")
                           if not (folder / f).is_file()]:
                raise ConfigError(f"{folder}: no {', '.join(missing)} (a result folder holds "
                                  "grid.yaml, runs.csv and findings.md)")
            grid = opened(folder, TOP, pd.read_csv(folder / "runs.csv"))
            todo.append((folder, measured.comparisons(grid, resolve_trials(grid, True))))
    except ConfigError as err:
        print(f"bench.cost: {err}", file=sys.stderr)
        return 2
    for folder, pairs in todo:
        if not pairs:
            print(f"{folder}: no claim compares rows with a baseline: nothing to measure")
            continue
        df = measured.measure(pairs, args.reps, lambda t: estimate.calibrate(t).step_s)
        measured.write(df, folder)
        runs = pd.read_csv(folder / "runs.csv")
        page = folder / "findings.md"
        cost = measurement.read(folder / measurement.FILE)
        page.write_text(put_block(page.read_text(), costs.block(cost, runs)))
        for line in costs.lines(df, runs):
            print(f"{folder}: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
