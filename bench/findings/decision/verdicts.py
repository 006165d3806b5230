"""Verdicts of a grid's claims, computed from its finished runs: one pre-registered error
family per grid, paired by seed, tested look by look in both directions (docs/claims.md states
the standard).

- The family is the grid's `claims:` in their written order, a fixed sequence; the sequence
  stops at the first claim not reproduced, and the claims after it are `not tested (sequence
  stopped at <id>)`. Alpha is shared between the two directions (`sequential.family`): each
  claim's contrary gets its share, and each claim is reproduced at alpha less what the
  contraries before it may spend, so the chance of any wrong verdict, either way, in the whole
  family is at most alpha whatever the dependence between the claims.
- A claim with several parts (one test per value of its `at_each` keys) is one hypothesis, the
  conjunction: it is reproduced when every part's test rejects at the level (an
  intersection-union test, whose level needs no correction: Berger 1982), and contradicted
  when one part's opposite test rejects at its level for alpha / parts (a union, Bonferroni).
- At look k (the first looks[k] seeds; one look for a fixed seed list) each direction has its
  exact boundary (`sequential.design`); at an interim look a claim neither way is undecided
  (seeds are added) or, where neither direction's p is below the futility bound, stopped for
  futility (`inconclusive`); at the last look it is `inconclusive`.
- Seeds the claims were designed from are design data: a finding computed on seeds that
  overlap the grid's `design_seeds` (or of a grid that does not name them, or whose grid file
  was not committed before its first confirmation trial started: `prereg`) is exploratory, its
  verdicts `holds (exploratory)` / `fails (exploratory)`, never reproduced or contradicted.
- On a probe's bits per answer, a seed whose outcome could not tell learning from none is
  vacuous (`vacuity`, from each cell's no-recall floor as the grid gives it): on neither side.
- A claim with a log offset reports the offsets of a fixed ladder at which its verdict stands;
  an inconclusive part what its seeds could detect and the seeds that would detect what it saw;
  a claim on a probe's bits per answer its cells' unlearned seeds and its vacuous ones; a raw
  span statistic in how many seeds its floor fixed it.
A test whose outcome the setup decides (`bounds`) is `not tested`, with the reason; a claim all
of whose tests are is skipped by the sequence. A cost claim read from the measurement (`costs`)
spends no alpha and is decided where the sequence meets it (`Design.settled`).
"""

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bench.experiment.claims import Claim, expectation, fixed
from bench.experiment.floors import Floors
from bench.experiment.grid import Looks
from bench.findings.reading import samples
from bench.findings.reading.samples import Unavailable
from bench.findings.statistics import sequential, stats

from . import costs, said
from .evidence import EXPLORATORY, evidence_of, seed_range
from .parts import Seen, claim_tests, numbers
from .said import NOT_TESTED

COLUMNS = ["claim", "about", "null", "effect", "ci_low", "ci_high", "p", "level", "rule",
           "p_opposite", "level_opposite", "verdict", "look", "n", "seed_range", "evidence",
           "test", "offsets", "detectable", "seeds_needed", "unlearned",
           "fixed_by_floor", "metric", "expect", "reason", "text"]
WITHDRAWN = "withdrawn"  # a verdict the span's floor R decides: never counted, stops the sequence
OFFSETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05)  # the log offsets a verdict is tried at


@dataclass(frozen=True)
class Plan:
    """The grid's looks: seeds per look (one look: every seed the runs have) and the futility
    bound (None: never stops early); `describe`: compute what the verdicts do not need
    (offsets, what an inconclusive test could detect), the slow part."""

    looks: tuple[int, ...]
    futility: float | None = None
    describe: bool = True


@dataclass(frozen=True)
class Reading:
    """How the verdicts read the runs: each cell's probe costs without recall (`floors`, the
    grid's: `floors.of_grid`; None: unknown, no claim on one computed); `describe` (`Plan`);
    the cost measurement (`cost`: cost.csv, None: not made); `pending`: a sweep still running,
    which measures after its trials, so a claim read from the measurement passes for now."""

    floors: Floors | None = None
    describe: bool = True
    cost: pd.DataFrame | None = None
    pending: bool = False


