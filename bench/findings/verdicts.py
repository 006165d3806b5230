"""Verdicts of a grid's claims, computed from its finished runs: one pre-registered error
family per grid, paired by seed, tested look by look (docs/claims.md states the standard).

- The family is the grid's `claims:` in their written order, a fixed sequence: each claim is
  tested at the full alpha, one-sided; the sequence stops at the first claim not reproduced,
  and the claims after it are `not tested (sequence stopped at <id>)`.
- A claim's own tests (one per value of its `at_each` keys) are Holm-corrected within the
  claim, in both directions; the claim is reproduced when every test is.
- At look k (the first looks[k] seeds; one look for a fixed seed list) a claim rejects where
  its Holm-adjusted p is at most its boundary (`sequential.boundaries`): `reproduced` in the
  claimed direction, `contradicted` in the opposite one (the claim's hypothesis and its
  negation partition the effect, so both directions share the claim's alpha). At an interim
  look a claim neither way is undecided (seeds are added) or, where its p exceeds the futility
  bound, stopped for futility (`inconclusive`); at the last look it is `inconclusive`.
- An inconclusive test reports the smallest effect its seeds could detect (80% power at the
  seeds' std, at the last look's level) and the seeds that would detect the observed one at
  the 95% upper bound of that std; or the reason it could not be computed (a trial that did
  not finish, a metric the runs lack, fewer than MIN_SEEDS paired seeds, seeds that tie, rows
  that ran at one precision where the claim contrasts two, planted structure on real text).
  A settled one reports the probability that a fresh seed set of its size settles it again.
A test whose outcome the setup decides (`bounds`) is `not tested`, with the reason; a claim all
of whose tests are is skipped by the sequence.
"""

import json
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import linregress

from bench.tracking.names import FAILURE, SEEDS, STOPPED

from . import sequential, stats
from .bounds import Spans, decided
from .claims import EXACT, MIN_SEEDS, Claim, cells, expectation
from .numbers import flag, num
from .spec import Looks

COLUMNS = ["claim", "effect", "ci_low", "ci_high", "p", "p_adj", "p_opposite",
           "p_opposite_adj", "level", "verdict", "look", "n", "test", "p_replicate",
           "detectable", "seeds_needed", "metric", "expect", "reason", "text"]
NOT_TESTED = "not tested"


def derive(runs: pd.DataFrame) -> pd.DataFrame:
    """The DERIVED metrics as columns (NaN where a run lacks what they need); head-span metrics
    need a `head_spans` column (per run, a list of per-layer lists, as result.json holds)."""
    runs = runs.copy()

    def col(name: str) -> pd.Series:
        return runs.get(name, pd.Series(np.nan, runs.index))

    runs["gap_to_floor"] = col("final_test_bpc") - col("floor_bpc")
    runs["span_fraction"] = col("mean_span") / col("model.span")
    spans = col("head_spans").map(lambda s: np.concatenate([np.ravel(layer) for layer in s])
                                  if isinstance(s, list) and s else None)
    runs["max_head_span"] = spans.map(lambda s: np.nan if s is None else float(s.max()))
    runs["head_span_spread"] = spans.map(
        lambda s: np.nan if s is None or np.median(s) <= 0 else float(s.max() / np.median(s)))
    runs["long_head_fraction"] = spans.map(
        lambda s: np.nan if s is None else float(np.mean(s >= s.max() / 2)))
    runs["layer_span_ratio"] = col("head_spans").map(
        lambda s: float(np.mean(s[0]) / np.mean(s[-1])) if isinstance(s, list) and len(s) > 1
        and np.mean(s[-1]) > 0 else np.nan)
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
    got = got[got.index.isin(seeds)]
    if got.isna().any():
        seeds_na = ", ".join(num(s) for s in sorted(got.index[got.isna()]))
        raise _Unavailable(f"{label}: no {metric} (seeds {seeds_na})")
    return got.groupby(level=0).last()


