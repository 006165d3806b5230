"""Claims as data: the findings a grid file declares, checked against the grid before anything
runs, and computed from the finished runs into a verdict (never written by hand).

A claim names its rows by grid-key values, optionally a baseline (the same rows with some
values changed), the metric and what is expected of it:

- type `compare` (default): per seed, the metric of `rows` minus that of `baseline` (or the
  metric itself without a baseline); one test per value of each `at_each` key.
- type `trend`: per seed, the least-squares slope of that value against the `along` key
  (per doubling with `scale: log2`, the default; per unit with `linear`); the seeds' slopes
  are the sample, so the test is paired by seed just like a difference.

`expect: less` / `greater` tests mean < margin / mean > margin one-sided (margin 0 by default);
`expect: equivalent` is TOST: |mean| < margin. A test is computed when every seed of the sweep
has finished runs for every row it needs and at least MIN_SEEDS seeds pair up.

Correction: the family is the grid's claims. A claim tested at each value of a key holds when
every test rejects, so its p is the largest of its tests' (an intersection-union test, which
needs no correction within the claim); Holm runs across the claims' p's. A test's p_adj is its
own p at its claim's Holm step, so a claim's p_adj is the largest of its tests'. A test is
`reproduced` when p_adj < ALPHA, `not reproduced` otherwise, `inconclusive` (with the reason)
when it could not be computed; a claim is reproduced when all its tests are.
"""

import json
from collections.abc import Callable, Iterator
from itertools import product
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator
from scipy.stats import linregress

from bench.config import Strict
from bench.tracking.names import FAILURE, FINAL_RENAMED, FINAL_SAME, SEEDS, STOPPED

from . import stats

MIN_SEEDS = 3  # paired seeds a test needs before its verdict counts
# the report reads a final_<name> summary back under <name> (FINAL_RENAMED)
FINAL = ("final_dev_bpc", "final_test_bpc", *FINAL_SAME, *FINAL_RENAMED)
DERIVED = {  # metric: what it is; computed per run by `derive`
    "gap_to_floor": "final_dev_bpc - floor_bpc: bits above the corpus's lowest reachable bpc",
    "span_fraction": "mean_span / model.span: the learned span as a share of the limit S",
    "max_head_span": "the longest head's span (chars), from result.json's head_spans",
    "head_span_spread": "longest head span / median head span, from head_spans",
    "long_head_fraction": "share of heads whose span is at least half the longest head's",
}
METRICS = (*FINAL, *DERIVED)
HEAD_SPAN_METRICS = ("max_head_span", "head_span_spread", "long_head_fraction")
COLUMNS = ["claim", "effect", "ci_low", "ci_high", "p", "verdict", "p_adj", "n", "metric",
           "expect", "reason", "text"]


class Claim(Strict):
    """One finding a grid tests; see the module doc for the statistics."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    text: str
    type: Literal["compare", "trend"] = "compare"
    rows: dict[str, Any] = Field(min_length=1)  # grid key -> value: the rows the claim is about
    baseline: dict[str, Any] | None = None  # values that turn `rows` into the baseline rows
    at_each: list[str] = []  # grid keys: one test per value; the claim must hold at every one
    along: str | None = None  # trend: the grid key on the x axis
    scale: Literal["log2", "linear"] = "log2"  # trend: slope per doubling, or per unit
    metric: str
    expect: Literal["less", "greater", "equivalent"]
    margin: float = 0.0  # less / greater: the bound mean is tested against; equivalent: +-margin

    @model_validator(mode="wrap")
    @classmethod
    def _named(cls, data: Any, handler: Callable) -> "Claim":
        """Errors inside a claim name it by its id."""
        cid = data.get("id", "?") if isinstance(data, dict) else "?"
        try:
            claim = handler(data)
            claim._consistent()
        except ValidationError as err:
            raise ValueError(f"claim {cid!r}: " + "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'claim'}: {e['msg']}" for e in err.errors())
            ) from None
        except ValueError as err:
            raise ValueError(f"claim {cid!r}: {err}") from None
        return claim

    @field_validator("at_each", mode="before")
    @classmethod
    def _listed(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    def _consistent(self) -> None:
        """Cross-field rules; raises ValueError."""
        if (self.type == "trend") != (self.along is not None):
            raise ValueError("`along` (the grid key on the x axis) is required by type trend "
                             "and only allowed there")
        if self.expect == "equivalent" and self.margin <= 0:
            raise ValueError("expect: equivalent needs margin > 0 (the equivalence bound)")
        if self.baseline is not None and all(self.rows.get(k) == v
                                             for k, v in self.baseline.items()):
            raise ValueError("baseline selects the same rows as `rows`")


CLAIMS = TypeAdapter(list[Claim])


def parse(raw: Any) -> list[Claim]:
    """A grid file's `claims:` list, validated (raises pydantic's ValidationError)."""
    return CLAIMS.validate_python(raw or [])


def _fmt(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


# ---- checking a claim against its grid (bench.grid's schema calls this)

def _cells(claim: Claim, axes: dict[str, list[Any]]) -> Iterator[tuple[str, dict, dict | None]]:
    """(test label, rows cell, baseline cell) per at_each (and along) combination; a cell holds
    the claim's value of every key it pins."""
    free = [*claim.at_each, *([claim.along] if claim.along else [])]
    for combo in product(*(axes[k] for k in free)):
        at = dict(zip(free, combo, strict=True))
        rows = {**claim.rows, **at}
        base = None if claim.baseline is None else {**rows, **claim.baseline}
        label = ", ".join(f"{k.rsplit('.', 1)[-1]}={_fmt(v)}" for k, v in at.items()
                          if k != claim.along)
        yield label, rows, base


