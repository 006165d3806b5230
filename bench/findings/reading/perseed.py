"""A result's per-seed values (runs.csv) read back as the verdicts read runs, and refused with
one line naming the file, the line or column and what was expected where they cannot be
read as the grid's runs: an empty file or a header alone, no seed column, a grid axis or a
claim's metric missing, a value that is not one of the axis's values, text where a number or
a time belongs, a metric that is not finite, below its least value (`lowest`) or above its
most (`highest`: bits above log2 of the corpus's vocabulary), a seed that is not a whole number,
a trial or a (setting, seed) held twice, a no-recall floor that is not the one the grid's data
give (`_floors`). Only an empty field is a missing value: "NA", "n/a"
and "None" are text, refused where a number belongs."""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.config import ConfigError, DataConfig, merge, set_dotted
from bench.experiment import floors
from bench.experiment.claims import DERIVED, HEAD_SPAN_METRICS, METRICS, PROBE_METRIC, num
from bench.experiment.grid import Grid, excluded
from bench.metrics import SEEDS

from .records import read_code, read_plans
from .samples import match

# what a derived metric is computed from (`samples.derive`): any one of these sets suffices
NEEDS = {"gap_to_floor": ("final_test_bpc", "floor_bpc"),
         "span_fraction": ("mean_span", "model.span"),
         **{m: ("head_spans",) for m in HEAD_SPAN_METRICS},
         "covering_head_fraction": ("head_spans", "dataset.planted")}
RECORDED = "dataset.no_recall."  # a run's no-recall floor per probe target, as it recorded it


def _numeric(col: str) -> bool:
    return col in METRICS or bool(PROBE_METRIC.match(col)) or col in (*SEEDS, "floor_bpc")


def lowest(col: str) -> float:
    """The least value a metric column can hold: a difference of bits (`probe_gap.<probe>`,
    `test_probe_gap.<probe>`, `gap_to_floor`) any real; every other metric (bits, spans,
    counts, sizes, rates, seconds) none below 0."""
    gap = PROBE_METRIC.match(col)
    return -np.inf if col == "gap_to_floor" or (gap and gap.group(2) == "gap") else 0.0


def highest(col: str, vocab: int | None) -> float:
    """The most a metric column can hold: a bits metric (bpc, a probe's bits per answer, the
    floors, their gaps, the entropy rate) log2 of the corpus's vocabulary `vocab`, what a
    uniform guess over it pays (a model that pays more is a broken record, not a result: its
    training diverged, or the number is not what the column says); any other metric, or a
    corpus whose vocabulary is not known (None), none."""
    bits = col in ("final_dev_bpc", "final_test_bpc", "floor_bpc", "entropy_rate",
                   "gap_to_floor") or PROBE_METRIC.match(col)
    return float(np.log2(vocab)) if bits and vocab else np.inf


def vocabulary(grid: Grid, named: Iterable[str] = ()) -> int | None:
    """The largest vocabulary of the grid's corpora, in closed form: each setting's data section
    (`base.data` under the setting's `data.*` values) as its corpus registers it
    (`DataConfig.vocab_size`), and each corpus in `named` (runs.csv's dataset.name) that the
    grid does not name (a sweep run with `--data`) at its default options; None where one does
    not say, or cannot be read without its plugins."""
    sections = []
    for cell in settings(grid):
        tree = merge({"data": grid.base.data}, {})
        for key, value in cell.items():
            if key.startswith("data."):
                set_dotted(tree, key, value)
        sections.append(tree["data"])
    names = {s.get("name", "synthetic") for s in sections}
    sections += [{"name": n} for n in sorted(set(named) - names)]
    try:
        sizes = [DataConfig(**s).vocab_size for s in sections]
    except (ValueError, ConfigError):  # a plugin's corpus, not imported: not known
        return None
    return None if None in sizes else max(sizes)


