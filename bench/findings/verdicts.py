"""Verdicts of a grid's claims, computed from its finished runs: one pre-registered error
family per grid, paired by seed, tested look by look (docs/claims.md states the standard).

- The family is the grid's `claims:` in their written order, a fixed sequence: each claim is
  tested at the full alpha, one-sided; the sequence stops at the first claim not reproduced,
  and the claims after it are `not tested (sequence stopped at <id>)`.
- A claim with several parts (one test per value of its `at_each` keys) is one hypothesis, the
  conjunction: it is reproduced when every part's test rejects at the level (an
  intersection-union test, whose level needs no correction: Berger 1982), and contradicted
  when one part's opposite test rejects after Holm across the parts (a union, which does).
- At look k (the first looks[k] seeds; one look for a fixed seed list) the level is the
  claim's (`sequential.design`). At an interim look a claim neither way is undecided (seeds are
  added) or, where its p exceeds the futility bound, stopped for futility (`inconclusive`); at
  the last look it is `inconclusive`.
- Seeds the claims were designed from are design data: a finding computed on seeds that
  overlap the grid's `design_seeds` (or of a grid that does not name them) is exploratory, its
  verdicts `holds (exploratory)` / `fails (exploratory)`, never reproduced or contradicted.
- Each decided claim reports `p_replicate`, the share of resamples of its seeds (with
  replacement, all its parts together) in which the same test at the same level decides it
  the same way; an inconclusive part what its seeds could detect and the seeds that would
  detect what it saw; a claim on a probe's bits per answer in how many seeds each cell did
  not learn the probe.
A test whose outcome the setup decides (`bounds`) is `not tested`, with the reason; a claim all
of whose tests are is skipped by the sequence.
"""

import zlib
from typing import Any

import numpy as np
import pandas as pd

from . import samples, sequential, stats
from .bounds import SPAN_METRICS, decided
from .claims import EXACT, MIN_SEEDS, Claim, cells, expectation
from .numbers import num
from .samples import Unavailable
from .spec import Looks

COLUMNS = ["claim", "about", "effect", "ci_low", "ci_high", "p", "p_opposite", "p_opposite_adj",
           "level", "verdict", "look", "n", "seed_range", "evidence", "test", "p_replicate",
           "detectable", "seeds_needed", "unlearned", "metric", "expect", "reason", "text"]
NOT_TESTED = "not tested"
EXPLORATORY = {"reproduced": "holds (exploratory)", "contradicted": "fails (exploratory)"}
UNLEARNED = 0.1  # a seed above this share of the no-recall bits per answer did not learn
RESAMPLES = 1000  # seed resamples behind p_replicate


def seed_range(seeds: list[Any]) -> str:
    """Seeds as people write them: 100-107, or 0, 2, 5."""
    if len(seeds) > 1 and np.array_equal(np.diff(seeds), np.ones(len(seeds) - 1)):
        return f"{num(seeds[0])}-{num(seeds[-1])}"
    return ", ".join(map(num, seeds))


def _part(c: Claim, margin: float | None, pairs: list, runs: pd.DataFrame,
          missing: pd.DataFrame, seeds: list[Any], look: sequential.Look) -> dict:
    """One part's numbers at these seeds (effect, the interval at the look's level, p both
    ways, n, the per-seed values), or `not tested` where the setup decides it; raises
    Unavailable with the reason it cannot be computed."""
    if not pairs:
        raise Unavailable(f"the runs have no trials for {', '.join(c.rows)}")
    if margin is None:
        raise Unavailable("the corpus plants no structure (real text): the claim is about "
                          "planted distances")
    if c.type == "compare":
        (rows, base), = pairs
        spans = [samples.spans(runs, cell) for cell in (rows, base) if cell is not None] \
            if c.metric in SPAN_METRICS else [None]
        if None not in spans and (why := decided(c, margin, *spans, *[None] * (base is None))):
            return {"verdict": NOT_TESTED, "reason": why}
        if why := samples.one_precision(runs, c, rows, base):
            raise Unavailable(why)
    values, shape = samples.sample(c, runs, missing, pairs, seeds)
    est = stats.estimate(values, c.expect, margin, exact=c.metric in EXACT, test=c.test,
                         alpha=min(look.level, 0.5))
    out = {"effect": est.effect, "ci_low": est.ci_low, "ci_high": est.ci_high, "p": est.p,
           "p_opposite": est.p_opposite, "n": est.n, "sd": est.sd, "share": est.share,
           "values": values.to_numpy(dtype=float), "reason": shape}
    if counts := samples.unlearned(c, runs, pairs, seeds, UNLEARNED):
        out["unlearned"] = counts
    if est.n < MIN_SEEDS:  # the numbers are shown, the verdict waits
        return out | {"reason": f"{est.n} paired seeds; a verdict needs {MIN_SEEDS}"}
    return out | {"usable": True}


