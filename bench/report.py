"""Write a finished sweep's paper-style tables, figures and findings again, read back from
MLflow (the findings room, `bench.findings`).

python -m bench.report ablations/span_limit.yaml          # or an experiment (grid) name
python -m bench.report span_limit --tracking-uri sqlite:///runs/mlflow.db --out DIR
python -m bench.report ablations/heads_grid.yaml --runs results/heads_grid/seeds100/runs.csv

The report covers the trials of one sweep, as the runner recorded them on the sweep's run: the
experiment's newest sweep, or `--sweep RUN_ID`. A grid file given as the target supplies the
claims, table and figures (else the grid file logged with the sweep).
"""

import argparse
import sys
from pathlib import Path

from bench.cli import VERDICTS, about, add_tracking_uri
from bench.config import ConfigError
from bench.experiment.open import open_grid, read_grid_text
from bench.findings.presentation.render import ReportError, findings_from_runs_csv, render_sweep
from bench.provenance import LOCAL
from bench.tracking.reader import StoreError
from bench.tracking.store import tracking_uri


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report", description=about(__doc__),
                                epilog=VERDICTS)
    p.add_argument("target", help="grid YAML (its name) or an MLflow experiment name")
    add_tracking_uri(p)
    p.add_argument("--sweep", metavar="RUN_ID", help="the sweep's MLflow run (default: the "
                   "experiment's newest sweep)")
    p.add_argument("--out", type=Path, help="output folder (default runs/<grid>/; with "
                   "--runs, the runs.csv's folder)")
    p.add_argument("--runs", type=Path, metavar="RUNS_CSV", help="recompute only the findings "
                   "of the grid file's claims and its table from a runs.csv (a committed "
                   "result's per-seed values; no figures), no MLflow store")
    args = p.parse_args(argv)
    try:
        grid_file = Path(args.target) if args.target.endswith((".yaml", ".yml")) else None
        if grid_file is not None and not grid_file.is_file():
            raise ConfigError(f"grid file {grid_file} not found")
        if args.runs is not None:
            if grid_file is None or not args.runs.is_file():
                raise ConfigError(f"--runs {args.runs}: needs a grid file as the target and an "
                                  "existing runs.csv")
            paths = findings_from_runs_csv(args.runs, grid_file, args.out or args.runs.parent)
            print("wrote", *map(str, paths), sep="\n  ")
            return 0
        source = read_grid_text(grid_file) if grid_file else None  # the one read of the file
        grid = open_grid(source) if source else None  # else the sweep's, from the store
        name = grid.name if grid else args.target
        paths = render_sweep(tracking_uri(args.tracking_uri), name, args.out or LOCAL / name,
                             args.sweep, grid, source)
    except (ConfigError, ReportError, StoreError) as err:
        print(f"bench.report: {err}", file=sys.stderr)
        return getattr(err, "code", 2)
    print("wrote", *map(str, paths), sep="\n  ")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