def check(claims: list[Claim], axes: dict[str, list[Any]],
          excluded: Callable[[dict[str, Any]], bool]) -> None:
    """Raise ValueError naming the claim when it uses a key, value or metric the grid does not
    have, leaves a varied grid key unpinned, or needs a trial the grid excludes."""
    seen: set[str] = set()
    for i, c in enumerate(claims):
        where = f"claims.{i} ({c.id})"
        if c.id in seen:
            raise ValueError(f"{where}: duplicate claim id")
        seen.add(c.id)
        if c.metric not in METRICS:
            raise ValueError(f"{where}: unknown metric {c.metric!r}; known: {', '.join(METRICS)}")
        named = {"rows": list(c.rows), "baseline": list(c.baseline or {}),
                 "at_each": c.at_each, "along": [c.along] if c.along else []}
        for field, keys in named.items():
            for key in keys:
                if key not in axes:
                    raise ValueError(f"{where}: {field}: {key!r} is not a grid key; grid keys: "
                                     f"{', '.join(axes)}")
        for field, values in (("rows", c.rows), ("baseline", c.baseline or {})):
            for key, value in values.items():
                if value not in axes[key]:
                    raise ValueError(f"{where}: {field}: {key}={value!r} is not in the grid "
                                     f"({key}: {axes[key]})")
        free = [*c.at_each, *named["along"]]
        if clash := (set(free) & (set(c.rows) | set(c.baseline or {}))) or (
                len(free) != len(set(free))):
            raise ValueError(f"{where}: {sorted(clash) or free} named twice (at_each / along "
                             "keys take every value, rows and baseline pin one)")
        if loose := [k for k, v in axes.items() if len(v) > 1 and k not in c.rows
                     and k not in free]:
            raise ValueError(f"{where}: the grid varies {', '.join(loose)}: pin it in `rows` "
                             "or test at each value (`at_each`)")
        if c.along and (len(axes[c.along]) < 2 or c.scale == "log2" and not all(
                isinstance(v, int | float) and v > 0 for v in axes[c.along])):
            raise ValueError(f"{where}: along: {c.along} needs at least 2 values, positive "
                             "numbers for scale log2")
        for _, *cells in _cells(c, axes):
            for cell in filter(None, cells):
                full = {k: cell.get(k, v[0]) for k, v in axes.items()}
                if excluded(full):
                    raise ValueError(f"{where}: needs the trial {full}, which the grid's "
                                     "`exclude` drops")


# ---- computing claims from a sweep's runs

def derive(runs: pd.DataFrame) -> pd.DataFrame:
    """The DERIVED metrics as columns (NaN where a run lacks what they need); head-span metrics
    need a `head_spans` column (per run, a list of per-layer lists, as result.json holds)."""
    runs = runs.copy()

    def col(name: str) -> pd.Series:
        return runs.get(name, pd.Series(np.nan, runs.index))

    runs["gap_to_floor"] = col("final_dev_bpc") - col("floor_bpc")
    runs["span_fraction"] = col("mean_span") / col("model.span")
    spans = col("head_spans").map(lambda s: np.concatenate([np.ravel(layer) for layer in s])
                                  if isinstance(s, list) and s else None)
    runs["max_head_span"] = spans.map(lambda s: np.nan if s is None else float(s.max()))
    runs["head_span_spread"] = spans.map(
        lambda s: np.nan if s is None or np.median(s) <= 0 else float(s.max() / np.median(s)))
    runs["long_head_fraction"] = spans.map(
        lambda s: np.nan if s is None else float(np.mean(s >= s.max() / 2)))
    return runs


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