def _parts(c: Claim, runs: pd.DataFrame, missing: pd.DataFrame, seeds: list[Any],
           look: sequential.Look) -> list[dict]:
    """The claim's parts at these seeds, one row each (numbers, or a reason)."""
    keys = [*c.rows, *(c.baseline or {}), *c.at_each, *([c.along] if c.along else [])]
    axes = samples.axes(runs, missing, keys)
    tests: dict[str, list] = {}
    if all(k in axes for k in keys):
        for label, rows, base in cells(c, axes):
            tests.setdefault(label, []).append((rows, base))
    margin = samples.planted(runs) if c.margin == "planted" else c.margin
    out = []
    for label, pairs in (tests or {"": []}).items():
        row = {"claim": f"{c.id} [{label}]" if label else c.id, "id": c.id, "metric": c.metric,
               "expect": expectation(c), "text": c.text, "reason": "", "margin": margin,
               "about": stats.ABOUT[c.test], "level": look.level,
               "test": c.test + (f", log(y + {c.log_offset:g})" if c.log_offset else "")}
        try:
            row |= _part(c, margin, pairs, runs, missing, seeds, look)
        except Unavailable as err:
            row["reason"] = str(err)
        out.append(row)
    return out


def _judge(parts: list[dict], look: sequential.Look, last: bool, futility: float | None
           ) -> str:
    """The claim's state at one look (its parts' opposite p's Holm-adjusted, in place):
    reproduced, contradicted, futile, undecided (seeds to add), or unavailable / not tested."""
    counted = [t for t in parts if t.get("usable")]
    if not counted:
        return NOT_TESTED if parts and all(t.get("verdict") == NOT_TESTED for t in parts) \
            else "unavailable"
    for t, adj in zip(counted, stats.holm([t["p_opposite"] for t in counted]), strict=True):
        t["p_opposite_adj"] = float(adj)
    if len(counted) < len(parts) - sum(t.get("verdict") == NOT_TESTED for t in parts):
        return "unavailable"
    if any(t["p_opposite_adj"] <= look.level for t in counted):
        return "contradicted"
    if all(t["p"] <= look.level for t in counted):
        return "reproduced"
    if last:
        return "inconclusive"
    if futility is not None and max(t["p"] for t in counted) > futility:
        return "futile"
    return "undecided"


def replication(c: Claim, parts: list[dict], level: float, state: str) -> float:
    """The share of RESAMPLES resamples of the claim's seeds (with replacement, every part's
    value of a seed together) that the same tests at `level` decide as `state`: reproduced,
    contradicted, or neither (seeded by the claim's id, so a report is the same every time)."""
    counted = [t for t in parts if t.get("usable")]
    values = np.stack([t["values"] for t in counted])  # (parts, seeds)
    if c.metric in EXACT and np.ptp(values) == 0:
        return 1.0
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))
    pick = rng.integers(0, values.shape[1], (RESAMPLES, values.shape[1]))
    p, opposite = stats.p_values(values[:, pick], c.expect, counted[0]["margin"], c.test)
    against = len(counted) * opposite.min(axis=0) <= level  # Holm's first step rejects
    shown = ~against & (p <= level).all(axis=0)
    same = {"reproduced": shown, "contradicted": against}.get(state, ~shown & ~against)
    return float(same.mean())


