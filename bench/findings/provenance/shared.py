"""Runs a result shares with the other results of its repository, wherever they lie. A trial is
named by the hash of its resolved config, so a grid whose trials hash the same as another
grid's finds them finished and trains nothing (adaptive_vs_dynamic reuses 12 trials of
span_limit), and a results folder copied under another parent holds the same trials as its
original: the claims then rest partly, or wholly, on the same runs, not on independent
replications, and the findings say so beside the pre-registration line. And the seed starts a
grid registers (`seeds: {start, replications}`) that no result of the repository holds: a
replication registered and not published is named, unless a grid file withdraws it with a
reason, which is said instead (`publication`)."""

import subprocess
from pathlib import Path

import pandas as pd

from bench.config import ConfigError
from bench.experiment.grid import Grid
from bench.experiment.open import load_grid
from bench.metrics import SEEDS


def _top(out_dir: Path) -> Path:
    """The repository that holds out_dir; a SubprocessError or OSError outside one."""
    return Path(subprocess.run(["git", "rev-parse", "--show-toplevel"],
                               cwd=out_dir.resolve().parent, capture_output=True, text=True,
                               check=True).stdout.strip())


def _others(out_dir: Path) -> dict[Path, str]:
    """Every other runs.csv of the repository that holds out_dir (tracked, or new and not
    ignored; else of out_dir's parent folder), with its folder's name in the repository."""
    where = out_dir.resolve()
    try:
        top = _top(out_dir)
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard", "--", "*runs.csv"], cwd=top,
                                capture_output=True, check=True).stdout.decode().split("\0")
        found = [top / f for f in listed if f.endswith("runs.csv")]
    except (OSError, subprocess.SubprocessError):
        top, found = where.parent, list(where.parent.glob("*/runs.csv"))
    return {f.resolve(): f.parent.relative_to(top).as_posix() for f in sorted(found)
            if f.is_file() and f.resolve().parent != where}


def shared_line(runs: pd.DataFrame, out_dir: Path) -> str | None:
    """'Shared runs: ...' naming each other result of the repository (`_others`) that holds
    trials of `runs` (its `trial` hashes, one per trial), or None where none does."""
    if "trial" not in runs:
        return None
    mine = set(runs["trial"].dropna())
    found = []
    for other, name in _others(out_dir).items():
        try:
            theirs = set(pd.read_csv(other, usecols=["trial"])["trial"])
        except (ValueError, OSError, pd.errors.ParserError):  # not a result's runs.csv
            continue
        if n := len(mine & theirs):
            found.append(f"{'all' if n == len(mine) else n} are trials of {name} too")
    if not found:
        return None
    return (f"Shared runs: of these {len(mine)} trials, {'; '.join(found)} (the same trial "
            "hashes: one set of runs serves both), so these claims and theirs rest partly on "
            "the same evidence, not on independent replications.")


def _seeds_of(runs_csv: Path, name: str) -> set[int]:
    """The seeds a result of grid `name` holds (its grid.yaml beside it names the grid);
    empty for another grid's result or one that cannot be read."""
    try:
        if load_grid(runs_csv.parent / "grid.yaml").name != name:
            return set()
        runs = pd.read_csv(runs_csv)
    except (ConfigError, OSError, ValueError, pd.errors.ParserError):
        return set()
    col = next((s for s in SEEDS if s in runs), None)
    return set() if col is None else set(pd.to_numeric(runs[col], errors="coerce").dropna())


def _withdrawn(grid: Grid, runs: pd.DataFrame, out_dir: Path) -> dict[int, str]:
    """The registered starts withdrawn, with their reasons: by the result's grid.yaml and by
    the grid file its runs ran from (their `plan_file`, as it is now: a withdrawal is written
    after the trials, and results are records), where that file is still grid.name's."""
    out = dict(grid.looks.withdrawn)
    files = set(runs.get("plan_file", pd.Series(dtype=object)).dropna().astype(str))
    try:
        live = load_grid(_top(out_dir) / files.pop()) if len(files) == 1 else None
    except (ConfigError, OSError, subprocess.SubprocessError):  # gone, or not a grid now
        live = None
    if live is not None and live.name == grid.name and live.looks is not None:
        out |= live.looks.withdrawn
    return out


def publication(grid: Grid, runs: pd.DataFrame, out_dir: Path) -> tuple[str | None, str | None]:
    """The seed starts `grid` registers (its start and `replications`) whose first look's
    seeds no result of grid.name in the repository holds (this one included): a line naming
    those not withdrawn ('Unpublished: ...'; `bench.verify` exits 5) and a line giving the
    reasons of those withdrawn (`_withdrawn`; 'Withdrawn: ...'), None for each where there are
    none (or the grid runs a list of seeds)."""
    if grid.looks is None or not grid.looks.replications:
        return None, None
    held = set().union(*(_seeds_of(f, grid.name) for f in
                         [*_others(out_dir), out_dir.resolve() / "runs.csv"]))
    first = grid.looks.looks[0]
    lost = [s for s in (grid.looks.start, *grid.looks.replications)
            if not held & set(range(s, s + first))]
    withdrawn = _withdrawn(grid, runs, out_dir) if lost else {}
    named = [s for s in lost if s in withdrawn]
    said = None if not named else (
        "Withdrawn: " + "; ".join(f"seed start {s}: {withdrawn[s]}" for s in named)
        + f" (seeds.withdrawn: registered by {grid.name}, not published, and said so).")
    if not (unpublished := [s for s in lost if s not in withdrawn]):
        return None, said
    return (f"Unpublished: seed start {', '.join(map(str, unpublished))} is registered by "
            f"{grid.name} (seeds.start or seeds.replications), and no result of this "
            "repository holds its first look's seeds: a replication registered and not "
            "published (or not run yet), so the published ones are not the whole registered "
            "set; run it, or withdraw it with its reason (seeds.withdrawn).", said)