def _seed_col(df: pd.DataFrame) -> str | None:
    return next((s for s in SEEDS if s in df), None)


def _why_missing(missing: pd.DataFrame, cell: dict, seed: Any) -> str:
    """How the cell's trial at `seed` ended, from the sweep's unfinished trials."""
    col = _seed_col(missing)
    hit = missing[match(missing, cell) & (missing[col] == seed)] if col and len(missing) else []
    if len(hit) == 0:
        return "not run"
    r = hit.iloc[0]
    why = next((r[t] for t in (f"tags.{FAILURE}", f"tags.{STOPPED}")
                if t in r and pd.notna(r[t])), None)
    return str(r["status"]).lower() + (f" ({why})" if why else "")


class _Unavailable(Exception):
    """A test that cannot be computed; the message is the reason."""


def _values(runs: pd.DataFrame, missing: pd.DataFrame, cell: dict, metric: str,
            seeds: list[Any]) -> pd.Series:
    """The metric per seed for one cell; raises _Unavailable naming what is missing."""
    if metric not in runs:
        raise _Unavailable(f"no run logged {metric}")
    col = _seed_col(runs)
    sub = runs[match(runs, cell)]
    got = sub.set_index(col)[metric] if col else sub[metric].reset_index(drop=True)
    label = " ".join(f"{k.rsplit('.', 1)[-1]}={_fmt(v)}" for k, v in cell.items())
    if lost := [s for s in seeds if s not in got.index]:
        raise _Unavailable("; ".join(f"{label} seed {_fmt(s)}: "
                                     f"{_why_missing(missing, cell, s)}" for s in lost))
    if got.isna().any():
        seeds_na = ", ".join(_fmt(s) for s in sorted(got.index[got.isna()]))
        raise _Unavailable(f"{label}: no {metric} (seeds {seeds_na})")
    return got.groupby(level=0).last()


def _sample(claim: Claim, runs: pd.DataFrame, missing: pd.DataFrame, cells: list,
            seeds: list[Any]) -> pd.Series:
    """Per-seed values one test is about: differences, or slopes along the trend axis."""
    def point(rows: dict, base: dict | None) -> pd.Series:
        v = _values(runs, missing, rows, claim.metric, seeds)
        return v if base is None else v - _values(runs, missing, base, claim.metric, seeds)

    if claim.type == "compare":
        (rows, base), = cells
        return point(rows, base)
    x = np.array([float(rows[claim.along]) for rows, _ in cells])
    if len(np.unique(x)) < 2:
        raise _Unavailable(f"a trend needs at least 2 values of {claim.along}; the runs have "
                           f"{', '.join(map(_fmt, np.unique(x)))}")
    x = np.log2(x) if claim.scale == "log2" else x
    y = pd.concat([point(rows, base) for rows, base in cells], axis=1)
    return y.apply(lambda row: linregress(x, row.to_numpy()).slope, axis=1)


def _axes(runs: pd.DataFrame, missing: pd.DataFrame, keys: list[str]) -> dict[str, list]:
    """The values each grid key took in the sweep (finished or not), sorted."""
    every = pd.concat([runs, missing], ignore_index=True)
    return {k: sorted(every[k].dropna().unique().tolist()) for k in keys if k in every}


