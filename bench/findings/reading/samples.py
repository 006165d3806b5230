"""The per-seed values a claim's tests are about, read from a sweep's finished runs: the derived
metrics, the runs of one cell (grid values), the raw values of the cells a part reads (`Arms`),
a part's values per seed (differences, or slopes along the trend axis, on the claim's scale:
`per_seed`, what `vacuity` also reads), and why a part cannot be computed."""

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bench.experiment.claims import HEAD_SPAN_METRICS, SPAN_SHAPE, Claim, num
from bench.metrics import FAILURE, SEEDS, STOPPED

ABOVE_R = ".above_R"  # a span statistic's column measured above the ramp R


def as_bool(v: object) -> bool:
    """A logged flag as a bool: the writer logs params as JSON (`true`); older runs logged
    Python's `True`."""
    return str(v).lower() == "true"


class Unavailable(Exception):
    """A test that cannot be computed; the message is the reason."""


def derive(runs: pd.DataFrame) -> pd.DataFrame:
    """The DERIVED metrics as columns (NaN where a run lacks what they need); head-span metrics
    need a `head_spans` column (per run, a list of per-layer lists, as result.json holds)."""
    runs = runs.copy()

    def col(name: str) -> pd.Series:
        return runs.get(name, pd.Series(np.nan, runs.index))

    runs["gap_to_floor"] = col("final_test_bpc") - col("floor_bpc")
    runs["span_fraction"] = col("mean_span") / col("model.span")
    if "head_spans" not in runs:
        return runs.assign(**dict.fromkeys(HEAD_SPAN_METRICS, np.nan),
                           **dict.fromkeys([m + ABOVE_R for m in SPAN_SHAPE], np.nan))
    spans = col("head_spans").map(lambda s: np.concatenate([np.ravel(layer) for layer in s])
                                  if isinstance(s, list) and s else None)
    runs["max_head_span"] = spans.map(lambda s: np.nan if s is None else float(s.max()))
    layers = col("head_spans").map(lambda s: [np.ravel(layer) for layer in s]
                                   if isinstance(s, list) and len(s) > 1 else None)
    ramp = col("layer.options.ramp").map(lambda v: float(v) if pd.notna(v) else np.nan)
    for suffix, floor in (("", pd.Series(0.0, runs.index)), (ABOVE_R, ramp)):  # from 0, above R
        def less(items: pd.Series, f: pd.Series = floor) -> pd.Series:
            return pd.Series([None if v is None else (v - r if isinstance(v, np.ndarray) else
                                                      [x - r for x in v])
                              for v, r in zip(items, f, strict=True)], runs.index, dtype=object)

        z, zl = less(spans), less(layers)  # per head, per layer: the span above the floor
        runs["head_span_spread" + suffix] = z.map(_spread)
        runs["long_head_fraction" + suffix] = z.map(_long)
        runs["layer_span_ratio" + suffix] = zl.map(_layer_ratio)
    far = col("dataset.planted").map(lambda v: max(json.loads(v), default=np.nan)
                                     if isinstance(v, str) else np.nan)
    runs["covering_head_fraction"] = [np.nan if s is None or np.isnan(d) else float(np.mean(
        s >= d)) for s, d in zip(spans, far, strict=True)]
    return runs


def _spread(z: np.ndarray | None) -> float:
    """The longest head's span over the median head's."""
    ok = z is not None and np.all(np.isfinite(z)) and np.median(z) > 0
    return float(z.max() / np.median(z)) if ok else np.nan


def _long(z: np.ndarray | None) -> float:
    """The share of heads at least half as long as the longest (NaN: every head at 0)."""
    ok = z is not None and np.all(np.isfinite(z)) and z.max() > 0
    return float(np.mean(z >= z.max() / 2)) if ok else np.nan


def _layer_ratio(z: list[np.ndarray] | None) -> float:
    """The first layer's mean head span over the last layer's."""
    ok = z is not None and np.isfinite(np.mean(z[-1])) and np.mean(z[-1]) > 0
    return float(np.mean(z[0]) / np.mean(z[-1])) if ok else np.nan


def column(claim: Claim) -> str:
    """The runs' column a claim reads: a span statistic with `floor: R` its value above R."""
    return claim.metric + (ABOVE_R if claim.floor == "R" else "")


