"""A committed result checked from its folder and git alone, as a reviewer would: its grid file
(grid.yaml), its per-seed values (runs.csv) and the findings it claims (findings.csv). Every
verdict is recomputed (`judge`: the claims' tests, the plan's trials and the
pre-registration check) and compared with the committed findings, column by column.

The registered analysis is the code of the plan's first commit (`prereg.Registration`): where
today's analysis code differs from it, the result is recomputed with that code too, taken from
git into a scratch folder and run as `python -m bench.report GRID --runs RUNS --out DIR` (the
command every version of the code has); the committed findings are held against the
registered code's, and where today's code decides otherwise both are printed. The registered
code decides the statistics only, which looks had to run among them: what counts as a valid
result (rows, seeds, values, dates, files, and each row's trial where the caller can rebuild
it: `bench.sweep.recompute`) is today's check for every result, whenever it was registered
(`_today`). What this returns is enough to regenerate findings.md whole
(`bench.findings.presentation.page.regenerate`): the registered code's page, the findings it is
held against and today's registration line."""

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.config import ConfigError
from bench.experiment.catalogue import RUN_TIME, as_today, today
from bench.experiment.open import open_grid
from bench.findings.decision import evidence
from bench.findings.reading import measurement, perseed

from . import prereg
from .git import git
from .judge import Judged, Recomputed, judge
from .shared import publication, shared_line

# what a finding says: compared between the committed findings.csv and the recomputed one
KEYS = ("claim", "verdict", "evidence", "effect", "p", "level", "p_opposite", "level_opposite",
        "look", "n", "seed_range", "rule", "ci_low", "ci_high", "reason")
FILES = ("grid.yaml", "runs.csv", "findings.csv", "findings.md")


@dataclass(frozen=True)
class Checked:
    """One result folder verified: a line per claim (its verdict, its evidence and why), the
    differences from its committed findings.csv (against the registered code's findings where
    today's code is not the registered one), what today's code decides otherwise (`moved`), the
    results elsewhere in the repository that hold its trials, the registered seed starts no
    result holds (`unpublished`; those a grid file withdraws, with their reasons: `withdrawn`),
    and the evidence. What findings.md is regenerated from: `table`
    (the findings the committed ones are held against), `registered` (today's registration
    check: its line is the page's) and `page` (findings.md as the registered code writes it;
    None where today's code is the registered one)."""

    folder: Path
    lines: list[str]
    differ: list[str]
    evidence: str
    moved: list[str]
    shared: str | None
    table: pd.DataFrame
    registered: prereg.Registration
    unpublished: str | None = None
    withdrawn: str | None = None
    page: str | None = None


def folders(paths: list[Path]) -> list[Path]:
    """The result folders under `paths`: each path holding findings.csv, else every folder below
    it that does; ConfigError for a path with neither."""
    out = []
    for path in paths:
        found = [path] if (path / "findings.csv").is_file() else sorted(
            f.parent for f in path.rglob("findings.csv")
            if not set(f.relative_to(path).parts) & RUN_TIME)  # not a sweep's own artifacts
        if not found:
            raise ConfigError(f"{path}: no findings.csv there or below (a result folder holds "
                              f"{', '.join(FILES)})")
        out += found
    return out


def _findings(path: Path) -> pd.DataFrame:
    """A committed findings.csv; ConfigError where it is empty or has no claim column."""
    try:
        table = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: empty: a findings.csv holds a header and a row per claim "
                          "(docs/claims.md, Findings files)") from None
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not a findings.csv ({err})") from None
    if lacking := [k for k in KEYS if k not in table]:
        raise ConfigError(f"{path}: no column {', '.join(lacking)} (a findings.csv has the "
                          "columns of docs/claims.md, Findings files)")
    return table


