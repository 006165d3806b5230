"""Runs a result shares with the results beside it. A trial is named by the hash of its
resolved config, so a grid whose trials hash the same as another grid's finds them finished
and trains nothing (adaptive_vs_dynamic reuses 12 trials of span_limit): its claims and the
other's then rest partly on the same runs, not on independent replications, and the findings
say so beside the pre-registration line."""

from pathlib import Path

import pandas as pd


def shared_line(runs: pd.DataFrame, out_dir: Path) -> str | None:
    """'Shared runs: ...' naming each result beside out_dir (out_dir.parent/<name>/runs.csv)
    that holds trials of `runs` (its `trial` hashes, one per trial), or None where none does."""
    if "trial" not in runs:
        return None
    mine = set(runs["trial"].dropna())
    found = []
    for other in sorted(out_dir.parent.glob("*/runs.csv")):
        if other.parent.resolve() == out_dir.resolve():
            continue
        try:
            theirs = set(pd.read_csv(other, usecols=["trial"])["trial"])
        except (ValueError, OSError, pd.errors.ParserError):  # not a result's runs.csv
            continue
        if n := len(mine & theirs):
            found.append(f"{n} are trials of {other.parent.name} too")
    if not found:
        return None
    return (f"Shared runs: of these {len(mine)} trials, {'; '.join(found)} (the same trial "
            "hashes: one set of runs serves both grids), so these claims and theirs rest "
            "partly on the same evidence, not on independent replications.")