def _power(c: Claim, t: dict, level: float) -> dict:
    """What an inconclusive part could detect at `level` (80% power) and the seeds that would
    detect what it saw (for the mean at the 95% upper bound of its seeds' std)."""
    est = stats.Estimate(t["n"], t["effect"], t["ci_low"], t["ci_high"], t["p"],
                         t["p_opposite"], t["sd"], t["share"])
    if c.test == "sign-flip" and not t["sd"] > 0:
        return {}
    seen = stats.detectable(est, c.expect, t["margin"], level, c.test)
    plan = stats.detectable(est, c.expect, t["margin"], level, c.test,
                            sd=stats.sd_upper(t["sd"], t["n"]) if c.test == "sign-flip" else None)
    return {"detectable": seen.effect, "seeds_needed": plan.seeds}


def _report(c: Claim, parts: list[dict], state: str, k: int, design: tuple, seeds: list[Any],
            evidence: str, describe: bool) -> list[dict]:
    """The claim's rows as printed: each part's verdict in words (a part is reproduced only
    with its claim), when it settled, the claim's replication share, what an inconclusive part
    could detect; and a summary row for a claim of several parts."""
    look, last = design[k], design[-1]
    counted = [t for t in parts if t.get("usable")]
    word = (lambda v: EXPLORATORY.get(v, v)) if evidence == "exploratory" else (lambda v: v)
    common = {"look": f"{k + 1} of {len(design)}", "seed_range": seed_range(seeds),
              "evidence": evidence}
    for t in parts:
        t |= common
        if not t.get("usable"):
            t.setdefault("verdict", "inconclusive")
            continue
        note = []
        if state == "contradicted":
            t["verdict"] = "contradicted" if t["p_opposite_adj"] <= look.level else "inconclusive"
        else:
            t["verdict"] = "reproduced" if state == "reproduced" else "inconclusive"
        if t["verdict"] == "inconclusive":
            if t["p"] <= look.level and len(counted) > 1:
                note.append("shown at this value alone; the claim needs every value")
            if not look.can_reject:
                note.append(f"with {look.n} seeds the smallest attainable p is "
                            f"{look.floor:.3g} > the level {look.level:.3g}")
            t |= _power(c, t, last.level) if describe else {}
        if state == "futile":
            note.append(f"stopped for futility at look {k + 1} of {len(design)}: p above the "
                        "futility bound")
        t["reason"] = "; ".join(filter(None, [t["reason"], *note]))
        t["verdict"] = word(t["verdict"])
    again = replication(c, parts, look.level, state) if describe and counted and state in (
        "reproduced", "contradicted", "inconclusive", "futile") else float("nan")
    if len(parts) < 2:
        for t in counted:
            t["p_replicate"] = again
        return parts
    summary = {"claim": c.id, "id": c.id, "about": stats.ABOUT[c.test], "metric": c.metric,
               "expect": expectation(c) + " at each", "text": c.text, "test": parts[0]["test"],
               "level": look.level, "p_replicate": again, **common,
               "verdict": word(state if state in ("reproduced", "contradicted", NOT_TESTED)
                               else "inconclusive"), "reason": _tally(parts)}
    if counted:
        summary |= {"p": max(t["p"] for t in counted),
                    "p_opposite": min(t["p_opposite"] for t in counted),
                    "p_opposite_adj": min(t["p_opposite_adj"] for t in counted),
                    "n": min(t["n"] for t in counted)}
    return [*parts, summary]


def _tally(parts: list[dict]) -> str:
    """A claim's parts counted: shown at the level, contradicted, decided by construction."""
    counted = [t for t in parts if t.get("p_opposite_adj") is not None]
    shown = sum(t["p"] <= t["level"] for t in counted)
    against = sum(t["p_opposite_adj"] <= t["level"] for t in counted)
    skipped = [t["claim"].split("[", 1)[-1].rstrip("]") for t in parts
               if t.get("verdict") == NOT_TESTED]
    return (f"{shown} of {len(counted)} parts shown at the level" +
            (f", {against} contradicted" if against else "") +
            (f"; not tested at {'; '.join(skipped)}: decided by construction" if skipped else ""))