def _numbers(df: pd.DataFrame, path: Path, vocab: int | None = None) -> None:
    """Every metric and seed a number (or empty) that can be: a metric finite and within its
    range (`lowest`, `highest` for a corpus of `vocab` symbols), a seed a whole number in
    [0, 2^63); else ConfigError naming the line and column. Converted in place."""
    for col in df:
        if not _numeric(col):
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        there = df[col].notna()
        checks = [(values.isna(), "is not a number"),
                  (~np.isfinite(values), "is not a finite number")]
        if col in SEEDS:
            checks.append(((values % 1 != 0) | (values < 0) | (values >= 2.0 ** 63),
                           "is not a seed (a whole number from 0 to 2^63 - 1)"))
        else:
            checks.append((values < lowest(col), f"is below {lowest(col):g}, the least {col} "
                           "can be"))
            checks.append((values > highest(col, vocab), f"is above {highest(col, vocab):.4g}, "
                           f"the most {col} can be: log2 of the corpus's {vocab} symbols, what "
                           "a uniform guess pays (docs/claims.md, Findings files)"))
        for bad, expected in checks:
            if (bad := there & bad).any():
                i = int(bad.idxmax())
                cell = df.at[i, col]
                shown = repr(cell) if isinstance(cell, str) else repr(float(cell))
                raise ConfigError(f"{path}: line {i + 2}, column {col}: {shown} {expected}")
        df[col] = values


def _times(df: pd.DataFrame, path: Path) -> None:
    """Every start_time a time (or empty), else ConfigError naming the line."""
    if "start_time" not in df:
        return
    bad = df["start_time"].notna() & pd.to_datetime(df["start_time"], utc=True, errors="coerce",
                                                    format="ISO8601").isna()
    if bad.any():
        i = int(bad.idxmax())
        raise ConfigError(f"{path}: line {i + 2}, column start_time: "
                          f"{df.at[i, 'start_time']!r} is not a time (ISO 8601 expected)")


def _once(df: pd.DataFrame, path: Path, keys: list[str]) -> None:
    """ConfigError naming a trial, or a setting at a seed (`keys`: the grid's axes and the
    seed), that runs.csv holds twice, with its lines."""
    for by in (["trial"], keys):
        if not by or not set(by) <= set(df):
            continue
        twice = df[df.duplicated(by, keep=False)]
        if twice.empty:
            continue
        first = twice.iloc[0]
        rows = twice[(twice[by] == first[by]).all(axis=1)]
        named = (f"trial {first['trial']}" if by == ["trial"] else "setting " + ", ".join(
            f"{k}={num(first[k])}" for k in by[:-1]) + f" at seed {num(first[by[-1]])}")
        again = rows.iloc[1]
        differ = next((c for c in df if not (pd.isna(first[c]) and pd.isna(again[c]))
                       and first[c] != again[c]), None)
        what = "" if differ is None else f"; {differ} {first[differ]!r} and {again[differ]!r}"
        lines = " and ".join(str(i + 2) for i in rows.index)
        raise ConfigError(f"{path}: {named} appears {len(rows)} times (lines {lines}{what}); "
                          "each trial, and each setting at each seed, is one row")


def _axes(df: pd.DataFrame, path: Path, grid: Grid) -> None:
    """Every grid axis a column whose values are the grid's, else ConfigError naming it."""
    for key, values in grid.grid.items():
        if key not in df:
            raise ConfigError(f"{path}: no column {key}, an axis of grid {grid.name} (its "
                              f"values: {', '.join(map(num, values))})")
        ok = np.zeros(len(df), bool)
        for v in values:
            ok |= match(df, {key: v}).to_numpy()
        if not ok.all():
            i = int(np.argmin(ok))
            raise ConfigError(f"{path}: line {i + 2}, column {key}: {df.at[i, key]!r} is not "
                              f"one of the grid's values ({', '.join(map(num, values))})")


def _metrics(df: pd.DataFrame, path: Path, grid: Grid) -> None:
    """Every claim's metric a column, or computable from columns there, else ConfigError."""
    for i, c in enumerate(grid.claims):
        if c.type == "cost":  # read from cost.csv (`costs`), and per seed from flops_*
            continue
        needs = NEEDS.get(c.metric, (c.metric,)) if c.metric in DERIVED else (c.metric,)
        if c.metric not in df and not set(needs) <= set(df):
            raise ConfigError(f"{path}: no column {', '.join(needs)}, which claims.{i} "
                              f"({c.id}) reads ({c.metric})")