def skew(claim: Claim, runs: pd.DataFrame, cell: dict, seeds: list[Any]) -> pd.Series:
    """Per seed, the mean of the cell's head spans less their median (above the ramp R where the
    claim declares `floor: R`): above 0 where a few heads grow longer than the rest (a right
    tail). Where every head grows alike (iid, symmetric about a common centre) it lies either
    side of 0 with chance 1/2, so its sign is the test against "heads alike" (`verdicts`).
    Raises Unavailable where a seed's head spans are missing."""
    col = seed_col(runs)
    sub = runs.loc[match(runs, cell)]
    out = []
    for seed in seeds:
        row = sub[sub[col] == seed] if col else sub
        spans = row["head_spans"].iloc[0] if "head_spans" in row and len(row) else None
        if not isinstance(spans, list) or not spans:
            raise Unavailable(f"{label(cell)} seed {num(seed)}: no head spans")
        z = np.concatenate([np.ravel(layer) for layer in spans]).astype(float)
        if claim.floor == "R":
            z = z - float(row["layer.options.ramp"].iloc[0])
        out.append(float(z.mean() - np.median(z)))
    return pd.Series(out, index=seeds, dtype=float)


def match(df: pd.DataFrame, cell: dict[str, Any]) -> pd.Series:
    """Rows of df whose grid values equal the cell's (params are logged as strings: numbers
    compare as numbers, other values as the JSON the runner logged)."""
    mask = pd.Series(True, index=df.index)
    for key, value in cell.items():
        if key not in df:
            return pd.Series(False, index=df.index)
        if isinstance(value, int | float | np.number) and not isinstance(value, bool):
            mask &= pd.to_numeric(df[key], errors="coerce") == value
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            mask &= df[key].astype(str) == text
    return mask


def seed_col(df: pd.DataFrame) -> str | None:
    return next((s for s in SEEDS if s in df), None)


def label(cell: dict[str, Any]) -> str:
    """A cell as the findings name it: `talking-heads n_heads=8`."""
    return " ".join(num(v) if k == "model.variant" else f"{k.rsplit('.', 1)[-1]}={num(v)}"
                    for k, v in cell.items())


def _why_missing(missing: pd.DataFrame, cell: dict, seed: Any) -> str:
    """How the cell's trial at `seed` ended, from the sweep's unfinished trials."""
    col = seed_col(missing)
    hit = missing[match(missing, cell) & (missing[col] == seed)] if col and len(missing) else []
    if len(hit) == 0:
        return "not run"
    r = hit.iloc[0]
    why = next((r[t] for t in (f"tags.{FAILURE}", f"tags.{STOPPED}")
                if t in r and pd.notna(r[t])), None)
    return str(r["status"]).lower() + (f" ({why})" if why else "")


def values(runs: pd.DataFrame, missing: pd.DataFrame, cell: dict, metric: str,
           seeds: list[Any]) -> pd.Series:
    """The metric per seed (index, in the order of `seeds`) for one cell; raises Unavailable
    naming what is missing. A trial run twice counts once (its last row)."""
    if metric not in runs:
        raise Unavailable(f"no run logged {metric}")
    col = seed_col(runs)
    sub = runs.loc[match(runs, cell)]
    got = dict(zip(sub[col] if col else range(len(sub)), sub[metric], strict=True))
    name = " ".join(f"{k.rsplit('.', 1)[-1]}={num(v)}" for k, v in cell.items())
    if lost := [s for s in seeds if s not in got]:
        raise Unavailable("; ".join(f"{name} seed {num(s)}: {_why_missing(missing, cell, s)}"
                                    for s in lost))
    out = pd.Series([got[s] for s in seeds], index=seeds, dtype=float)
    if out.isna().any():
        seeds_na = ", ".join(num(s) for s in sorted(out.index[out.isna()]))
        raise Unavailable(f"{name}: no {metric} (seeds {seeds_na})")
    if not np.isfinite(out).all():  # a derived metric's division by 0: never dropped silently
        bad = ", ".join(f"{num(s)} ({v})" for s, v in out[~np.isfinite(out)].items())
        raise Unavailable(f"{name}: {metric} is not finite at seeds {bad}")
    return out


@dataclass(frozen=True)
class Arms:
    """The metric per seed of the cells one test reads, as the runs logged it: `rows` and
    `base` (points, seeds), one point per value of the trend axis `x` (as the grid gives it;
    None and one point for a compare claim), `base` None without a baseline."""

    rows: np.ndarray
    base: np.ndarray | None
    x: np.ndarray | None


def arms(claim: Claim, runs: pd.DataFrame, missing: pd.DataFrame, pairs: list,
         seeds: list[Any]) -> Arms:
    """The raw values of the test's (rows, baseline) cell pairs (`Arms`); raises Unavailable
    naming what is missing."""
    rows, base = [], []
    for r, b in pairs:
        rows.append(values(runs, missing, r, column(claim), seeds).to_numpy())
        if b is not None:
            base.append(values(runs, missing, b, column(claim), seeds).to_numpy())
    x = None if claim.type == "compare" else np.array([float(r[claim.along]) for r, _ in pairs])
    return Arms(np.array(rows), np.array(base) if base else None, x)


