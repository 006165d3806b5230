"""A committed result checked from its folder and git alone, as a reviewer would: its grid file
(grid.yaml), its per-seed values (runs.csv) and the findings it claims (findings.csv). Every
verdict is recomputed (`report.judge`: the claims' tests and the pre-registration check) and
compared with the committed findings, column by column."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.config import ConfigError
from bench.experiment.catalogue import RUN_TIME
from bench.experiment.open import open_grid

from .report import judge, read_per_seed

# what a finding says: compared between the committed findings.csv and the recomputed one
KEYS = ("claim", "verdict", "evidence", "effect", "p", "level", "p_opposite", "level_opposite",
        "look", "n", "seed_range")
FILES = ("grid.yaml", "runs.csv", "findings.csv")


@dataclass(frozen=True)
class Checked:
    """One result folder verified: a line per claim (its verdict, its evidence and why), the
    differences from its committed findings.csv, and the evidence of its findings."""

    folder: Path
    lines: list[str]
    differ: list[str]
    evidence: str


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


def _differ(mine: pd.DataFrame, theirs: pd.DataFrame) -> list[str]:
    """Where the committed findings disagree with the recomputed ones, in words."""
    if list(mine["claim"]) != list(theirs.get("claim", pd.Series(dtype=str))):
        return [f"the claims' rows differ: {list(theirs.get('claim', []))} committed, "
                f"{list(mine['claim'])} recomputed"]
    out = []
    for key in KEYS:
        a, b = mine[key].reset_index(drop=True), theirs.get(key, pd.Series(dtype=object))
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same = (pd.isna(x) and pd.isna(y)) or (
                np.isclose(float(x), float(y), rtol=1e-9, atol=1e-12)
                if isinstance(x, int | float) and isinstance(y, int | float) else str(x) == str(y))
            if not same:
                out.append(f"{mine['claim'].iloc[i]}: {key} {y!r} committed, {x!r} recomputed")
    return out


def verify(folder: Path) -> Checked:
    """Recompute one result folder's findings (see the module doc); ConfigError for a folder
    without its files or with a bad runs.csv."""
    if missing := [f for f in FILES if not (folder / f).is_file()]:
        raise ConfigError(f"{folder}: no {', '.join(missing)} (a result folder holds "
                          f"{', '.join(FILES)})")
    grid_file = folder / "grid.yaml"
    grid = open_grid(grid_file)
    table, registered = judge(grid, read_per_seed(folder / "runs.csv"), pd.DataFrame(),
                              grid_file)
    lines = []
    for c in grid.claims:
        row = table[table["claim"] == c.id].iloc[-1].fillna("")
        why = registered.why if row["evidence"] in ("unverified", "exploratory") else ""
        why = why or (row["reason"] if row["evidence"] in ("exploratory", "") else "")
        lines.append(", ".join(filter(None, [f"{c.id}: {row['verdict']}", row["evidence"]]))
                     + (f" ({why})" if why else ""))
    evidence = registered.evidence or str(table["evidence"].dropna().iloc[0]
                                          if table["evidence"].notna().any() else "")
    return Checked(folder, lines, _differ(table, pd.read_csv(folder / "findings.csv")),
                   evidence)
