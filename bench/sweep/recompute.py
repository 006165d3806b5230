"""Each row of a result recomputed as the trial it says it is (`rows`), beside the findings'
checks, which read runs and cannot build a config or a corpus: from the result's grid.yaml,
the row's setting and seed label and the precision it recorded, today's `trials.trial_hash`,
its corpus identity regenerated once per distinct data section (so a row that claims another
corpus is caught too) and, for a trial that recorded the code it imported (code_sha), its
plugin files' digests at its run commit. A row whose recorded trial is not that hash is named
with what it is instead where the grid holds it (the same setting at another seed: a seed label
moved with its `train.seed`), and the result is exploratory (`bench.findings.provenance.judge`).

Data paths resolve from the repository's top, where sweeps run; plugin files from the folder
the grid file lay in when it ran (the runs' `plan_file`), as they did then.
"""

import contextlib
import json
from pathlib import Path
from typing import Any

import pandas as pd

from bench import codehash, data, plugins
from bench.config import Config, ConfigError
from bench.experiment.catalogue import plugins_today
from bench.experiment.claims import num
from bench.experiment.grid import Grid
from bench.experiment.open import GridText, open_grid
from bench.findings.provenance.git import git
from bench.findings.provenance.judge import Recomputed
from bench.findings.reading.perseed import settings
from bench.findings.reading.samples import label, match

from . import trials

SHOWN = 3  # rows named in full; the rest counted
_CORPORA: dict[str, dict] = {}  # corpus identities by data section, across results


class _Rows:
    """One result's grid, opened with its plugins, and what its rows are recomputed from:
    the corpus identities (`_CORPORA`) and each (setting, seed, precision, code) trial's
    hash."""

    def __init__(self, top: Path, grid: Grid, runs: pd.DataFrame) -> None:
        self.top, self.grid, self.runs = top, grid, runs
        self.cells = settings(grid)
        self.base, self.preset = trials.base_of(grid)
        self.refusing = trials.refused(grid, self.cells)
        self.hashes: dict[tuple, str] = {}

    def config(self, cell: dict[str, Any], seed: int) -> Config:
        return trials.trial_config(cell, seed, self.base, self.preset, self.refusing)[0]

    def identity(self, cfg: Config) -> dict:
        """The corpus identity of a config's data section (built once; DataError, OSError)."""
        key = json.dumps([cfg.data.model_dump(mode="json"), cfg.model.span, cfg.train.block,
                          cfg.train.batch_size], sort_keys=True, default=str)
        if key not in _CORPORA:
            _CORPORA[key] = cfg.corpus().identity()
        return _CORPORA[key]

    def plugins(self, row: pd.Series) -> tuple[str, ...]:
        """The digests its trial's identity holds of the grid's plugin files: none for a trial
        that records no code_sha; else each file at its run commit (as it is now where git
        cannot give it)."""
        if not isinstance(row.get("code_sha"), str):
            return ()
        commit = row.get("run_commit")
        out = []
        for path in trials.own_plugins(self.grid.plugins):
            name = codehash.named(path)
            text = git(self.top, "show", f"{commit}:{name}") if isinstance(commit, str) and (
                not Path(name).is_absolute()) else None
            out.append(codehash.digest(text.encode() if text is not None else path.read_bytes()))
        return tuple(out)

    def hash(self, cell: dict[str, Any], seed: int, precision: str,
             plugins: tuple[str, ...]) -> str:
        key = (json.dumps(cell, sort_keys=True, default=str), seed, precision, plugins)
        if key not in self.hashes:
            cfg = self.config(cell, seed)
            self.hashes[key] = trials.trial_hash(cfg, self.identity(cfg), precision, plugins)
        return self.hashes[key]


def _cell(grid: Grid, row: pd.DataFrame) -> dict[str, Any]:
    """A row's setting as the grid's own values (`perseed.read` checked each is one)."""
    return next(c for c in settings(grid) if bool(match(row, c).iloc[0]))


