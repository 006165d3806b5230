"""Before spending seeds: does each arm of a grid learn each probe at the grid's steps? Its
settings trained on pilot seeds (the grid's first design seeds: design data, never counted
towards a confirmation), each probe's bits per answer against the no-recall floor and the bar
below which a mean is not that floor's noise (`vacuity.bar`), and the step at which the dev
reading first fell below that bar. A probe part whose floor is 0 (nothing to learn without
recall) is left out of the table, with a note.

python -m bench.pilot ablations/heads_grid.yaml [--seeds 2] [--set train.steps=500]

No Ray, no MLflow: the trials train here, at most as many at once as the grid's resources.cpu
allows on this machine, in runs/<grid>/pilot/ (a rerun reuses them), where the table goes as
pilot.csv and the per-trial values as runs.csv (to commit a pilot's tables). The pilot's runs
are judged by the findings' own path (`verdicts.verdict_table`, each claim alone, the floors
from the grid): exit 0, or 3 naming each claim every pilot seed of one of whose tests is vacuous
(the findings would call it unanswerable: train longer, change the setting, a probe may be tuned
until it is learned, or change the claim); a test some of whose seeds are vacuous is named in a
note. Exit 2 before any training for bad input, and for a claim on a probe part whose no-recall
floor is 0, as bench.run refuses it.
"""

import argparse
import dataclasses
import json
import multiprocessing
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from bench import plugins
from bench.cli import about, add_set, checked
from bench.config import ConfigError, parse_sets
from bench.experiment.floors import Floors
from bench.experiment.grid import Grid, seed_list
from bench.experiment.open import Overrides, open_grid
from bench.findings.decision import vacuity, verdicts
from bench.provenance import LOCAL
from bench.record import RunResult
from bench.sweep.feasible import check_floors
from bench.sweep.trials import resolve_trials
from bench.training.loop import train
from bench.trial import Trial


def _train(trial: Trial) -> str:
    """One pilot trial in its own process: its plugins, its threads; the run record as JSON."""
    plugins.load(list(trial.plugins), env=False)
    torch.set_num_threads(trial.threads)
    done = trial.out_dir / "result.json"
    if done.is_file():
        return done.read_text()
    return train(trial.cfg, trial.out_dir, progress=False).to_json()


def learned_at(result: RunResult, probe: str, bar: float) -> int | None:
    """The first evaluation step whose dev bits per answer on `probe` fell below `bar`."""
    return next((e["step"] for e in result.history
                 if e.get("probe_bpc", {}).get(probe, float("inf")) < bar), None)


