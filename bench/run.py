"""Run a grid file's sweep: its trials trained in parallel by Ray Tune and tracked in MLflow,
then its table, figures and findings (the sweep room, `bench.sweep`).

python -m bench.run ablations/heads_grid.yaml [--set train.steps=500] [--preset small]
    [--data enwik8] [--seeds 0,1,2 | --seed-start 20] [--dry-run] [--address HOST:PORT]
    [--force] [--out results/<experiment>/<run>]

Every trial config is resolved and validated before Ray or MLflow start; a user error exits 2.
"""

import argparse
import functools
import os
import shlex
import sys
from pathlib import Path

import pandas as pd

from bench.cli import VERDICTS, about, add_tracking_uri, add_trial_args
from bench.config import ConfigError, parse_sets
from bench.experiment import grid as grids
from bench.experiment.floors import Floors
from bench.experiment.grid import Grid
from bench.experiment.open import Overrides, load_grid, open_grid, read_grid_text
from bench.findings.presentation import costs
from bench.findings.provenance import plan
from bench.measure import cost as measured
from bench.provenance import LOCAL
from bench.sweep import estimate, feasible, gpus
from bench.sweep.plan import print_plan, print_time
from bench.sweep.runner import SweepOptions, serves_claims, sweep
from bench.sweep.trials import resolve_trials
from bench.trial import Served, Trial

DRY_REPS = 5  # the dry run's interleaved repetitions (the sweep's: bench.measure.cost.REPS)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=about(__doc__),
                                epilog=VERDICTS)
    p.add_argument("grid", type=Path, help="grid file, e.g. ablations/heads_grid.yaml")
    add_trial_args(p)
    p.add_argument("--dry-run", action="store_true",
                   help="print the trials and the estimated cost, then exit")
    p.add_argument("--address", help="an existing Ray cluster (default: $RAY_ADDRESS, else local)")
    add_tracking_uri(p, "<results-dir>/mlflow.db")
    p.add_argument("--results-dir", type=Path, default=LOCAL,
                   help="where <grid>/ and the default MLflow db go (default runs/, which git "
                   "ignores)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="the run's folder, its results and trials, instead of <results-dir>/"
                   "<grid>/; a committed run: results/<experiment>/<run>, e.g. --out "
                   "results/heads_grid/seeds600 (the names: docs/grids.md)")
    p.add_argument("--force", action="store_true", help="rerun finished trials too, from scratch")
    p.add_argument("--rerun-stale", action="store_true",
                   help="rerun, from scratch, finished trials whose result comes from other "
                   "training code (another code_version; default: reuse them, marked stale)")
    p.add_argument("--no-report", action="store_true", help="skip bench.report at the end")
    p.add_argument("--power-at", type=float, nargs="+", default=[0.8, 0.9], metavar="Q",
                   help="with --dry-run, each claim's power at these chances q that a seed lands "
                   "on the claimed side (default 0.8 0.9): the seeds an observed effect needs")
    return p


def _dry_run(grid: Grid, trials: list[Trial], levels: pd.DataFrame,
             power_at: tuple[float, ...], slots: int | None, costs: Floors) -> None:
    """What --dry-run prints: the first look's trials and cost, each claim's rules, rates and
    the family's bound, when a seed of a claim on a probe is vacuous (`costs`: the cells'
    no-recall floors), what later looks may add, and the time it all takes here."""
    print(f"grid {grid.name}: {grid.status_line} (docs/grids.md)")
    looks = grid.look_seeds()
    first = [t for t in trials if t.seed in looks[0]]
    rates = feasible.by_construction(feasible.rates(grid.claims, grid.grid, grid.seeds, power_at),
                                     grid.claims, first) if grid.claims else None
    print_plan(first, grid, levels, rates)
    if grid.claims:
        print(feasible.worst_line(grid.claims, grid.grid, grid.seeds))
    if rules := feasible.vacuity_rules(grid.claims, grid.grid, costs):
        print("\nVacuous seeds (counted on neither side; docs/claims.md):", *rules, sep="\n")
    later = {t.setting for t in trials if serves_claims(grid.claims, grid.grid, t.values)}
    if len(looks) > 1:
        more = [t for t in trials if t.seed not in looks[0] and t.setting in later]
        print(f"\nseeds.looks {grid.seeds.looks}: look 1 runs the {len(first)} trials above "
              f"(seeds {looks[0][0]}-{looks[0][-1]}); later looks add seeds up to "
              f"{looks[-1][-1]} only to the settings an undecided claim reads: at most "
              f"{len(more)} more trials")
    speeds = print_time(grid, first, later, slots, rates, power_at)
    _cost(grid, first, speeds)


