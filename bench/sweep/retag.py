"""What a rename changes in a grid's records: the trial hashes its trials had under their
variants' earlier names (`variants.names.RENAMED`), and committed result folders rewritten to
today's names (`runs.csv`, `grid.yaml`); `python -m bench.retag` applies them once."""

import re
from pathlib import Path

import pandas as pd

from bench.experiment import grid as grids
from bench.experiment.grid import seed_list
from bench.tracking.retag import NAMED
from variants.names import RENAMED

from .trials import Overrides, Trial, resolve_trials, trial_hash

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


def rename_grid_text(text: str) -> str:
    """A grid file's text with each earlier variant name, as a value of model.variant (a list
    item or one value), replaced by its name now."""
    for (kind, old), now in RENAMED.items():
        if kind == "model.variant":
            word = rf"(?<![\w-]){re.escape(old)}(?![\w-])"
            text = re.sub(rf"(model\.variant:\s*(?:\[[^\]\n]*)?){word}", rf"\g<1>{now}", text)
            text = re.sub(rf"(model\.variant:\s*\[[^\]\n]*?){word}", rf"\g<1>{now}", text)
    return text


def migrate_folder(folder: Path) -> dict[str, int]:
    """A committed result folder (runs.csv, grid.yaml) at today's names: the grid file's
    variant names, the runs' names of variants and policies, and their trial hashes (resolved
    from the renamed grid at the runs' seeds; a run of a sweep with overrides keeps its hash,
    counted); returns how many of each changed."""
    text = (folder / "grid.yaml").read_text()
    renamed_text = rename_grid_text(text)
    runs = pd.read_csv(folder / "runs.csv")
    grid = grids.from_text(renamed_text, f"{folder / 'grid.yaml'} (renamed)")
    seeds = sorted(int(s) for s in runs["seed"].unique()) if "seed" in runs else seed_list(
        grid.seeds)
    _, trials = resolve_trials(grid.model_copy(update={"seeds": seeds}), Overrides(), False)
    hashes = hash_renames(trials)
    changed = {"grid names": int(renamed_text != text), "names": 0, "trial hashes": 0,
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
        (folder / "grid.yaml").write_text(renamed_text)
        runs.to_csv(folder / "runs.csv", index=False)
    return changed