class Design:
    """A claim's boundaries in both directions at look k of the plan, at its share of the
    family's alpha (`sequential.family`): `look` (the claim's), `against` (the contrary's, over
    its parts), whether it is the last, and the plan; `settled`: read from the measurement alone,
    which no later look changes."""

    def __init__(self, c: Claim, plan: Plan, k: int, parts: int,
                 budget: sequential.Budget, settled: bool = False) -> None:
        exact = fixed(c)
        self.plan, self.k, self.futility, self.budget = plan, k, plan.futility, budget
        self.settled = settled
        self.claim = sequential.design(plan.looks, c.test, exact, budget.claim)
        self.opposite = sequential.opposite_boundaries(plan.looks, c.test, exact, parts,
                                                       budget.contrary, c.expect == "equivalent")
        self.look, self.against = self.claim[k], self.opposite[k]
        self.last = k == len(plan.looks) - 1

    @property
    def where(self) -> str:
        return f"{self.k + 1} of {len(self.plan.looks)}"


def contrary(c: Claim, parts: int) -> sequential.Contrary:
    """What the claim's opposite direction is, for its share of the family's alpha."""
    return sequential.Contrary(c.test, fixed(c), parts, c.expect == "equivalent")


def _parts(c: Claim, seen: Seen, plan: Plan, k: int, budget: sequential.Budget
           ) -> tuple[list[dict], Design]:
    """The claim's parts at look k, one row each (numbers, or a reason), and its design."""
    tests = claim_tests(c, seen.runs, seen.missing)
    d = Design(c, plan, k, len(tests) or 1, budget, costs.reads_measurement(c, seen.runs))
    margin = samples.planted(seen.runs) if c.margin == "planted" else c.margin
    out = []
    for label, pairs in (tests or {"": []}).items():
        row = {"claim": f"{c.id} [{label}]" if label else c.id, "id": c.id, "metric": c.metric,
               "expect": expectation(c), "text": c.text, "reason": "", "margin": margin,
               "about": stats.ABOUT[c.test], "null": stats.NULL[c.test],
               "level": d.look.level, "rule": d.look.rule, "level_opposite": d.against.level,
               "test": c.test + (f", log(y + {c.log_offset:g})" if c.log_offset else "")
               + (" above R" if c.floor == "R" else "")}
        try:
            row |= numbers(c, margin, pairs, seen,
                         min(d.look.level or d.claim[-1].level or stats.ALPHA, 0.5))
        except Unavailable as err:
            row["reason"] = str(err)
        out.append(row)
    return out, d


def _judge(parts: list[dict], d: Design) -> str:
    """The claim's state at one look (`sequential.judge` on its parts), or unavailable / not
    tested where its parts cannot be computed or the setup decides them, or withdrawn where
    the span's floor R decides a part (`_floor`)."""
    counted = [t for t in parts if t.get("usable")]
    if not counted:
        return NOT_TESTED if parts and all(t.get("verdict") == NOT_TESTED for t in parts) \
            else "unavailable"
    if len(counted) < len(parts) - sum(t.get("verdict") == NOT_TESTED for t in parts):
        return "unavailable"
    if any(t.get("floor_decided") for t in counted):
        return WITHDRAWN
    p, p_opp = (np.array([t[key] for t in counted]) for key in ("p", "p_opposite"))
    state = str(sequential.judge(p, p_opp, d.look, d.against, d.last or d.settled
                                 or all(t.get("settled") for t in counted), d.futility))
    if state == "reproduced" and any(t.get("alike_p", 0.0) > d.look.level * (
            1 + sequential.SLACK) for t in counted):  # heads alike not rejected (`parts`)
        return "inconclusive" if d.last else "undecided"
    return state


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