def _differ(mine: pd.DataFrame, theirs: pd.DataFrame) -> list[str]:
    """Where two findings tables disagree, in words (`theirs` the committed one): rows one of
    them lacks, then each value of KEYS that differs in the rows both have."""
    out = [f"{claim}: a row {where}" for claim, where in
           [*((c, "committed, not recomputed") for c in theirs["claim"]
              if c not in set(mine["claim"])),
            *((c, "recomputed, not committed") for c in mine["claim"]
              if c not in set(theirs["claim"]))]]
    both = theirs.set_index("claim")
    for _, row in mine.iterrows():
        if row["claim"] not in both.index:
            continue
        was = both.loc[row["claim"]]
        for key in KEYS[1:]:
            x, y = (np.nan if isinstance(v, str) and v == "" else v  # an empty cell is NaN
                    for v in (row[key], was[key]))
            same = (pd.isna(x) and pd.isna(y)) or (
                np.isclose(float(x), float(y), rtol=1e-9, atol=1e-12)
                if isinstance(x, int | float) and isinstance(y, int | float) else str(x) == str(y))
            if not same:
                out.append(f"{row['claim']}: {key} {y!r} committed, {x!r} recomputed")
    return out


def _waited(judged: Judged, then: pd.DataFrame) -> list[str]:
    """Where today's analysis code would wait for a look the sweep did not run and the
    registered code does not (its findings leave no claim undecided), in words."""
    if not judged.waits or (then["evidence"] == "unverified").any():
        return []
    return [f"today's analysis code: {judged.waits} (the registered code, whose decision "
            "stands, decides every claim at the looks that ran)"]


def _moved(today: pd.DataFrame, then: pd.DataFrame) -> list[str]:
    """Each claim whose verdict or evidence today's analysis code decides otherwise than the
    registered code, in words."""
    old = then.set_index("claim")
    out = []
    for _, row in today.iterrows():
        if row["claim"] not in old.index:
            continue
        was = old.loc[row["claim"]]
        now, before = (f"{r['verdict']}, {r['evidence']}" for r in (row.fillna(""),
                                                                    was.fillna("")))
        if now != before:
            out.append(f"today's analysis code: {row['claim']}: {now} (the registered code, "
                       f"whose verdict stands: {before})")
    return out


def relabelled(registered: prereg.Registration) -> bool:
    """Whether today's checks relabel the registered code's findings (`_today`)."""
    return registered.evidence in ("exploratory", "unverified")


def _today(then: pd.DataFrame, judged: Judged) -> tuple[pd.DataFrame, prereg.Registration]:
    """The registered code's findings under today's checks of what counts as a valid result
    (rows, seeds, values, dates, files: `judge`'s `valid`, whatever code registered the
    result), and the registration they make: where today's checks make it exploratory or
    unverified, so are the registered code's verdicts; where they do not, the registered code's
    own labels stand, its decision of which looks had to run among them (a statistics
    decision, as its verdicts are: a claim it left waiting for a look the sweep did not run
    makes the result unverified, one only today's code would wait for does not)."""
    valid = judged.valid
    if valid.evidence == "exploratory":
        return evidence.exploratory(then, valid.why), valid
    if valid.evidence == "unverified":
        return evidence.unverified(then, valid.why), valid
    short = then[then["evidence"] == "unverified"]["reason"].dropna().astype(str)
    if valid.evidence == "confirmatory" and len(short):
        why = f"the registered analysis code: {short.iloc[0].rsplit('; ', 1)[-1]}"
        return then, prereg.Registration(f"Pre-registration: unverified: {why}.", "unverified",
                                         why, valid.commit, valid.code_moved)
    return then, valid


def _grid_read(folder: Path, top: Path) -> Path:
    """The grid file the registered code reads: today's file of the grid where the runs say it
    lay (their `plan_file`, named as today: `catalogue.MOVED`), where it still holds the
    folder's grid (the same YAML, its plugins the same files), so that its plugins' relative
    paths resolve; else the folder's grid.yaml."""
    own = folder / "grid.yaml"
    planned = pd.read_csv(folder / "runs.csv").get("plan_file", pd.Series(dtype=object)).dropna()
    if not len(planned):
        return own
    where = top / today(str(planned.iloc[0]))
    try:
        same = where.is_file() and as_today(where, where.parent, top) == as_today(
            own, (top / str(planned.iloc[0])).parent, top)
    except ConfigError:  # today's file no longer reads as a grid
        same = False
    return where if same else own