def _cost(grid: Grid, first: list[Trial], speeds: dict[str, estimate.Speed]) -> None:
    """What the claims' rows cost against their baselines, measured here now, interleaved (a
    few repetitions: the sweep measures again after its trials, for the findings), beside the
    time table's step ratio (each setting timed alone); and what each cost claim would be."""
    pairs = measured.comparisons(grid, first)
    if not pairs:
        return
    df = measured.measure(pairs, reps=DRY_REPS, alone=lambda t: speeds[t.setting].step_s
                          if t.setting in speeds else float("nan"))
    print(f"\nCost here, the claims' rows against their baselines ({costs.machine(df)}):\n")
    print(costs.table(df, pd.DataFrame()).to_markdown(index=False, disable_numparse=True))
    for line in costs.foresee(grid.claims, grid.grid, df):
        print(line)


def _step_alone(trial: Trial) -> float:
    """Seconds per training step of a trial timed by itself, as the dry run's time table
    times it (`estimate.calibrate`): recorded beside the interleaved measurement."""
    return estimate.calibrate(trial).step_s


def _uncommitted(grid: Grid, path: Path) -> list[str]:
    """A grid with claims whose trials would record a working tree that differs from its
    commit in what can change a run (`plan.uncommitted`), said before any compute: the paths
    and the fix."""
    if not grid.claims or not (paths := plan.uncommitted(path, grid.plugins)):
        return []
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return [f"not committed, and able to change a run: {shown}; trials run now are "
            f"exploratory. To confirm, commit them first (git add {shlex.quote(paths[0])} ... "
            f"&& git commit), or run on knowingly as exploratory"]


def _plan(written: Grid, path: Path, grid: Grid, overrides: Overrides) -> Served:
    """What every trial records of the plan it serves (`plan.record`, and the plan itself as
    registered: `plan.registered`): the grid file as read (`written`, from `path`) with the
    seeds it runs (`grid`'s), and the other overrides."""
    given = {k: v for k, v in vars(overrides).items() if v and k != "seed_start"}
    ran = written.model_copy(update={"seeds": grid.seeds})
    return Served(plan.record(ran, path, given, grid.plugins),
                  plan.plans_json([plan.registered(ran, given)]))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if bad := [q for q in args.power_at if not 0 < q < 1]:
        print(f"error: --power-at {bad[0]:g}: a chance q in (0, 1) expected", file=sys.stderr)
        return 2
    try:
        source = read_grid_text(args.grid)  # the one read of the file: all below is this text
        written = load_grid(source)
        grids.check_runnable(written, args.grid)
        overrides = Overrides(parse_sets(args.sets), args.preset, args.data, args.seeds,
                              args.seed_start)
        grid = open_grid(source, overrides)  # its plugins, $ATTNBENCH_PLUGINS first
        trials = resolve_trials(  # a dry run records no plan: it runs nothing
            grid, args.dry_run, results_dir=args.results_dir, out=args.out,
            plan=None if args.dry_run else _plan(written, args.grid, grid, overrides))
        feasible.check(grid.claims, grid.grid, trials)
        costs = feasible.check_floors(grid)
        feasible.check_restated(grid)
        levels = feasible.by_look(grid.claims, grid.grid, grid.seeds)
        feasible.check_looks(levels)
        address = args.address or os.environ.get("RAY_ADDRESS")
        gpus_there = feasible.check_gpus(grid, address)
        packed = gpus.packing(trials, grid.resources.gpu, None if address else gpus.gpu_mb(),
                              gpus_there)
        mps_off = gpus.mps_off()
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for warning in [*feasible.implied(grid.claims),
                    *feasible.uncontradictable(grid.claims, grid.grid, grid.seeds),
                    *_uncommitted(grid, args.grid)]:
        print(f"warning: {warning}", file=sys.stderr)
    cpus = None if address else os.cpu_count()  # what a local Ray is told (a cluster's: its)
    print(f"GPUs: {packed.why}", feasible.at_once(grid.resources.cpu, packed.share, gpus_there,
          cpus), *filter(None, [feasible.eager_graphs(trials, packed.share)]), sep="\n")
    if args.dry_run:
        _dry_run(grid, trials, levels, tuple(args.power_at), feasible.slots(
            grid.resources.cpu, packed.share, gpus_there, cpus), costs)
        return 0
    command = shlex.join(["python", "-m", "bench.run", *(sys.argv[1:] if argv is None
                                                          else map(str, argv))])
    mps = gpus.start_mps(packed.per_gpu, mps_off) if packed.per_gpu and not address else None
    return sweep(grid, trials, SweepOptions(
        source, args.results_dir, command, tracking_uri=args.tracking_uri,
        address=args.address, force=args.force, rerun_stale=args.rerun_stale,
        report=not args.no_report, gpu=packed.share, mps=mps, out=args.out,
        cost=functools.partial(measured.measure_into, grid=grid, trials=trials,
                               alone=_step_alone)))



if __name__ == "__main__":
    raise SystemExit(main())