def evidence_of(seeds: list[Any], design: list[int] | None) -> tuple[str, str]:
    """(confirmatory or exploratory, why): seeds that overlap the design seeds, or a grid that
    does not name them, make a finding exploratory."""
    if design is None:
        return "exploratory", "the grid does not name the seeds its claims were designed from"
    if overlap := sorted(set(seeds) & set(design)):
        return "exploratory", (f"seeds {seed_range(overlap)} are design data (design_seeds "
                               f"{seed_range(sorted(design))})")
    return "confirmatory", ""


def evaluate(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None = None,
             looks: Looks | None = None, design: list[int] | None = (),
             describe: bool = True) -> pd.DataFrame:
    """One row per test (and one summary row per claim with several tests), in COLUMNS.

    runs: the finished trials, one row each, with grid-key columns, a seed column and metrics
    (derive() is applied here); missing: the sweep's other trials (grid keys, seed, status,
    failure tags) so an inconclusive verdict can say what happened; looks: the grid's
    group-sequential design (None: one look at every seed the runs have); design: the seeds the
    claims were designed from (None: not named); describe: compute what the verdicts do not
    need (p_replicate, what an inconclusive test could detect), the slow part. Never raises on
    data.
    """
    rows = _sequence(claims, runs, missing, looks, design, describe)[0]
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def undecided(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None,
              looks: Looks) -> list[Claim]:
    """The claims that wait for the next look: the one the sequence is at, if it is undecided
    at the last look the runs complete, and every claim after it."""
    return _sequence(claims, runs, missing, looks, (), False)[1]


def _sequence(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None,
              looks: Looks | None, design: list[int] | None, describe: bool
              ) -> tuple[list[dict], list[Claim]]:
    """The fixed sequence over the looks the runs reach: (every test row, the claims still
    waiting for seeds)."""
    missing = pd.DataFrame() if missing is None else missing
    runs = samples.derive(runs)
    every = pd.concat([runs, missing], ignore_index=True)
    col = samples.seed_col(every)
    seeds = sorted(every[col].dropna().unique().tolist()) if col else [0]
    plan = tuple(looks.looks) if looks else (len(seeds),)
    reached = [n for n in plan if n <= len(seeds)] or list(plan[:1])
    futility = looks.futility if looks else None
    out: list[dict] = []
    i = 0
    for k, n in enumerate(reached):
        last = k == len(plan) - 1
        evidence, why = evidence_of(seeds[:n], design)
        while i < len(claims):
            c = claims[i]
            levels = sequential.design(plan, c.metric in EXACT)
            parts = _parts(c, runs, missing, seeds[:n], levels[k])
            state = _judge(parts, levels[k], last, futility)
            if state == "undecided" or state == "unavailable" and not last:
                break
            for t in parts:
                t["reason"] = "; ".join(filter(None, [t["reason"], why]))
            out += _report(c, parts, state, k, levels, seeds[:n], evidence, describe)
            i += 1
            if state not in ("reproduced", NOT_TESTED):
                out += [_skipped(rest, f"sequence stopped at {c.id}") for rest in claims[i:]]
                return out, []
        if i == len(claims):
            return out, []
    # the loop broke at claims[i], undecided at the last look the runs reach: its tests as judged
    waiting, k = claims[i:], len(reached) - 1
    for t in parts:
        t["reason"] = "; ".join(filter(None, [t.get("reason"), f"undecided at look {k + 1} of "
                                              f"{len(plan)}: look {k + 2} not run", why]))
    out += _report(waiting[0], parts, "undecided", k, levels, seeds[:reached[-1]], evidence,
                   False)
    out += [_skipped(rest, f"waits for {waiting[0].id}") for rest in waiting[1:]]
    return out, waiting


def _skipped(c: Claim, why: str) -> dict:
    return {"claim": c.id, "id": c.id, "metric": c.metric, "expect": expectation(c),
            "about": stats.ABOUT[c.test], "text": c.text, "verdict": NOT_TESTED, "reason": why}