def _report(c: Claim, parts: list[dict], state: str, d: Design, seen: Seen) -> list[dict]:
    """The claim's rows as printed: each part's verdict in words (a part is reproduced only
    with its claim), when it settled, what an inconclusive part could detect; and a summary row
    for a claim of several parts."""
    counted = [t for t in parts if t.get("usable")]
    describe = d.plan.describe and state in sequential.FINAL
    word = (lambda v: EXPLORATORY.get(v, v)) if seen.evidence == "exploratory" else (
        lambda v: v)
    common = {"look": d.where, "seed_range": seed_range(seen.seeds), "evidence": seen.evidence}
    for t in parts:
        t |= common
        if not t.get("usable"):
            t.setdefault("verdict", "inconclusive")
            continue
        against = state == "contradicted" and t["p_opposite"] <= d.against.level * (
            1 + sequential.SLACK)
        t["verdict"] = "contradicted" if against else (
            state if state in ("reproduced", WITHDRAWN) else "inconclusive")
        if t["verdict"] == "inconclusive" and not t.get("settled"):
            t |= _power(c, t, d.claim[-1].level) if describe else {}
        note = said.notes(t, state, d, len(counted)) if t["verdict"] == "inconclusive" and not \
            t.get("settled") else []
        if not any(look.can_reject for look in d.opposite) and not fixed(c):
            note.append(f"cannot come out contradicted with {d.plan.looks[-1]} seeds: any "
                        "alpha for its contrary would leave the claim unable to reject")
        t["reason"] = "; ".join(filter(None, [t["reason"], *note]))
        t["verdict"] = word(t["verdict"])
    if len(parts) < 2:
        return parts
    summary = {"claim": c.id, "id": c.id, "about": stats.ABOUT[c.test], "metric": c.metric,
               "null": stats.NULL[c.test], "expect": expectation(c) + " at each", "text": c.text,
               "test": parts[0]["test"], "level": d.look.level, "rule": d.look.rule,
               "level_opposite": d.against.level, **common,
               "verdict": word(state if state in ("reproduced", "contradicted", NOT_TESTED,
                                                  WITHDRAWN) else "inconclusive"),
               "reason": said.tally(parts, d)}
    if counted:
        summary |= {"p": max(t["p"] for t in counted),
                    "p_opposite": min(t["p_opposite"] for t in counted),
                    "n": min(t["n"] for t in counted)}
    return [*parts, summary]


def offsets(c: Claim, seen: Seen, d: Design, state: str) -> str:
    """The offsets of the OFFSETS ladder at which a claim with a log offset is decided as
    `state` at the same look on the same seeds, as a range ("0.002-0.05 of 0.0005-0.05"), with
    what it is at the others."""
    same, other = [], []
    for offset in OFFSETS:
        parts, now_d = _parts(c.model_copy(update={"log_offset": offset}), seen, d.plan, d.k,
                              d.budget)
        now = _judge(parts, now_d)
        (same if now == state else other).append(f"{offset:g}" + ("" if now == state else
                                                                  f" ({now})"))
    ladder = f"of {OFFSETS[0]:g}-{OFFSETS[-1]:g}"
    if not same:
        return f"none {ladder}"
    held = same[0] if len(same) == 1 else f"{same[0]}-{same[-1]}"
    return f"{held} {ladder}" + (f"; {', '.join(other)}" if other else "")


@dataclass(frozen=True)
class SequenceResult:
    """The fixed sequence over the looks the runs reach: every test row (COLUMNS), and the
    claims still waiting for the next look's seeds (empty once the sequence has ended)."""

    table: pd.DataFrame
    waiting: list[Claim]


def verdict_table(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None = None,
                  looks: Looks | None = None, design: list[int] | None = (),
                  reading: Reading = Reading()) -> pd.DataFrame:
    """One row per test (and one summary row per claim with several tests), in COLUMNS.

    runs: the finished trials, one row each, with grid-key columns, a seed column and metrics
    (derive() is applied here); missing: the sweep's other trials (grid keys, seed, status,
    failure tags) so an inconclusive verdict can say what happened; looks: the grid's
    group-sequential design, whose look k reads seeds start .. start + looks[k] - 1 (None: one
    look at every seed the runs have); design: the seeds the claims were designed from (None:
    not named); reading: each cell's probe costs without recall (from the grid) and whether to
    compute what the verdicts do not need (offsets, what an inconclusive test could detect),
    the slow part. Never raises on data.
    """
    return judge_sequence(claims, runs, missing, looks, design, reading).table