def _sample(claim: Claim, runs: pd.DataFrame, missing: pd.DataFrame, pairs: list,
            seeds: list[Any]) -> tuple[pd.Series, str]:
    """Per-seed values one test is about (differences, or slopes along the trend axis), on the
    claim's scale (log(y + log_offset) where declared), and for a trend what its slope
    estimates."""
    def point(rows: dict, base: dict | None) -> pd.Series:
        def at(cell: dict) -> pd.Series:
            v = _values(runs, missing, cell, claim.metric, seeds)
            return np.log(v + claim.log_offset) if claim.log_offset else v

        return at(rows) if base is None else at(rows) - at(base)

    if claim.type == "compare":
        (rows, base), = pairs
        return point(rows, base), ""
    x = np.array([float(rows[claim.along]) for rows, _ in pairs])
    if len(np.unique(x)) < 2:
        raise _Unavailable(f"a trend needs at least 2 values of {claim.along}; the runs have "
                           f"{', '.join(map(num, np.unique(x)))}")
    values = x
    x = np.log2(x) if claim.scale == "log2" else x
    y = pd.concat([point(rows, base) for rows, base in pairs], axis=1)
    return y.apply(lambda row: linregress(x, row.to_numpy()).slope, axis=1), _shape(
        claim, values, x, y.mean().to_numpy())


def _shape(claim: Claim, values: np.ndarray, x: np.ndarray, means: np.ndarray) -> str:
    """What a trend's slope estimates: at 3 evenly spaced points the least-squares slope is the
    contrast of the ends, the middle carries no weight; and whether the means are monotone in
    the claimed direction (descriptive, not a test)."""
    order = np.argsort(x)
    x, values, means = x[order], values[order], means[order]
    key = claim.along.rsplit(".", 1)[-1]
    steps = np.diff(means)
    up = claim.expect == "greater"
    trend = ("monotone in the claimed direction" if (steps > 0).all() and up or
             (steps < 0).all() and claim.expect == "less" else "not monotone")
    said = ", ".join(f"{num(v)}: {m:.3g}" for v, m in zip(values, means, strict=True))
    ends = ""
    if len(x) == 3 and np.isclose(x[1] - x[0], x[2] - x[1]):
        ends = (f"; at 3 evenly spaced points the slope is the contrast of the ends "
                f"({key} = {num(values[-1])} vs {num(values[0])}), {key} = {num(values[1])} "
                "carries no weight")
    return f"means by {key} {said} ({trend}){ends}"


def _axes(runs: pd.DataFrame, missing: pd.DataFrame, keys: list[str]) -> dict[str, list]:
    """The values each grid key took in the sweep (finished or not), sorted."""
    every = pd.concat([runs, missing], ignore_index=True)
    return {k: sorted(every[k].dropna().unique().tolist()) for k in keys if k in every}


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
          missing: pd.DataFrame, seeds: list[Any]) -> dict:
    """One test's numbers at these seeds (effect, interval at the plain alpha, p both ways, n),
    or its reason: `not tested` where the setup decides it."""
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
    values, shape = _sample(c, runs, missing, pairs, seeds)
    est = stats.estimate(values, c.expect, margin, exact=c.metric in EXACT, test=c.test)
    out = {"effect": est.effect, "ci_low": est.ci_low, "ci_high": est.ci_high, "p": est.p,
           "p_opposite": est.p_opposite, "n": est.n, "sd": est.sd, "reason": shape}
    if est.n < MIN_SEEDS:  # the numbers are shown, the verdict waits
        return out | {"reason": f"{est.n} paired seeds; a verdict needs {MIN_SEEDS}",
                      "usable": False}
    if np.isnan(est.p):
        raise _Unavailable(f"the seeds tie at {est.effect:.4g}: no spread to test (a capped or "
                           "discrete metric)")
    return out | {"usable": True}