def _floors(df: pd.DataFrame, path: Path, grid: Grid) -> None:
    """Every no-recall floor runs.csv records (`dataset.no_recall.<target>`) the one the grid's
    data give its row's setting in closed form (`floors.of_grid`), else ConfigError naming the
    line, the column and both values: the findings read the grid's, and a runs.csv that says
    otherwise is not the grid's runs."""
    recorded = [c for c in df if c.startswith(RECORDED)]
    if not recorded:
        return
    costs = floors.of_grid(grid)
    for at, given in costs.by:
        rows = df[match(df, dict(zip(costs.keys, at, strict=True)))]
        for col in recorded:
            want = given.get(col[len(RECORDED):])
            got = pd.to_numeric(rows[col], errors="coerce").to_numpy(dtype=float)
            ok = np.zeros(len(rows), bool) if want is None else np.isclose(
                got, want.floor, rtol=1e-9, atol=1e-12)
            if (bad := rows[col].notna().to_numpy() & ~ok).any():
                i = int(rows.index[bad][0])
                cell = df.at[i, col]
                shown = repr(cell) if isinstance(cell, str) else repr(float(cell))
                expected = "none: the grid's data score no such probe" if want is None else (
                    f"{want.floor!r} from the grid's data")
                raise ConfigError(f"{path}: line {i + 2}, column {col}: {shown} recorded, "
                                  f"expected {expected} (the no-recall floor in closed form)")


def read(path: Path, grid: Grid | None = None) -> pd.DataFrame:
    """runs.csv back as the verdicts read runs (head spans as lists), checked against `grid`
    (its axes, its claims' metrics; None: only the file's own form), and beside it code.json
    and plan.json (`records`): ConfigError naming what is wrong (module doc)."""
    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=[""],
                         dtype={"code_sha": str, "plan_sha": str})
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: empty: a runs.csv holds a header and one row per finished "
                          "trial") from None
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not a runs.csv ({err})") from None
    if df.empty:
        raise ConfigError(f"{path}: a header and no rows: a runs.csv holds one row per finished "
                          "trial")
    seed = next((s for s in SEEDS if s in df), None)
    if seed is None:
        raise ConfigError(f"{path}: no seed column ({' or '.join(SEEDS)}): the verdicts pair "
                          "runs by seed")
    names = df["dataset.name"].dropna().astype(str) if "dataset.name" in df else ()
    _numbers(df, path, vocabulary(grid, names) if grid is not None else None)
    _times(df, path)
    if grid is not None:
        _axes(df, path, grid)
        _metrics(df, path, grid)
        _floors(df, path, grid)
    _once(df, path, [*grid.grid, seed] if grid else [])
    if "head_spans" in df:
        df["head_spans"] = df["head_spans"].map(lambda v: json.loads(v) if isinstance(v, str)
                                                else v)
    read_code(df, path)
    read_plans(df, path)
    return df


def settings(grid: Grid) -> list[dict[str, Any]]:
    """Every setting the grid runs (its axes' product less `exclude`), as grid values."""
    keys = list(grid.grid)
    every = [dict(zip(keys, values, strict=True)) for values in product(*grid.grid.values())]
    return [s for s in every if not excluded(s, grid.exclude)]


def start_of(grid: Grid, runs: pd.DataFrame) -> int | None:
    """The first seed the runs' plan runs: the start the trials recorded (`seed_start`), else
    the grid file's where its runs include it, else their smallest seed outside the design
    seeds (runs that predate the records); None for a grid with a list of seeds."""
    if grid.looks is None:
        return None
    recorded = runs.get("seed_start", pd.Series(dtype=object)).dropna().astype(str)
    recorded = {s for s in recorded if s not in ("", "nan")}
    if len(recorded) == 1:
        return int(float(recorded.pop()))
    seeds = runs[next(s for s in SEEDS if s in runs)].dropna()
    if grid.looks.start in set(seeds):
        return grid.looks.start
    fresh = seeds[~seeds.isin(grid.design_seeds or [])]
    return int((fresh if len(fresh) else seeds).min())