def registered_findings(folder: Path, commit: str) -> tuple[pd.DataFrame, str]:
    """The folder's findings (findings.csv as a table, findings.md as text) recomputed by the
    analysis code of `commit`: its bench/ and variants/ from git into a scratch folder, run
    there as `python -m bench.report GRID --runs runs.csv`, GRID the grid file that holds the
    folder's grid where the runs say it lay (`_grid_read`); ConfigError where git cannot give
    that code or it fails. The scratch output lies outside any repository, so the page holds
    no line of the repository around the folder (its Shared runs)."""
    top = Path((git(folder, "rev-parse", "--show-toplevel") or ".").strip())
    grid = _grid_read(folder, top)
    with tempfile.TemporaryDirectory(prefix="attnbench-registered-") as scratch:
        code, out = Path(scratch) / "code", Path(scratch) / "out"
        code.mkdir()
        archive = subprocess.run(["git", "archive", commit, "bench", "variants"],
                                 cwd=top, capture_output=True)
        unpack = subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout,
                                capture_output=True)
        if archive.returncode or unpack.returncode:
            raise ConfigError(f"{folder}: the registered analysis code (commit {commit[:10]}) "
                              f"is not in this repository: {archive.stderr.decode().strip()}")
        ran = subprocess.run(
            [sys.executable, "-m", "bench.report", str(grid.resolve()),
             "--runs", str((folder / "runs.csv").resolve()), "--out", str(out)],
            cwd=code, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": str(code)})
        if ran.returncode:
            raise ConfigError(f"{folder}: the registered analysis code (commit {commit[:10]}) "
                              f"failed: {ran.stderr.strip().splitlines()[-1:]}")
        return pd.read_csv(out / "findings.csv"), (out / "findings.md").read_text()


def verify(folder: Path, recompute: Callable[[Path, pd.DataFrame], Recomputed] | None = None
           ) -> Checked:
    """Recompute one result folder's findings (see the module doc), each row's trial too where
    `recompute` is given (`bench.sweep.recompute.rows`: bench.verify's); ConfigError for a
    folder without its files, or a runs.csv or findings.csv that cannot be read as the
    grid's."""
    if missing := [f for f in FILES if not (folder / f).is_file()]:
        raise ConfigError(f"{folder}: no {', '.join(missing)} (a result folder holds "
                          f"{', '.join(FILES)})")
    grid_file = folder / "grid.yaml"
    grid = open_grid(grid_file, imports=False)  # the runs hold what the verdicts read
    runs = perseed.read(folder / "runs.csv", grid)
    committed = _findings(folder / "findings.csv")
    rows = recompute(folder, runs) if recompute is not None else None
    cost = measurement.read(folder / measurement.FILE)
    judged = judge(grid, runs, pd.DataFrame(), grid_file, rows, cost)
    table, registered = judged.table, judged.registered
    moved, page = [], None
    if registered.commit and registered.code_moved:
        then, page = registered_findings(folder, registered.commit)
        then, registered = _today(then, judged)
        moved = _moved(table, then) + _waited(judged, then)
        table = then
    lines = []
    for c in grid.claims:
        row = table[table["claim"] == c.id].iloc[-1].fillna("")
        why = registered.why if row["evidence"] in ("unverified", "exploratory") else ""
        why = why or (row["reason"] if row["evidence"] in ("exploratory", "") else "")
        lines.append(", ".join(filter(None, [f"{c.id}: {row['verdict']}", row["evidence"]]))
                     + (f" ({why})" if why else ""))
    evidence = registered.evidence or str(table["evidence"].dropna().iloc[0]
                                          if table["evidence"].notna().any() else "")
    return Checked(folder, lines, _differ(table, committed), evidence, moved,
                   shared_line(runs, folder), table, registered,
                   *publication(grid, runs, folder), page)
