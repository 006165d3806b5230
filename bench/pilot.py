"""Before spending seeds: does each arm of a grid learn each probe at the grid's steps? Its
settings trained on pilot seeds (the grid's first design seeds: design data, never counted
towards a confirmation), each probe's bits per answer against the no-recall floor, and the
step at which the dev reading first fell below UNLEARNED of that floor.

python -m bench.pilot ablations/heads_grid.yaml [--seeds 2] [--set train.steps=500]

No Ray, no MLflow: the trials train here, at most as many at once as the grid's
resources.cpu allows on this machine, in runs/<grid>/pilot/ (a rerun reuses them). Exit 0, or
3 naming each claim its findings would call unanswerable on these seeds (no arm it reads learned
its probe in most pilot seeds, or a non-inferiority claim's reference arm did not): train
longer, change the setting (a probe may be tuned until it is learned), or change the claim.
"""

import argparse
import dataclasses
import multiprocessing
import os
import sys
from pathlib import Path

import pandas as pd
import torch

from bench import plugins
from bench.cli import about, add_set, checked
from bench.config import ConfigError, parse_sets
from bench.experiment.claims import PROBE_METRIC, cells
from bench.experiment.grid import Grid, seed_list
from bench.experiment.open import Overrides, open_grid
from bench.findings import samples
from bench.findings.verdicts import UNLEARNED
from bench.provenance import LOCAL
from bench.record import RunResult
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


def table(trials: list[Trial], results: list[RunResult], no_recall: dict[str, float]
          ) -> pd.DataFrame:
    """Per setting and probe: test bits per answer (mean over the pilot seeds), the no-recall
    floor, the seeds that learned it (test bits below UNLEARNED of the floor) and the latest
    step at which a learning seed's dev reading first did."""
    rows = []
    for setting in dict.fromkeys(t.setting for t in trials):
        mine = [r for t, r in zip(trials, results, strict=True) if t.setting == setting]
        for probe, floor in no_recall.items():
            bits = [r.probe_bpc_test[probe] for r in mine]
            steps = [learned_at(r, probe, UNLEARNED * floor) for r in mine]
            learned = sum(b <= UNLEARNED * floor for b in bits)
            rows.append({"setting": setting, "probe": probe, "bits/answer": sum(bits) / len(bits),
                         "no-recall": floor, "learned": f"{learned}/{len(mine)}",
                         "by step": max((s for s in steps if s is not None), default=None),
                         "steps": mine[0].steps})
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
    no_recall = {probe: floor for probe, floor in first[0].cfg.corpus().describe().get(
        "no_recall", {}).items() if floor > 0}  # a probe answered without recall: nothing to learn
    if not no_recall:
        print("the grid's corpus plants no probe that needs recall: nothing to learn")
        return 0
    df = table(trials, results, no_recall)
    print(df.to_markdown(index=False, floatfmt=".3g"))
    bad = unanswerable(grid, trials, results, no_recall)
    for line in bad:
        print(f"cannot answer {line} at {trials[0].cfg.train.steps} steps: train longer, "
              "change the setting, or change the claim")
    return 3 if bad else 0


def pilot_seeds(design: list[int], last: int, n: int) -> list[int]:
    """The first n design seeds, then seeds after the grid's `last`: never a seed it confirms."""
    return (list(design) + list(range(last + 1, last + 1 + n)))[:n]


def unanswerable(grid: Grid, trials: list[Trial], results: list[RunResult],
                 no_recall: dict[str, float]) -> list[str]:
    """The claims the pilot says the grid cannot answer, by the findings' own rule
    (`samples.unanswerable`: no arm learned the claim's probe in most pilot seeds, or a
    non-inferiority claim's reference arm did not), in words."""
    out = []
    for c in grid.claims:
        probe = PROBE_METRIC.match(c.metric)
        if not probe or probe[3] not in no_recall:
            continue
        pairs = [(rows, base) for _, rows, base in cells(c, grid.grid)]
        runs = pd.DataFrame([{**t.values, "seed": t.seed, c.metric: r.probe_bpc_test[probe[3]],
                              f"dataset.no_recall.{probe[3]}": no_recall[probe[3]]}
                             for t, r in zip(trials, results, strict=True)])
        learned = samples.learning(c, runs, pairs, sorted({t.seed for t in trials}), UNLEARNED)
        if why := samples.unanswerable(c, learned, pairs):
            out.append(f"{c.id}: {why}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