def _claim_tests(c: Claim, runs: pd.DataFrame, missing: pd.DataFrame, seeds: list[Any]
                 ) -> list[dict]:
    """The claim's tests at these seeds, one row each (numbers, or a reason)."""
    keys = [*c.rows, *(c.baseline or {}), *c.at_each, *([c.along] if c.along else [])]
    axes = _axes(runs, missing, keys)
    tests: dict[str, list] = {}
    if all(k in axes for k in keys):
        for label, rows, base in cells(c, axes):
            tests.setdefault(label, []).append((rows, base))
    margin = _planted(runs) if c.margin == "planted" else c.margin
    out = []
    for label, pairs in (tests or {"": []}).items():
        row = {"claim": f"{c.id} [{label}]" if label else c.id, "id": c.id, "metric": c.metric,
               "expect": expectation(c), "text": c.text, "reason": "", "margin": margin,
               "test": c.test + (f", log(y + {c.log_offset:g})" if c.log_offset else "")}
        try:
            row |= _test(c, margin, pairs, runs, missing, seeds)
        except _Unavailable as err:
            row["reason"] = str(err)
        out.append(row)
    return out


def _judge(c: Claim, tests: list[dict], level: float, last: bool, futility: float | None
           ) -> str:
    """The claim's state at one look, its tests' p's Holm-adjusted within it (in place):
    reproduced, contradicted, futile, undecided (seeds to add), or unavailable / not tested."""
    counted = [t for t in tests if t.get("usable")]
    if not counted:
        return NOT_TESTED if tests and all(t.get("verdict") == NOT_TESTED for t in tests) \
            else "unavailable"
    for key in ("p", "p_opposite"):
        for t, adj in zip(counted, stats.holm([t[key] for t in counted]), strict=True):
            t[f"{key}_adj"] = float(adj)
    for t in counted:
        t["level"] = level
        t["verdict"] = ("reproduced" if t["p_adj"] <= level else
                        "contradicted" if t["p_opposite_adj"] <= level else "inconclusive")
    if len(counted) < len(tests) - sum(t.get("verdict") == NOT_TESTED for t in tests):
        return "unavailable"
    if any(t["verdict"] == "contradicted" for t in counted):
        return "contradicted"
    if all(t["verdict"] == "reproduced" for t in counted):
        return "reproduced"
    if last:
        return "inconclusive"
    if futility is not None and max(t["p_adj"] for t in counted) > futility:
        return "futile"
    return "undecided"


def _report(c: Claim, tests: list[dict], state: str, look: int, looks: list[int],
            level: float) -> list[dict]:
    """The claim's rows as printed: verdicts in words, when it settled, the replication
    probability of each test's verdict (that a fresh seed set of the same size gets it again),
    what an inconclusive one could detect (at the last look's level, seeds needed at the 95%
    upper bound of its std)."""
    where = f"{look + 1} of {len(looks)}"
    final = sequential.boundaries(tuple(looks))[-1]  # cached: computed once per design
    for t in tests:
        t["look"] = where
        if not t.pop("usable", False):
            t.setdefault("verdict", "inconclusive")
            continue
        n = t["n"]
        if state == "futile":
            t["reason"] = "; ".join(filter(None, [t["reason"], f"stopped for futility at look "
                                                  f"{where}: p_adj above the futility bound"]))
        again = {d: stats.replication(t[key], level, n, c.test) for d, key in (
            ("reproduced", "p_adj"), ("contradicted", "p_opposite_adj"))}
        t["p_replicate"] = again.get(t["verdict"], 1 - sum(again.values()))
        if t["verdict"] == "inconclusive" and t["sd"] > 0:
            est = stats.Estimate(n, t["effect"], t["ci_low"], t["ci_high"], t["p"],
                                 t["p_opposite"], t["sd"])
            seen = stats.detectable(est, c.expect, t["margin"], final)
            upper = stats.detectable(est, c.expect, t["margin"], final,
                                     sd=stats.sd_upper(t["sd"], n))
            seeds = upper.seeds
            if seeds is not None and c.test == "sign-flip":
                seeds = max(seeds, stats.min_seeds(final))
            t |= {"detectable": seen.effect, "seeds_needed": seeds}
    return tests


