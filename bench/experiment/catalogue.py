"""Every grid, its experiment and its committed runs, read from the grid files and results/,
never written by hand. An experiment is named after its primary grid; a repeat or pilot grid
belongs to the experiment `of` names, a superseded grid to that of the grid that replaces it.
It lies in two folders that mirror each other (FILES): what is asked in ablations/, what came
out in results/<experiment>/, a folder per run (RUN_NAMES); `python -m bench.grids` writes each
one's README and the index docs/grids.md from these.
"""

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench import plugins
from bench.config import ConfigError
from bench.provenance import GridText

from .grid import Grid
from .open import load_grid

FILES = """An experiment's files lie together, named after it: in ablations/ its primary grid
`<experiment>.yaml`, each other grid (repeat, pilot, superseded) `<experiment>.<variation>.yaml`,
the variation the grid's name less the experiment's, as in its run folders' names
(`heads_grid.data7.yaml` holds heads_grid_data7, `span_limit.span_pilot.yaml` span_pilot), and a
plugin its grids load beside them (`window.py`): `ls ablations/<experiment>.*` lists them all;
in results/<experiment>/ the hand-written NOTES.md (design, prediction and log, a section per
run), the generated README.md and a folder per run."""

# files moved since trials recorded them (`plan_file`, plugin paths relative to it): old path
# -> today's, for what reads today's tree (git reads the old path at the run's commit)
MOVED = {
    "ablations/heads_grid_data7.yaml": "ablations/heads_grid.data7.yaml",
    "ablations/heads_h8_long.yaml": "ablations/heads_grid.heads_h8_long.yaml",
    "ablations/span_pilot.yaml": "ablations/span_limit.span_pilot.yaml",
    "ablations/span_pilot_1500.yaml": "ablations/span_limit.span_pilot_1500.yaml",
    "ablations/span_enwik8.yaml": "ablations/span_enwik8_floor.span_enwik8.yaml",
    "ablations/span_enwik8_adamw.yaml": "ablations/span_enwik8_floor.span_enwik8_adamw.yaml",
    "ablations/span_enwik8_adamw_pilot.yaml":
        "ablations/span_enwik8_floor.span_enwik8_adamw_pilot.yaml",
    "ablations/span_enwik8_layers.yaml": "ablations/span_enwik8_floor.span_enwik8_layers.yaml",
    "ablations/span_enwik8_restated.yaml": "ablations/span_enwik8_floor.span_enwik8_restated.yaml",
    "ablations/smoke.yaml": "examples/smoke.yaml",
    "examples/window_plugin.py": "ablations/window.py",
}

RUN_NAMES = """A run's folder is named `[pilot-]seeds<first seed>[-<grid>][-<variation>]`:
`pilot-` for a run on design seeds or of a pilot grid (findings exploratory whatever the
seeds), the first seed it ran, the grid where it is not the experiment's primary grid (its name
less the experiment's, `seeds900-data7` for heads_grid_data7), and what else sets it apart from
the experiment's other runs of the same seeds (`-avx2-fp32`: AVX2 kernels and fp32, not the
AVX-512 and bf16 of the rest; `-r32`: another ramp; `-enwik8`: the enwik8 prefix)."""


def today(path: str) -> str:
    """A repository path (posix, from its top) as it is named today (MOVED)."""
    return MOVED.get(path, path)


def plugins_today(listed: list[str], top: Path) -> list[str]:
    """A grid's plugin files (absolute paths, as `open_grid` lists them) named as today in
    repository `top` (`today`): where a trial's plugin lay when it ran, it may lie elsewhere now."""
    return [str(top / today(Path(p).relative_to(top).as_posix()))
            if plugins.is_file(p) and Path(p).is_relative_to(top) else p for p in listed]


def as_today(path: Path, folder: Path, top: Path) -> dict:
    """The grid a grid file states (`load_grid`), its plugin files as today's paths in
    repository `top` (`today`), resolved from `folder`, where the file lay when it ran."""
    grid = load_grid(GridText(path.read_text(), str(path), folder))
    return grid.model_dump() | {"plugins": [
        today(os.path.relpath(os.path.normpath(folder / p), top)) if plugins.is_file(p) else p
        for p in grid.plugins]}