def _instead(rows: _Rows, cell: dict[str, Any], seed: int, recorded: str, precision: str,
             plugins: tuple[str, ...]) -> str:
    """What a recorded trial hash is where it is not the row's: a trial of the grid at one of
    the runs' seeds (the same setting at another seed, another setting), else none of them."""
    col = "seed" if "seed" in rows.runs else "train.seed"
    seeds = sorted({int(s) for s in rows.runs[col].dropna()})
    for other in [cell, *(c for c in rows.cells if c != cell)]:
        for s in seeds:
            if rows.hash(other, s, precision, plugins) == recorded:
                return (f"that of seed {s}" if other == cell else
                        f"that of {label(other)} at seed {s}")
    return ("not its trial's, nor any trial's of the grid at the runs' seeds (another config, "
            "corpus, precision or plugin code)")


def _corpus(row: pd.Series, identity: dict) -> str:
    """How a row's recorded corpus (dataset.name, dataset.sha256) differs from its config's,
    or ""."""
    said = {k: row.get(f"dataset.{k}") for k in ("name", "sha256")}
    if all(not isinstance(v, str) or v == identity[k] for k, v in said.items()):
        return ""
    return (f"records corpus {said['name']} (sha256 {str(said['sha256'])[:12]}), the grid's "
            f"is {identity['name']} (sha256 {identity['sha256'][:12]})")


def _row(rows: _Rows, i: Any) -> str:
    """Why row `i` is not its trial, or ""."""
    row = rows.runs.loc[i]
    cell = _cell(rows.grid, rows.runs.loc[[i]])
    seed = int(row["seed"] if "seed" in row and pd.notna(row["seed"]) else row["train.seed"])
    named = f"line {int(i) + 2} ({label(cell)}, seed {num(seed)})"
    try:
        cfg = rows.config(cell, seed)
    except ConfigError as err:
        return f"{named}: not a trial of the grid ({err})"
    if why := _corpus(row, rows.identity(cfg)):
        return f"{named} {why}"
    plugins = rows.plugins(row)
    if rows.hash(cell, seed, str(row["precision"]), plugins) == row["trial"]:
        return ""
    return (f"{named}: its trial hash is "
            f"{_instead(rows, cell, seed, str(row['trial']), str(row['precision']), plugins)}")


def opened(folder: Path, top: Path, runs: pd.DataFrame) -> Grid:
    """The folder's grid.yaml with its plugins imported from where the grid file lay when it
    ran (the runs' plan_file's folder, else the result's), each as named today (a plugin moved
    since: `catalogue.plugins_today`)."""
    planned = runs.get("plan_file", pd.Series(dtype=object)).dropna()
    lay = (top / str(planned.iloc[0])).parent if len(planned) else folder
    text = (folder / "grid.yaml").read_text()
    grid = open_grid(GridText(text, str(folder / "grid.yaml"), lay), imports=False)
    return grid.model_copy(update={"plugins": plugins.load(plugins_today(grid.plugins, top))})


def rows(folder: Path, runs: pd.DataFrame) -> Recomputed:
    """Each row of `runs` (runs.csv of `folder`, as `perseed.read` gives it) held against the
    trial it says it is, of the folder's grid.yaml (module doc): the rows that are not, named
    (the first SHOWN in full), or why none could be recomputed."""
    if lacking := [c for c in ("trial", "precision") if c not in runs]:
        return Recomputed([], f"runs.csv records no {' or '.join(lacking)}")
    top = Path((git(folder, "rev-parse", "--show-toplevel") or str(folder)).strip())
    wrong = []
    try:
        with contextlib.chdir(top):  # data paths are relative to where the sweep ran
            recomputing = _Rows(top, opened(folder, top, runs), runs)
            wrong = [why for i in runs.index if (why := _row(recomputing, i))]
    except (ConfigError, data.DataError, OSError) as err:
        return Recomputed([], f"{type(err).__name__}: {err}")
    if len(wrong) > SHOWN:
        wrong = [*wrong[:SHOWN], f"{len(wrong) - SHOWN} rows more"]
    return Recomputed(wrong)
