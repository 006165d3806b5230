"""Ablation sweeps: a YAML grid of configs, trained in parallel by Ray Tune, tracked in MLflow
(the sweep room, `bench.sweep`).

python -m bench.run ablations/heads_grid.yaml [--set train.steps=500] [--preset small]
    [--data enwik8] [--seeds 0,1,2 | --seed-start 20] [--dry-run] [--address HOST:PORT]
    [--force]

Every trial config is resolved and validated before Ray or MLflow start; a user error exits 2.
"""

import argparse
import os
import shlex
import sys
from pathlib import Path

from bench import plugins
from bench.config import ConfigError, parse_sets
from bench.experiment import grid as grids
from bench.provenance import LOCAL
from bench.sweep import feasible, gpus
from bench.sweep.plan import print_plan
from bench.sweep.runner import SweepOptions, reads, sweep
from bench.sweep.trials import Overrides, resolve_trials

from .args import VERDICTS, add_tracking_uri, add_trial_args


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0],
                                epilog=VERDICTS)
    p.add_argument("grid", type=Path, help="grid file, e.g. ablations/heads_grid.yaml")
    add_trial_args(p)
    p.add_argument("--dry-run", action="store_true",
                   help="print the trials and the estimated cost, then exit")
    p.add_argument("--address", help="an existing Ray cluster (default: $RAY_ADDRESS, else local)")
    add_tracking_uri(p, "<results-dir>/mlflow.db")
    p.add_argument("--results-dir", type=Path, default=LOCAL,
                   help="where <grid>/ and the default MLflow db go (default runs/, which git "
                   "ignores; the committed results are written with --results-dir results)")
    p.add_argument("--force", action="store_true", help="rerun finished trials too, from scratch")
    p.add_argument("--rerun-stale", action="store_true",
                   help="rerun, from scratch, finished trials whose result comes from other "
                   "training code (another code_version; default: reuse them, marked stale)")
    p.add_argument("--no-report", action="store_true", help="skip bench.report at the end")
    args = p.parse_args(argv)
    try:
        grid = grids.load(args.grid)  # its plugins, and $ATTNBENCH_PLUGINS, imported first
        grid = grid.model_copy(update={"plugins": plugins.load(grid.plugins)})
        overrides = Overrides(parse_sets(args.sets), args.preset, args.data, args.seeds,
                              args.seed_start)
        grid, trials = resolve_trials(grid, overrides, args.dry_run)
        feasible.check(grid.claims, grid.grid, trials)
        feasible.check_restated(grid)
        levels = feasible.by_look(grid.claims, grid.grid, grid.seeds)
        feasible.check_looks(levels)
        address = args.address or os.environ.get("RAY_ADDRESS")
        gpus_there = feasible.check_gpus(grid, address)
        packed = gpus.packing(trials, grid.resources.gpu, None if address else gpus.gpu_mb(),
                              gpus_there)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for warning in feasible.implied(grid.claims):
        print(f"warning: {warning}", file=sys.stderr)
    cpus = None if address else os.cpu_count()  # what a local Ray is told (a cluster's: its)
    print(f"GPUs: {packed.why}", feasible.at_once(grid.resources.cpu, packed.share, gpus_there,
          cpus), *filter(None, [feasible.eager_graphs(trials, packed.share)]), sep="\n")
    if args.dry_run:
        looks = grid.look_seeds()
        first = [t for t in trials if t.seed in looks[0]]
        print_plan(first, grid, levels, feasible.rates(grid.claims, grid.grid, grid.seeds))
        if len(looks) > 1:
            later = [t for t in trials if t.seed not in looks[0]
                     and reads(grid.claims, grid.grid, t.values)]
            print(f"\nseeds.looks {grid.seeds.looks}: look 1 runs the {len(first)} trials above "
                  f"(seeds {looks[0][0]}-{looks[0][-1]}); later looks add seeds up to "
                  f"{looks[-1][-1]} only to the settings an undecided claim reads: at most "
                  f"{len(later)} more trials")
        return 0
    command = shlex.join(["python", "-m", "bench.run", *(sys.argv[1:] if argv is None
                                                          else map(str, argv))])
    mps = gpus.start_mps(packed.per_gpu) if packed.per_gpu and not address else None
    return sweep(grid, trials, SweepOptions(
        args.grid, args.results_dir, command, tracking_uri=args.tracking_uri,
        address=args.address, force=args.force, rerun_stale=args.rerun_stale,
        report=not args.no_report, gpu=packed.share, mps=mps))

