"""Measure what a finished result's claims' rows cost against their baselines, side by side on
this machine (the measurement room, `bench.measure.cost`): cost.csv into the result's folder and
the cost block of its findings.md (`bench.findings.costs`), nothing else of it rewritten. For a
result whose sweep did not measure it (committed before), or to measure again on a quiet machine.

python -m bench.cost results/window/seeds100 [results/heads_grid/seeds600 ...] [--reps 9]
python -m bench.cost results          # every result folder below (those with findings.csv)

The arms are the grid file's trials (grid.yaml, its plugins found where the runs say it lay),
built and timed here, alone: run it on an idle machine, one folder after another. Then
`python -m bench.grids` puts the tables into the experiments' READMEs.
"""

import argparse
import sys
from pathlib import Path

import pandas as pd

from bench.cli import about
from bench.config import ConfigError
from bench.experiment.open import open_grid
from bench.findings import costs
from bench.findings.verify import folders
from bench.measure import cost as measured
from bench.sweep import estimate
from bench.sweep.trials import resolve_trials


def grid_file(folder: Path) -> Path:
    """The grid file a result ran from, where its runs say it lay and it still holds the
    folder's grid.yaml (its plugins' paths resolve from there), else the folder's grid.yaml;
    ConfigError for a folder without grid.yaml, runs.csv and findings.md."""
    if missing := [f for f in ("grid.yaml", "runs.csv", "findings.md")
                   if not (folder / f).is_file()]:
        raise ConfigError(f"{folder}: no {', '.join(missing)} (a result folder holds grid.yaml, "
                          "runs.csv and findings.md)")
    text = (folder / "grid.yaml").read_text()
    planned = pd.read_csv(folder / "runs.csv").get("plan_file", pd.Series(dtype=object)).dropna()
    top = Path(__file__).resolve().parents[1]
    where = top / str(planned.iloc[0]) if len(planned) else None
    return where if where is not None and where.is_file() and where.read_text() == text \
        else folder / "grid.yaml"


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
            grid = open_grid(grid_file(folder))
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
        page.write_text(put_block(page.read_text(), costs.block(costs.read(folder / costs.FILE),
                                                                runs)))
        for line in costs.lines(df, runs):
            print(f"{folder}: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