def table(trials: list[Trial], results: list[RunResult], costs: Floors) -> pd.DataFrame:
    """Per setting and probe target whose no-recall floor is above 0: test bits per answer (mean
    over the pilot seeds), the floor, its noise bar (`vacuity.bar`), the seeds that learned it
    (test bits below the bar) and the latest step at which a learning seed's dev reading first
    fell below it."""
    rows = []
    for setting in dict.fromkeys(t.setting for t in trials):
        mine = [(t, r) for t, r in zip(trials, results, strict=True) if t.setting == setting]
        for probe, cost in costs(mine[0][0].values).items():
            if cost.floor == 0:
                continue
            bar = vacuity.bar(cost)
            bits = [r.probe_bpc_test[probe] for _, r in mine]
            steps = [learned_at(r, probe, bar) for _, r in mine]
            rows.append({"setting": setting, "probe": probe, "bits/answer": sum(bits) / len(bits),
                         "no-recall": cost.floor, "bar": bar,
                         "learned": f"{sum(b < bar for b in bits)}/{len(mine)}",
                         "by step": max((s for s in steps if s is not None), default=None),
                         "steps": mine[0][1].steps})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pilot", description=about(__doc__))
    p.add_argument("grid", type=Path, help="grid file, e.g. ablations/heads_grid.yaml")
    p.add_argument("--seeds", type=checked(int, "a whole number of seeds, 1 or more",
                                           lambda n: n >= 1), default=2,
                   help="pilot seeds per setting: the grid's first design seeds, then seeds "
                   "after its last (default 2)")
    add_set(p, "override a config key in every pilot trial, e.g. train.steps=500")
    p.add_argument("--results-dir", type=Path, default=LOCAL, help="where <grid>/pilot/ goes")
    args = p.parse_args(argv)
    try:
        grid = open_grid(args.grid, Overrides(parse_sets(args.sets)))
        seeds = pilot_seeds(grid.design_seeds or [], max(seed_list(grid.seeds)), args.seeds)
        trials = resolve_trials(grid.model_copy(update={"seeds": seeds}), False,
                                results_dir=args.results_dir)
        costs = check_floors(grid)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    first = [t for t in trials if t.seed == seeds[0]]
    trials = [dataclasses.replace(t, out_dir=t.out_dir.parent.parent / "pilot" / t.hash)
              for t in trials]
    at_once = max(1, int((os.cpu_count() or 1) // grid.resources.cpu))
    print(f"pilot of {grid.name}: {len(first)} settings x seeds {seeds} (design data, never "
          f"a confirmation), {at_once} at once, in {trials[0].out_dir.parent}")
    with multiprocessing.get_context("spawn").Pool(at_once) as pool:
        results = [RunResult.from_json(r) for r in pool.map(_train, trials, chunksize=1)]
    df = table(trials, results, costs)
    if df.empty:
        print("the grid's corpus plants no probe that needs recall: nothing to learn")
        return 0
    print(df.to_markdown(index=False, floatfmt=".3g"))
    df.to_csv(trials[0].out_dir.parent / "pilot.csv", index=False)
    runs_table(trials, results).to_csv(trials[0].out_dir.parent / "runs.csv", index=False)
    if zero := sorted({name for trial in trials for name, cost in costs(trial.values).items()
                       if cost.floor == 0}):
        print(f"not shown: {', '.join(zero)}, whose no-recall floor is 0 (repeated answers are "
              "copied): nothing to learn without recall")
    bad, notes = unanswerable(grid, runs_table(trials, results), costs)
    for line in notes:
        print(line)
    for line in bad:
        print(f"cannot answer {line} at {trials[0].cfg.train.steps} steps: train longer, "
              "change the setting, or change the claim")
    return 3 if bad else 0


def pilot_seeds(design: list[int], last: int, n: int) -> list[int]:
    """The first n design seeds, then seeds after the grid's `last`: never a seed it confirms."""
    return (list(design) + list(range(last + 1, last + 1 + n)))[:n]


def runs_table(trials: list[Trial], results: list[RunResult]) -> pd.DataFrame:
    """The pilot's runs as runs.csv holds a sweep's: grid values, seed, the corpus read (its
    identity from the trial's config.json) and each probe target's test bits per answer and gap
    (bits less the floor with recall, where known)."""
    rows = []
    for t, r in zip(trials, results, strict=True):
        gaps = {f"test_probe_gap.{p}": b - f for p, b in r.probe_bpc_test.items()
                if (f := r.probe_floor.get(p)) is not None}
        data = json.loads((t.out_dir / "config.json").read_text())["dataset"]
        rows.append({**t.values, "seed": t.seed, **gaps,
                     **{f"dataset.{k}": data[k] for k in ("name", "prefix", "n_bytes", "sha256")},
                     **{f"test_probe_bpc.{p}": b for p, b in r.probe_bpc_test.items()}})
    return pd.DataFrame(rows)


def unanswerable(grid: Grid, runs: pd.DataFrame, costs: Floors) -> tuple[list[str], list[str]]:
    """The claims on a probe's bits per answer the pilot's runs leave unanswerable, and notes on
    those some of whose pilot seeds are vacuous, by the findings' own path: each claim alone
    through `verdicts.verdict_table` on `runs` (as runs.csv holds them), the cells' floors
    from the grid (`costs`); in words."""
    bad, notes = [], []
    for c in grid.claims:
        if vacuity.target(c.metric) is None:
            continue
        table = verdicts.verdict_table([c], runs, reading=verdicts.Reading(costs, False))
        for _, row in table.iterrows():
            why = str(row["reason"]).split("; ")[0] if isinstance(row["reason"], str) else ""
            if why.startswith("unanswerable"):
                bad.append(f"{row['claim']}: {why}")
            elif " seeds vacuous: " in why:
                notes.append(f"note: {row['claim']}: {why}")
    return bad, notes


if __name__ == "__main__":
    raise SystemExit(main())
