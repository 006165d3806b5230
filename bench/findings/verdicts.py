"""Verdicts of a grid's claims, computed from its finished runs: paired by seed, each test with
the interval that matches it, corrected across the grid, and a verdict that says what the data
say.

- `reproduced`: significant in the claimed direction after correction. The family is the
  grid's claims: a claim tested at each value of a key holds when every test rejects, so its p
  is the largest of its tests' (an intersection-union test, which needs no correction within
  the claim) and Holm runs across the claims' p's; a test's p_adj is its own p at its claim's
  Holm step.
- `contradicted`: significant in the opposite direction (for an equivalence: the 90% interval
  lies outside the margin), Holm-corrected across every test of the grid.
- `inconclusive`: neither; reported with the smallest effect its seeds could detect (80% power
  at the seeds' std, at the strictest Holm level alpha / claims) and the seeds that would detect
  the observed one; or with the reason it could not be computed (a trial that did not finish, a
  metric the runs lack, fewer than MIN_SEEDS paired seeds, seeds that tie, rows that ran at one
  precision where the claim contrasts two, a claim about planted structure on real text).
A test whose outcome the setup decides (`bounds`) is `not tested`, with the reason. A claim
tested at each value keeps its rule: reproduced when every tested test is, contradicted when
one is, else inconclusive.
"""

import json
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import linregress

from bench.tracking.names import FAILURE, SEEDS, STOPPED

from . import stats
from .bounds import Spans, decided
from .claims import EXACT, MIN_SEEDS, Claim, cells, expectation
from .numbers import flag, num

COLUMNS = ["claim", "effect", "ci_low", "ci_high", "p", "p_adj", "p_opposite",
           "p_opposite_adj", "verdict", "detectable", "seeds_needed", "n", "metric", "expect",
           "reason", "text"]
NOT_TESTED = "not tested"


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
    label = " ".join(f"{k.rsplit('.', 1)[-1]}={num(v)}" for k, v in cell.items())
    if lost := [s for s in seeds if s not in got.index]:
        raise _Unavailable("; ".join(f"{label} seed {num(s)}: "
                                     f"{_why_missing(missing, cell, s)}" for s in lost))
    if got.isna().any():
        seeds_na = ", ".join(num(s) for s in sorted(got.index[got.isna()]))
        raise _Unavailable(f"{label}: no {metric} (seeds {seeds_na})")
    return got.groupby(level=0).last()


def _sample(claim: Claim, runs: pd.DataFrame, missing: pd.DataFrame, pairs: list,
            seeds: list[Any]) -> pd.Series:
    """Per-seed values one test is about: differences, or slopes along the trend axis."""
    def point(rows: dict, base: dict | None) -> pd.Series:
        v = _values(runs, missing, rows, claim.metric, seeds)
        return v if base is None else v - _values(runs, missing, base, claim.metric, seeds)

    if claim.type == "compare":
        (rows, base), = pairs
        return point(rows, base)
    x = np.array([float(rows[claim.along]) for rows, _ in pairs])
    if len(np.unique(x)) < 2:
        raise _Unavailable(f"a trend needs at least 2 values of {claim.along}; the runs have "
                           f"{', '.join(map(num, np.unique(x)))}")
    x = np.log2(x) if claim.scale == "log2" else x
    y = pd.concat([point(rows, base) for rows, base in pairs], axis=1)
    return y.apply(lambda row: linregress(x, row.to_numpy()).slope, axis=1)


def _axes(runs: pd.DataFrame, missing: pd.DataFrame, keys: list[str]) -> dict[str, list]:
    """The values each grid key took in the sweep (finished or not), sorted."""
    every = pd.concat([runs, missing], ignore_index=True)
    return {k: sorted(every[k].dropna().unique().tolist()) for k in keys if k in every}


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


def _spans(runs: pd.DataFrame, cell: dict) -> Spans | None:
    """What fixes the spans of the cell's runs, from what their layer logged (its span limit,
    whether its spans are learned, its ramp, its softmax heads); None where they do not say."""
    sub = runs[match(runs, cell)]
    if sub.empty or not {"model.span", "layer.learned_spans", "layer.h"} <= set(sub):
        return None
    r = sub.iloc[0]
    learned = flag(r["layer.learned_spans"])
    ramp = r.get("layer.options.ramp") if learned else None
    if learned and (ramp is None or pd.isna(ramp)):
        return None
    return Spans(int(r["model.span"]), None if ramp is None else float(ramp), int(r["layer.h"]))


def _planted(runs: pd.DataFrame) -> float | None:
    """The farthest distance the runs' corpus planted (param dataset.planted); None: none."""
    logged = runs.get("dataset.planted", pd.Series(dtype=object)).dropna()
    found = [d for v in logged if isinstance(v, str) for d in json.loads(v)]
    return float(max(found)) if found else None


def _one_precision(runs: pd.DataFrame, claim: Claim, rows: dict, base: dict | None) -> str | None:
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


