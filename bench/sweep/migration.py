"""What a rename changes in a grid's records: the trial hashes its trials had under their
variants' earlier names (`variants.renames.RENAMED`), and committed result folders rewritten to
today's names (`runs.csv`, `grid.yaml`); `python -m bench.retag` applies them once."""

from pathlib import Path
from typing import Any

import pandas as pd

from bench.experiment.grid import Grid, parse, seed_list
from bench.experiment.open import read, to_text
from bench.tracking.store_migration import NAMED
from bench.trial import Trial
from variants.renames import RENAMED

from .trials import resolve_trials, trial_hash

PRECISIONS = ("fp32", "bf16-autocast")  # a record's precision, whichever machine ran it


def hash_renames(trials: list[Trial]) -> dict[str, str]:
    """Each trial's hash under an earlier name of its variant -> its hash now, in either
    precision (the records name theirs; this machine may resolve another)."""
    out = {}
    for t in trials:
        for (kind, old), now in RENAMED.items():
            if kind != "model.variant" or now != t.cfg.model.variant:
                continue
            before = t.cfg.model_copy(update={"model": t.cfg.model.model_copy(
                update={"variant": old})})  # as it was logged: validation would refuse it
            out |= {trial_hash(before, t.identity, p): trial_hash(t.cfg, t.identity, p)
                    for p in PRECISIONS}
    return out


def rename_grid(grid: Grid, where: str) -> Grid:
    """The grid with each earlier variant name, wherever a value of model.variant stands (a grid
    axis, the base, claims' rows and baselines, exclude rules, the report's baseline), replaced
    by its name now, validated again by the schema."""
    now = {old: new for (kind, old), new in RENAMED.items() if kind == "model.variant"}

    def walk(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        named = key in ("model.variant", "variant") and isinstance(value, str)
        return now.get(value, value) if named else value

    return parse(walk(grid.model_dump(mode="json", exclude_defaults=True)), where)


def migrate_folder(folder: Path) -> dict[str, int]:
    """A committed result folder (runs.csv, grid.yaml) at today's names: the grid file's
    variant names, the runs' names of variants and policies, and their trial hashes (resolved
    from the renamed grid at the runs' seeds; a run of a sweep with overrides keeps its hash,
    counted); returns how many of each changed."""
    written = read(folder / "grid.yaml")
    grid = rename_grid(written, f"{folder / 'grid.yaml'} (renamed)")
    runs = pd.read_csv(folder / "runs.csv")
    seeds = sorted(int(s) for s in runs["seed"].unique()) if "seed" in runs else seed_list(
        grid.seeds)
    trials = resolve_trials(grid.model_copy(update={"seeds": seeds}), False)
    hashes = hash_renames(trials)
    changed = {"grid names": int(grid != written), "names": 0, "trial hashes": 0,
               "trial hashes not found in the grid's trials": 0}
    for col, kind in NAMED.items():
        if col in runs:
            for (named, old), now in RENAMED.items():
                hit = runs[col].astype(str) == old
                if named == kind and hit.any():
                    runs.loc[hit, col] = now
                    changed["names"] += int(hit.sum())
    if "trial" in runs:
        hit = runs["trial"].isin(list(hashes))
        runs.loc[hit, "trial"] = runs.loc[hit, "trial"].map(hashes)
        changed["trial hashes"] = int(hit.sum())
        # a sweep run with --set or --data: its grid.yaml alone does not give its trials
        known = {trial_hash(t.cfg, t.identity, p) for t in trials for p in PRECISIONS}
        changed["trial hashes not found in the grid's trials"] = int(
            (~runs["trial"].isin(known)).sum())
    if any(changed.values()):
        if grid != written:  # through the schema: the file's comments and layout are not kept
            (folder / "grid.yaml").write_text(to_text(grid))
        runs.to_csv(folder / "runs.csv", index=False)
    return changed