def planned(grid: Grid, start: int | None) -> list[list[int]]:
    """The seeds of each look from `start` (a list of seeds: one look of them)."""
    if grid.looks is None:
        return [list(grid.seeds)]
    every = list(range(start, start + grid.looks.looks[-1]))
    return [every[:n] for n in grid.looks.looks]


@dataclass(frozen=True)
class Coverage:
    """How a result's runs meet its plan's trials: `extra`, rows on seeds the plan never runs
    (or on settings the grid does not run); `missing`, a setting's seeds short of the look it
    reached (each setting runs whole looks: the first, then the next where an undecided claim
    reads it). Each entry names the setting and seeds."""

    extra: list[str]
    missing: list[str]


def coverage(grid: Grid, runs: pd.DataFrame, start: int | None) -> Coverage:
    """The runs held against the plan's trials (`Coverage`), seeds from `start`."""
    looks = planned(grid, start)
    seed = next(s for s in SEEDS if s in runs)
    allowed = set(looks[-1]) | set(grid.design_seeds or [])
    extra, missing = [], []
    for cell in settings(grid):
        have = set(runs.loc[match(runs, cell), seed].dropna().astype(int))
        name = " ".join(f"{k.rsplit('.', 1)[-1]}={num(v)}" for k, v in cell.items())
        if out := sorted(have - allowed):
            extra.append(f"{name} seeds {', '.join(map(num, out))}")
        ran = have & set(looks[-1])
        if not ran and have:  # design seeds only: an exploratory rerun
            continue
        reach = next((look for look in looks if ran <= set(look)), looks[-1])
        if lost := sorted(set(reach) - ran):
            missing.append(f"{name} seeds {', '.join(map(num, lost))}")
    return Coverage(extra, missing)


def _named(runs: pd.DataFrame, i: Any) -> str:
    """A row in words: its trial where runs.csv names it, else its line."""
    trial = runs.at[i, "trial"] if "trial" in runs else None
    return f"trial {trial}" if isinstance(trial, str) and trial else f"line {int(i) + 2}"


def contradictions(grid: Grid, runs: pd.DataFrame, start: int | None) -> list[str]:
    """The rows of the plan's seeds that contradict themselves, each named: a `seed` that is
    not the row's `train.seed` (a label moved without the trial), and a row of a later look
    that started before a row of an earlier look (looks run one after the other, so a seed
    label moved to another look shows in its start time)."""
    out = []
    if set(SEEDS) <= set(runs):
        label, trained = (pd.to_numeric(runs[s], errors="coerce") for s in SEEDS)
        for i in runs.index[label.notna() & trained.notna() & (label != trained)]:
            out.append(f"{_named(runs, i)} is labelled seed {num(runs.at[i, 'seed'])} but "
                       f"trained seed {num(runs.at[i, 'train.seed'])} (train.seed)")
    if grid.looks is None or start is None or "start_time" not in runs:
        return out
    seed = next(s for s in SEEDS if s in runs)
    began = pd.to_datetime(runs["start_time"], utc=True, format="ISO8601")
    looks = planned(grid, start)
    for k in range(1, len(looks)):
        before = runs.index[runs[seed].isin(set(looks[k - 1]) - set(looks[k - 2] if k > 1
                                                                           else []))]
        after = runs.index[runs[seed].isin(set(looks[k]) - set(looks[k - 1]))]
        before, after = began[before].dropna(), began[after].dropna()
        if before.empty or after.empty or after.min() >= before.max():
            continue
        early, late = after.idxmin(), before.idxmax()
        out.append(f"{_named(runs, early)} (seed {num(runs.at[early, seed])}, look {k + 1}) "
                   f"started at {after.min():%Y-%m-%d %H:%M:%S} UTC, before "
                   f"{_named(runs, late)} (seed {num(runs.at[late, seed])}, look {k}) at "
                   f"{before.max():%Y-%m-%d %H:%M:%S} UTC: a look starts after the one before")
    return out