def evaluate(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None = None
             ) -> pd.DataFrame:
    """One row per test (and one summary row per claim with several tests), in COLUMNS.

    runs: the finished trials, one row each, with grid-key columns, a seed column and metrics
    (derive() is applied here); missing: the sweep's other trials (grid keys, seed, status,
    failure tags) so an inconclusive verdict can say what happened. Never raises on data.
    """
    missing = pd.DataFrame() if missing is None else missing
    runs = derive(runs)
    every = pd.concat([runs, missing], ignore_index=True)
    col = _seed_col(every)
    seeds = sorted(every[col].dropna().unique().tolist()) if col else [0]
    out = []
    for c in claims:
        keys = [*c.rows, *(c.baseline or {}), *c.at_each, *([c.along] if c.along else [])]
        axes = _axes(runs, missing, keys)
        tests: dict[str, list] = {}
        if all(k in axes for k in keys):
            for label, rows, base in _cells(c, axes):
                tests.setdefault(label, []).append((rows, base))
        if not tests:
            tests = {"": []}
        for label, cells in tests.items():
            row = {"claim": f"{c.id} [{label}]" if label else c.id, "id": c.id,
                   "metric": c.metric, "expect": _expect(c), "text": c.text, "reason": ""}
            try:
                if not cells:
                    raise _Unavailable(f"the runs have no trials for {', '.join(keys)}")
                est = stats.estimate(_sample(c, runs, missing, cells, seeds), c.expect,
                                     c.margin)
                row.update(effect=est.effect, ci_low=est.ci_low, ci_high=est.ci_high, p=est.p,
                           n=est.n)
                if est.n < MIN_SEEDS:
                    row["reason"] = f"{est.n} paired seeds; a verdict needs {MIN_SEEDS}"
            except _Unavailable as err:
                row["reason"] = str(err)
            out.append(row)
    df = pd.DataFrame(out).reindex(columns=[*COLUMNS, "id"])
    counted = df["reason"] == ""
    df["p_adj"] = _holm_by_claim(df[counted]).reindex(df.index)
    df["verdict"] = np.where(~counted, "inconclusive",
                             np.where(df["p_adj"] < stats.ALPHA, "reproduced", "not reproduced"))
    return _summaries(df)


def _holm_by_claim(tests: pd.DataFrame) -> pd.Series:
    """Holm across claims, each claim's p the largest of its computed tests' (intersection-union);
    a test's adjusted p is max(the previous claim's adjusted p, min(1, k p)) with k its claim's
    Holm multiplier, so the largest over a claim's tests is the claim's Holm-adjusted p."""
    if tests.empty:
        return pd.Series(dtype=float)
    claim_p = tests.groupby("id", sort=False)["p"].max()
    order = claim_p.sort_values(kind="stable").index
    adjusted = pd.Series(stats.holm(claim_p.to_numpy()), index=claim_p.index)[order]
    factor = pd.Series(len(order) - np.arange(len(order)), index=order)
    previous = adjusted.shift(1, fill_value=0.0)
    return np.maximum(tests["id"].map(previous).astype(float),
                      np.minimum(1.0, tests["p"] * tests["id"].map(factor).astype(float)))


def _expect(c: Claim) -> str:
    what = "slope" if c.type == "trend" else "difference" if c.baseline else "value"
    if c.expect == "equivalent":
        return f"{what} within ±{c.margin:g}"
    return f"{what} {'<' if c.expect == 'less' else '>'} {c.margin:g}"


def describe(claims: list[Claim]) -> pd.DataFrame:
    """One row per claim: its id, the rows it compares, metric, expectation and text."""
    def cell(values: dict) -> str:
        return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in values.items())

    out = []
    for c in claims:
        rows = cell(c.rows) + (f" vs {cell(c.baseline)}" if c.baseline else "")
        rows += "".join(f" at each {k.rsplit('.', 1)[-1]}" for k in c.at_each)
        rows += f" along {c.along.rsplit('.', 1)[-1]} ({c.scale})" if c.along else ""
        out.append({"claim": c.id, "rows": rows, "metric": c.metric, "expect": _expect(c),
                    "text": c.text})
    return pd.DataFrame(out)


def _summaries(df: pd.DataFrame) -> pd.DataFrame:
    """After each claim's tests, when it has several: reproduced when all are, not reproduced
    when one is not, else inconclusive."""
    out = []
    for cid, tests in df.groupby("id", sort=False):
        out.append(tests)
        if len(tests) < 2:
            continue
        v = tests["verdict"]
        verdict = ("not reproduced" if (v == "not reproduced").any() else
                   "inconclusive" if (v == "inconclusive").any() else "reproduced")
        first = tests.iloc[0]
        out.append(pd.DataFrame([{
            "claim": cid, "p": tests["p"].max(skipna=False),
            "p_adj": tests["p_adj"].max(skipna=False),
            "verdict": verdict, "n": tests["n"].min(), "metric": first["metric"],
            "expect": first["expect"] + " at each", "text": first["text"], "id": cid,
            "reason": f"{(v == 'reproduced').sum()} of {len(v)} tests reproduced"}]).astype(
            {"p": float, "p_adj": float}))
    return pd.concat(out, ignore_index=True)[COLUMNS]