def file_name(grid: str, experiment: str) -> str:
    """The file name of grid `grid` of `experiment` in ablations/ (FILES)."""
    return f"{experiment}.yaml" if grid == experiment else \
        f"{experiment}.{grid.removeprefix(f'{experiment}_')}.yaml"


@dataclass(frozen=True)
class Entry:
    """One grid file: its grid, its path, and the committed results folders of its runs."""

    grid: Grid
    file: Path
    folders: tuple[Path, ...]


def _owner(folder: Path, names: set[str]) -> str | None:
    """The grid a run folder (results/<experiment>/<run>/) holds runs of: its grid.yaml's name,
    else the experiment's primary grid, the folder above it; None: not a grid's run folder
    (results/speed/..., or a folder with no file)."""
    if (folder / "grid.yaml").is_file():
        return load_grid(folder / "grid.yaml").name
    if not any(p.is_file() for p in folder.iterdir()):
        return None
    return folder.parent.name if folder.parent.name in names else None


# what a sweep writes beside its results at run time, which git ignores (.gitignore)
RUN_TIME = {"mlartifacts", "ray", "trials", "checkpoints"}


def entries(ablations: Path, results: Path) -> list[Entry]:
    """Every grid file in `ablations`, with the run folders under `results` holding its runs:
    results/<experiment>/<run>/ (RUN_NAMES)."""
    grids = {path: load_grid(path) for path in sorted(ablations.glob("*.yaml"))}
    names = {g.name for g in grids.values()}
    held: dict[str, list[Path]] = {}
    for folder in sorted(p for p in results.glob("*/*") if p.is_dir()):
        if (owner := _owner(folder, names)) is not None:
            held.setdefault(owner, []).append(folder)
    return [Entry(g, path, tuple(held.get(g.name, []))) for path, g in grids.items()]


def experiments(found: list[Entry]) -> dict[str, str]:
    """Each grid's experiment (the name of the primary grid it leads to through `of` and
    `superseded_by`); ConfigError naming a grid that leads to no primary grid."""
    by_name = {e.grid.name: e for e in found}
    out = {}
    for e in found:
        seen, grid = [e.grid.name], e.grid
        while grid.status != "primary":
            target = grid.superseded_by or grid.of
            if target not in by_name or target in seen:
                raise ConfigError(f"{e.file}: status {e.grid.status_line!r} leads to "
                                  f"{' -> '.join([*seen, str(target)])}, not to a primary grid "
                                  f"in {e.file.parent}")
            seen.append(target)
            grid = by_name[target].grid
        out[e.grid.name] = grid.name
    return out


def check_names(found: list[Entry]) -> None:
    """ConfigError naming each grid file not named after its experiment (FILES), and the name
    it should have."""
    exp = experiments(found)
    if wrong := [f"{e.file} holds grid {e.grid.name} of experiment {exp[e.grid.name]}: "
                 f"expected {e.file.with_name(file_name(e.grid.name, exp[e.grid.name]))}"
                 for e in found if e.file.name != file_name(e.grid.name, exp[e.grid.name])]:
        raise ConfigError("; ".join(wrong) + " (an experiment's grid files are named after it, "
                          "docs/grids.md)")


def verdicts(folder: Path) -> str:
    """A results folder's claims' verdicts in words, and their evidence, e.g. '4 reproduced, 1
    inconclusive (confirmatory)' ('' with no findings.csv); a claim's parts are not counted."""
    path = folder / "findings.csv"
    if not path.is_file():
        return ""
    table = pd.read_csv(path)
    claims = table[~table["claim"].str.contains("[", regex=False)]
    counts = Counter(claims["verdict"])
    evidence = sorted(set(claims.get("evidence", pd.Series(dtype=str)).dropna()))
    words = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
    said = [e for e in evidence if f"({e})" not in words]  # 'holds (exploratory)' says it
    return words + (f" ({', '.join(said)})" if said else "")