def evaluate(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None = None,
             looks: Looks | None = None) -> pd.DataFrame:
    """One row per test (and one summary row per claim with several tests), in COLUMNS.

    runs: the finished trials, one row each, with grid-key columns, a seed column and metrics
    (derive() is applied here); missing: the sweep's other trials (grid keys, seed, status,
    failure tags) so an inconclusive verdict can say what happened; looks: the grid's
    group-sequential design (None: one look at every seed the runs have). Never raises on data.
    """
    return _summaries(pd.DataFrame(_sequence(claims, runs, missing, looks)[0]))


def undecided(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None,
              looks: Looks) -> list[Claim]:
    """The claims that wait for the next look: the one the sequence is at, if it is undecided
    at the last look the runs complete, and every claim after it."""
    return _sequence(claims, runs, missing, looks)[1]


def _sequence(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None,
              looks: Looks | None) -> tuple[list[dict], list[Claim]]:
    """The fixed sequence over the looks the runs reach: (every test row, the claims still
    waiting for seeds)."""
    missing = pd.DataFrame() if missing is None else missing
    runs = derive(runs)
    every = pd.concat([runs, missing], ignore_index=True)
    col = _seed_col(every)
    seeds = sorted(every[col].dropna().unique().tolist()) if col else [0]
    plan = list(looks.looks) if looks else [len(seeds)]
    reached = [n for n in plan if n <= len(seeds)] or plan[:1]
    futility = looks.futility if looks else None
    levels = sequential.boundaries(tuple(plan))
    out: list[dict] = []
    i = 0
    for k, n in enumerate(reached):
        level, last = levels[k], k == len(plan) - 1
        while i < len(claims):
            c = claims[i]
            tests = _claim_tests(c, runs, missing, seeds[:n])
            state = _judge(c, tests, level, last, futility)
            if state == "undecided" or state == "unavailable" and not last:
                break
            out += _report(c, tests, state, k, plan, level)
            i += 1
            if state not in ("reproduced", NOT_TESTED):
                stopped = c.id
                out += [_skipped(rest, f"sequence stopped at {stopped}") for rest in claims[i:]]
                return out, []
        if i == len(claims):
            return out, []
    # the loop broke at claims[i], undecided at the last look the runs reach: its tests as judged
    waiting, k = claims[i:], len(reached) - 1
    for t in tests:
        if t.get("verdict") != NOT_TESTED:
            t["verdict"] = "inconclusive"
        t["reason"] = "; ".join(filter(None, [t.get("reason"), f"undecided at look {k + 1} of "
                                              f"{len(plan)}: look {k + 2} not run"]))
    out += _report(waiting[0], tests, "undecided", k, plan, level)
    out += [_skipped(rest, f"waits for {waiting[0].id}") for rest in waiting[1:]]
    return out, waiting


def _skipped(c: Claim, why: str) -> dict:
    return {"claim": c.id, "id": c.id, "metric": c.metric, "expect": expectation(c),
            "text": c.text, "verdict": NOT_TESTED, "reason": why}


def _summaries(df: pd.DataFrame) -> pd.DataFrame:
    """After each claim's tests, when it has several: contradicted when one tested test is,
    reproduced when every tested test is, else inconclusive; the reason counts them and names
    the values the setup decides; its replication probability is the product of its tests'."""
    df = df.reindex(columns=[*COLUMNS, "id"])
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
            tested["p_opposite_adj"].min(), "level": first["level"], "verdict": verdict,
            "look": first["look"], "n": tested["n"].min(), "test": first["test"],
            "p_replicate": tested["p_replicate"].prod() if verdict == "reproduced" else np.nan,
            "metric": first["metric"], "expect": first["expect"] + " at each",
            "text": first["text"], "id": cid, "reason": reason}]).astype(
            {"p": float, "p_adj": float, "p_opposite": float, "p_opposite_adj": float}))
    return pd.concat(out, ignore_index=True)[COLUMNS]