def _test(c: Claim, margin: float | None, pairs: list, runs: pd.DataFrame,
          missing: pd.DataFrame, seeds: list[Any], alpha: float) -> dict:
    """One test's numbers (effect, interval, p both ways, n; for an inconclusive outcome, what it
    could detect), or its reason: `not tested` where the setup decides it."""
    if not pairs:
        raise _Unavailable(f"the runs have no trials for {', '.join(c.rows)}")
    if margin is None:
        raise _Unavailable("the corpus plants no structure (real text): the claim is about "
                           "planted distances")
    if c.type == "compare":
        (rows, base), = pairs
        spans = [_spans(runs, cell) for cell in (rows, base) if cell is not None]
        if None not in spans and (why := decided(c, margin, *spans, *[None] * (base is None))):
            return {"verdict": NOT_TESTED, "reason": why}
        if why := _one_precision(runs, c, rows, base):
            raise _Unavailable(why)
    est = stats.estimate(_sample(c, runs, missing, pairs, seeds), c.expect, margin,
                         exact=c.metric in EXACT)
    out = {"effect": est.effect, "ci_low": est.ci_low, "ci_high": est.ci_high, "p": est.p,
           "p_opposite": est.p_opposite, "n": est.n}
    if est.n < MIN_SEEDS:
        return out | {"reason": f"{est.n} paired seeds; a verdict needs {MIN_SEEDS}"}
    if np.isnan(est.p):
        return out | {"reason": f"the seeds tie at {est.effect:.4g}: no spread to test (a capped "
                                "or discrete metric)"}
    if est.sd > 0:
        seen = stats.detectable(est, c.expect, margin, alpha)
        out |= {"detectable": seen.effect, "seeds_needed": seen.seeds}
    return out


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
    alpha = stats.ALPHA / max(1, len(claims))  # the strictest Holm step: what power assumes
    out = []
    for c in claims:
        keys = [*c.rows, *(c.baseline or {}), *c.at_each, *([c.along] if c.along else [])]
        axes = _axes(runs, missing, keys)
        tests: dict[str, list] = {}
        if all(k in axes for k in keys):
            for label, rows, base in cells(c, axes):
                tests.setdefault(label, []).append((rows, base))
        margin = _planted(runs) if c.margin == "planted" else c.margin
        for label, pairs in (tests or {"": []}).items():
            row = {"claim": f"{c.id} [{label}]" if label else c.id, "id": c.id,
                   "metric": c.metric, "expect": expectation(c), "text": c.text, "reason": ""}
            try:
                row |= _test(c, margin, pairs, runs, missing, seeds, alpha)
            except _Unavailable as err:
                row["reason"] = str(err)
            out.append(row)
    df = pd.DataFrame(out).reindex(columns=[*COLUMNS, "id"])
    counted = (df["reason"].fillna("") == "") & (df["verdict"] != NOT_TESTED)
    df["p_adj"] = _holm_by_claim(df[counted]).reindex(df.index)
    df["p_opposite_adj"] = pd.Series(stats.holm(df.loc[counted, "p_opposite"]),
                                     index=df.index[counted]).reindex(df.index)
    df["verdict"] = np.select(
        [df["verdict"] == NOT_TESTED, counted & (df["p_adj"] < stats.ALPHA),
         counted & (df["p_opposite_adj"] < stats.ALPHA)],
        [NOT_TESTED, "reproduced", "contradicted"], "inconclusive")
    settled = df["verdict"].isin(["reproduced", "contradicted"])
    df.loc[settled, ["detectable", "seeds_needed"]] = np.nan  # only an inconclusive test needs
    return _summaries(df)


def _summaries(df: pd.DataFrame) -> pd.DataFrame:
    """After each claim's tests, when it has several: contradicted when one tested test is,
    reproduced when every tested test is, else inconclusive; the reason counts them and names
    the values the setup decides."""
    out = []
    for cid, tests in df.groupby("id", sort=False):
        out.append(tests)
        if len(tests) < 2:
            continue
        tested = tests[tests["verdict"] != NOT_TESTED]
        v = tested["verdict"]
        verdict = ("contradicted" if (v == "contradicted").any() else
                   "reproduced" if len(v) and (v == "reproduced").all() else "inconclusive")
        skipped = tests.loc[tests["verdict"] == NOT_TESTED, "claim"].str.extract(r"\[(.*)\]")[0]
        reason = f"{(v == 'reproduced').sum()} of {len(v)} tests reproduced" + (
            f", {(v == 'contradicted').sum()} contradicted" if (v == "contradicted").any()
            else "") + (f"; not tested at {'; '.join(skipped)}: decided by construction"
                        if len(skipped) else "")
        first = tests.iloc[0]
        out.append(pd.DataFrame([{
            "claim": cid, "p": tested["p"].max(skipna=False),
            "p_adj": tested["p_adj"].max(skipna=False),
            "p_opposite": tested["p_opposite"].min(), "p_opposite_adj":
            tested["p_opposite_adj"].min(), "verdict": verdict, "n": tested["n"].min(),
            "metric": first["metric"], "expect": first["expect"] + " at each",
            "text": first["text"], "id": cid, "reason": reason}]).astype(
            {"p": float, "p_adj": float, "p_opposite": float, "p_opposite_adj": float}))
    return pd.concat(out, ignore_index=True)[COLUMNS]