def undecided(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None,
              looks: Looks, floors: Floors | None) -> list[Claim]:
    """The claims that wait for the next look: the one the sequence is at, if it is undecided
    at the last look the runs complete, and every claim after it (`floors`: the grid's;
    a sweep still running measures its costs after its trials: `Reading.pending`)."""
    return judge_sequence(claims, runs, missing, looks, (),
                          Reading(floors, False, pending=True)).waiting


def _looks(runs: pd.DataFrame, missing: pd.DataFrame, looks: Looks | None
           ) -> tuple[list[Any], Plan, list[int]]:
    """The seeds the looks read (the plan's, from looks.start; without looks, every seed the
    runs have), the plan without `describe`, and the looks the runs reach: the first, and each
    later one some of whose seeds ran (or were started)."""
    every = pd.concat([runs, missing], ignore_index=True)
    col = samples.seed_col(every)
    present = set(every[col].dropna().tolist()) if col else set()
    if looks is None:
        seeds = sorted(present) if col else [0]
        return seeds, Plan((len(seeds),)), [len(seeds)]
    seeds = list(range(looks.start, looks.start + looks.looks[-1]))
    reached = [n for k, n in enumerate(looks.looks)
               if k == 0 or present & set(seeds[looks.looks[k - 1]:n])]
    return seeds, Plan(tuple(looks.looks), looks.futility), reached


def judge_sequence(claims: list[Claim], runs: pd.DataFrame, missing: pd.DataFrame | None = None,
                   looks: Looks | None = None, design: list[int] | None = (),
                   reading: Reading = Reading()) -> SequenceResult:
    """The fixed sequence over the looks the runs reach (`verdict_table` says what the arguments
    are): every test row, and the claims still waiting for seeds."""
    missing = pd.DataFrame() if missing is None else missing
    runs = samples.derive(runs)
    seeds, plan, reached = _looks(runs, missing, looks)
    plan = Plan(plan.looks, plan.futility, reading.describe)
    budgets = sequential.family([contrary(c, len(claim_tests(c, runs, missing)) or 1)
                                 for c in claims], plan.looks)
    out: list[dict] = []
    i = 0
    for k, n in enumerate(reached):
        seen = Seen(runs, missing, seeds[:n], *evidence_of(seeds[:n], design), reading.floors,
                    reading.cost)
        while i < len(claims):
            c = claims[i]
            if reading.pending and costs.reads_measurement(c, runs):
                i += 1  # measured after the trials
                continue
            parts, d = _parts(c, seen, plan, k, budgets[i])
            state = _judge(parts, d)
            if state == "undecided" or state == "unavailable" and not (d.last or d.settled):
                break
            out += _decided(c, parts, state, d, seen)
            i += 1
            if state not in ("reproduced", NOT_TESTED):
                out += [_skipped(rest, f"sequence stopped at {c.id}") for rest in claims[i:]]
                return SequenceResult(_table(out), [])
        if i == len(claims):
            return SequenceResult(_table(out), [])
    # the loop broke at claims[i], undecided at the last look the runs reach: its tests as judged
    waiting = claims[i:]
    for t in parts:
        t["reason"] = "; ".join(filter(None, [t.get("reason"), f"undecided at look {d.where}: "
                                              f"look {d.k + 2} not run", seen.why]))
    out += _report(waiting[0], parts, "undecided", d, seen)
    out += [_skipped(rest, f"waits for {waiting[0].id}") for rest in waiting[1:]]
    return SequenceResult(_table(out), waiting)


def _table(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def _decided(c: Claim, parts: list[dict], state: str, d: Design, seen: Seen) -> list[dict]:
    """A claim's rows once the sequence leaves it: its parts and summary (`_report`), with why
    its seeds are exploratory and, for a log offset, the offsets at which its verdict stands."""
    for t in parts:
        t["reason"] = "; ".join(filter(None, [t["reason"], seen.why]))
    rows = _report(c, parts, state, d, seen)
    if d.plan.describe and c.log_offset and state in sequential.FINAL:
        rows[-1]["offsets"] = offsets(c, seen, d, state)
    return rows


def _skipped(c: Claim, why: str) -> dict:
    return {"claim": c.id, "id": c.id, "metric": c.metric, "expect": expectation(c),
            "about": stats.ABOUT[c.test], "null": stats.NULL[c.test], "text": c.text,
            "verdict": NOT_TESTED, "reason": why}