def points(claim: Claim, arms: Arms) -> np.ndarray:
    """(points, seeds): on the claim's scale (log(y + log_offset) where declared), the rows
    less the baseline (or the rows alone)."""
    def scaled(v: np.ndarray) -> np.ndarray:
        return np.log(v + claim.log_offset) if claim.log_offset else v

    return scaled(arms.rows) - (0.0 if arms.base is None else scaled(arms.base))


def per_seed(claim: Claim, arms: Arms) -> np.ndarray:
    """(seeds,): the values one test is about: a compare claim's difference, or a trend's
    least-squares slope along its axis (per doubling on `log2`), one line per seed."""
    y = points(claim, arms)
    if arms.x is None:
        return y[0]
    return np.polyfit(np.log2(arms.x) if claim.scale == "log2" else arms.x, y, 1)[0]


def sample(claim: Claim, runs: pd.DataFrame, missing: pd.DataFrame, pairs: list,
           seeds: list[Any]) -> tuple[pd.Series, str]:
    """Per-seed values one test is about (`per_seed`), and for a trend what its slope
    estimates; raises Unavailable where a value is missing or off the claim's scale."""
    given = np.array([float(rows[claim.along]) for rows, _ in pairs]) if claim.along else None
    if given is not None and len(np.unique(given)) < 2:
        raise Unavailable(f"a trend needs at least 2 values of {claim.along}; the runs have "
                          f"{', '.join(map(num, np.unique(given)))}")
    got = arms(claim, runs, missing, pairs, seeds)
    each = [v for i in range(len(pairs)) for v in (got.rows[i], *(
        () if got.base is None else (got.base[i],)))]  # each cell, in the pairs' order
    for v in each if claim.log_offset else ():
        if (low := v + claim.log_offset <= 0).any():
            at = ", ".join(f"{num(s)} ({x:g})" for s, x, bad in zip(seeds, v, low, strict=True)
                           if bad)
            raise Unavailable(f"log({column(claim)} + {num(claim.log_offset)}) is undefined "
                              f"at seeds {at}")
    out = pd.Series(per_seed(claim, got), index=seeds, dtype=float)
    if given is None:
        return out, ""
    x = np.log2(given) if claim.scale == "log2" else given
    return out, _shape(claim, given, x, points(claim, got).mean(axis=1))


def _shape(claim: Claim, given: np.ndarray, x: np.ndarray, means: np.ndarray) -> str:
    """What a trend's slope estimates: at 3 evenly spaced points the least-squares slope is the
    contrast of the ends, the middle carries no weight; and whether the means are monotone in
    the claimed direction (descriptive, not a test)."""
    order = np.argsort(x)
    x, given, means = x[order], given[order], means[order]
    key = claim.along.rsplit(".", 1)[-1]
    steps = np.diff(means)
    up = claim.expect == "greater"
    trend = ("monotone in the claimed direction" if (steps > 0).all() and up or
             (steps < 0).all() and claim.expect == "less" else "not monotone")
    said = ", ".join(f"{num(v)}: {m:.3g}" for v, m in zip(given, means, strict=True))
    ends = ""
    if len(x) == 3 and np.isclose(x[1] - x[0], x[2] - x[1]):
        ends = (f"; at 3 evenly spaced points the slope is the contrast of the ends "
                f"({key} = {num(given[-1])} vs {num(given[0])}), {key} = {num(given[1])} "
                "carries no weight")
    return f"means by {key} {said} ({trend}){ends}"


def axes(runs: pd.DataFrame, missing: pd.DataFrame, keys: list[str]) -> dict[str, list]:
    """The values each grid key took in the sweep (finished or not), sorted."""
    every = pd.concat([runs, missing], ignore_index=True)
    return {k: sorted(every[k].dropna().unique().tolist()) for k in keys if k in every}


def planted(runs: pd.DataFrame) -> float | None:
    """The farthest distance the runs' corpus planted (param dataset.planted); None: none."""
    logged = runs.get("dataset.planted", pd.Series(dtype=object)).dropna()
    found = [d for v in logged if isinstance(v, str) for d in json.loads(v)]
    return float(max(found)) if found else None


def one_precision(runs: pd.DataFrame, claim: Claim, rows: dict, base: dict | None) -> str | None:
    """Why a claim that contrasts train.amp values cannot be told from the runs: its rows and its
    baseline ran at the same precision (amp fell back to fp32 where there is no native bf16)."""
    if base is None or "precision" not in runs or "train.amp" not in {
            **claim.rows, **(claim.baseline or {})}:
        return None
    ran = [set(runs[match(runs, cell)]["precision"].dropna()) for cell in (rows, base)]
    if ran[0] and ran[0] == ran[1]:
        return (f"rows and baseline both ran {', '.join(sorted(ran[0]))}: train.amp=true fell "
                "back to fp32 where the device has no native bf16")
    return None
