"""Migrate records made under a renamed variant or policy to today's names, once.

python -m bench.retag GRID.yaml [GRID ...] [--tracking-uri URI]   # a store's runs
python -m bench.retag --results results/adaptive_vs_dynamic [...]  # committed result folders

A store (sqlite) gets, for the trials the grid files expand to, the trial hashes they have today
and the names; a result folder's runs.csv and grid.yaml are rewritten likewise. Nothing else
changes, no run is deleted, and a second run finds nothing to do. Not an attnbench store: exit 2.
"""

import argparse
import sys
from pathlib import Path

from bench.cli import about, add_tracking_uri
from bench.config import ConfigError
from bench.experiment.open import open_grid
from bench.sweep.migration import hash_renames, migrate_folder
from bench.sweep.trials import resolve_trials
from bench.tracking import store_migration
from bench.tracking.reader import StoreError
from bench.tracking.store import tracking_uri


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.retag", description=about(__doc__))
    p.add_argument("grids", nargs="*", type=Path, help="grid files whose trials the store holds")
    add_tracking_uri(p)
    p.add_argument("--results", nargs="+", type=Path, default=[], metavar="DIR",
                   help="result folders (runs.csv, grid.yaml) to rewrite instead")
    args = p.parse_args(argv)
    if bool(args.grids) == bool(args.results):
        p.error("give grid files (a store) or --results folders, one of the two")
    try:
        if args.results:
            for folder in args.results:
                if not (folder / "runs.csv").is_file() or not (folder / "grid.yaml").is_file():
                    raise ConfigError(f"--results {folder}: expected runs.csv and grid.yaml")
            for folder in args.results:
                print(f"{folder}: {describe(migrate_folder(folder))}")
            return 0
        hashes: dict[str, str] = {}
        for path in args.grids:
            hashes |= hash_renames(resolve_trials(open_grid(path), False))
        uri = tracking_uri(args.tracking_uri)
        print(f"{uri}: {describe(store_migration.retag(uri, hashes))}")
    except (ConfigError, StoreError) as err:
        print(f"bench.retag: {err}", file=sys.stderr)
        return getattr(err, "code", 2)
    return 0


def describe(changed: dict[str, int]) -> str:
    """What a migration did, in words."""
    return ", ".join(f"{n} {what}" for what, n in changed.items())


if __name__ == "__main__":
    raise SystemExit(main())
