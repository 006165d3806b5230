"""Group-sequential looks with exact boundaries, in both directions: seeds are added in stages,
and at each look a claim can be reproduced, contradicted, stopped for futility or left for the
next look, with every error rate held at alpha on the test's own discrete null.

At look k of K a claim has seen n_k of its planned n_K seeds (information fraction
t_k = n_k / n_K). Each direction, the claim (`reproduced`: its p at most the look's level) and
its opposite (`contradicted`), may have spent by t the error of the Lan-DeMets function of
O'Brien-Fleming type,

    alpha(t) = 2 (1 - Phi(z_{1 - alpha / 2} / sqrt(t)))          (alpha(1) = alpha),

very little at early looks. A look's level is the largest p the test can attain at n_k seeds
that keeps the error spent by look k within alpha(t_k), on the exact discrete null:

- `sign`: the count of seeds on the claimed side is Binomial(n, 1/2) at the null's boundary, and
  the counts at the looks are one random walk, so the error of a set of boundaries is exact
  (`_sign`): with looks 4, 6, 8 the rule is "6 of 6, otherwise 7 of 8", error 0.039, where
  levels set from the continuous spending alone would allow only "6 of 6" (error 0.016).
- `sign-flip`: p is a multiple of 2^-n; each look's level is the largest multiple within what
  the earlier looks left, and the error is at most the sum of the levels (a union bound over
  the looks, which holds for any magnitudes of the per-seed values).
- a metric fixed by the config (`exact`): p is 0 or 1, and the test cannot err.

A look whose test cannot attain its share spends nothing, and its share passes on. Futility is
non-binding (the levels ignore it, so a stop only lowers the error): at an interim look a claim
stops only when neither direction's p is below the bound, so the seeds at hand lean neither way
and a stop never hides a contrary result. The opposite of a claim with m parts (any part
contradicted, a union) is tested at alpha / m per part (Bonferroni; an equivalence's two outer
sides count as two parts). Claims form a fixed sequence (Glimm, Maurer and Bretz 2010).

The family's alpha is shared between the two directions (`family`), so that the chance of any
wrong verdict in the sequence is at most alpha whatever the dependence between the claims, in
both readings of "wrong" (`worst`): a false claim reproduced or a true one contradicted; and,
reading "contradicted" as "the opposite effect", also a claim at its null boundary (no effect)
contradicted. A wrong verdict needs a true claim i contradicted before the sequence stops (at
most its contrary's error c_i) or the first claim j that is not true decided wrongly (at most
its reproduction error a_j, and c_j where it sits at its boundary), so the family errs with
chance at most a_j + sum_{i<=j} c_i. Each claim's contrary gets a tenth of alpha (alpha / (2m)
in a family of m > 5 claims: the contraries never take more than half of it), or the least
with which it can reject at all where that is more (`min_attainable_alpha`), and each claim is
reproduced at a_j = alpha - sum_{i<=j} c_i. Where a contrary would leave its own claim unable to
reject, it gets nothing: that claim cannot be contradicted with these seeds, and the dry run and
the findings say so. An equivalence's contrary ("beyond a margin") is one exact test of both
sides (`outside`), not two halves.
docs/claims.md states the standard; `operating` computes a design's exact rates.
"""

from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.stats import binom, norm

from .stats import ALPHA, Test, flip_tails, outside_level, outside_table

FINAL = ("reproduced", "contradicted", "futile", "inconclusive")  # how a claim can end
SLACK = 1e-9  # relative: a p equal to a level in exact arithmetic is at the level in floats
REPS = 4000  # draws behind a sign-flip design's rates


def spent(t: float, alpha: float = ALPHA) -> float:
    """The error the O'Brien-Fleming-type Lan-DeMets function allows by fraction t (all of
    alpha at t = 1)."""
    return alpha if t >= 1 else float(2 * norm.sf(norm.isf(alpha / 2) / np.sqrt(t)))


@dataclass(frozen=True)
class Look:
    """One look of one direction's boundary: its seeds n, its level (reject when p is at most
    it; 0: this look cannot reject), the rule in words and the error spent by this look and
    the ones before it (exact for the sign test, an upper bound for sign-flip)."""

    n: int
    level: float
    rule: str
    error: float

    @property
    def can_reject(self) -> bool:
        return self.level > 0


def _sign(looks: tuple[int, ...], alpha: float) -> tuple[Look, ...]:
    """Count boundaries by walking the exact null: at each look the smallest count whose tail,
    among the walks no earlier look rejected, fits what alpha(t) leaves."""
    out: list[Look] = []
    mass, used, before = np.ones(1), 0.0, 0
    for n in looks:
        mass = np.convolve(mass, binom.pmf(np.arange(n - before + 1), n - before, 0.5))
        before = n
        tails = np.cumsum(mass[::-1])[::-1]  # P(count >= c and not rejected before), c = 0..n
        fits = np.flatnonzero(tails <= spent(n / looks[-1], alpha) - used + SLACK * alpha)
        c = int(fits[0]) if fits.size else n + 1
        if c <= n:
            used += float(tails[c])
            mass[c:] = 0.0
        level = float(binom.sf(c - 1, n, 0.5)) if c <= n else 0.0
        out.append(Look(n, level, f"{c} of {n}" if c <= n else "none", used))
    return tuple(out)


def _flip(looks: tuple[int, ...], alpha: float) -> tuple[Look, ...]:
    """p <= k / 2^n, with k the most that what alpha(t) leaves allows (a union bound)."""
    out: list[Look] = []
    used = 0.0
    for n in looks:
        k = int(np.floor((spent(n / looks[-1], alpha) - used) * 2 ** n * (1 + SLACK)))
        used += k / 2 ** n
        out.append(Look(n, k / 2 ** n, f"p ≤ {k}/{2 ** n}" if k else "none", used))
    return tuple(out)


def _fixed(looks: tuple[int, ...], alpha: float) -> tuple[Look, ...]:
    """A value fixed by the config: p is 0 (it satisfies the claim) or 1, at any look."""
    return tuple(Look(n, spent(n / looks[-1], alpha), "the configured value", 0.0)
                 for n in looks)


@cache
def design(looks: tuple[int, ...], test: Test = "sign", exact: bool = False,
           alpha: float = ALPHA) -> tuple[Look, ...]:
    """Each look's boundary for one direction of a claim (seeds per look, increasing): see the
    module doc."""
    return (_fixed if exact else _sign if test == "sign" else _flip)(looks, alpha)


def _outside(looks: tuple[int, ...], alpha: float) -> tuple[Look, ...]:
    """An equivalence's contrary, "beyond a margin" (`stats.outside`): at its last look only,
    at the largest attainable p within alpha (its worst case over the whole region where the
    claim holds); earlier looks cannot contradict it."""
    n = looks[-1]
    level, rule = outside_level(n, alpha)
    none = [Look(k, 0.0, "none", 0.0) for k in looks[:-1]]
    return (*none, Look(n, level, rule, level))


@cache
def opposite_boundaries(looks: tuple[int, ...], test: Test, exact: bool, parts: int,
                        alpha: float = ALPHA, equivalent: bool = False) -> tuple[Look, ...]:
    """The boundaries of a claim's opposite direction at `alpha` (its share of the family's,
    `family`), tested in each of `parts` parts at alpha / parts (Bonferroni); an equivalence's
    by `_outside`."""
    if equivalent and not exact:
        return _outside(looks, alpha / max(parts, 1))
    return design(looks, test, exact, alpha / max(parts, 1))


@dataclass(frozen=True)
class Contrary:
    """What a claim's opposite direction is, for its share of the family's alpha: its test,
    whether the config fixes its metric, its parts and whether it is an equivalence."""

    test: Test
    exact: bool = False
    parts: int = 1
    equivalent: bool = False


@dataclass(frozen=True)
class Budget:
    """A claim's share of the family's alpha: `claim`, the alpha its reproduction spends over
    its looks; `contrary`, the alpha its opposite direction may spend (over its parts)."""

    claim: float
    contrary: float


def min_attainable_alpha(c: Contrary, n: int) -> float:
    """The smallest alpha at which a contrary with n seeds can reject at all: 2^-n per part
    (an equivalence's: its most extreme outcome's p per part); 0 for a metric the config fixes."""
    if c.exact:
        return 0.0
    return c.parts * (float(np.nanmin(outside_table(n))) if c.equivalent else 2.0 ** -n)


def family(claims: list[Contrary], looks: tuple[int, ...], alpha: float = ALPHA
           ) -> list[Budget]:
    """Each claim's budget in a fixed sequence (module doc): its contrary at alpha / 10 (alpha /
    (2m) for m > 5 claims), or `min_attainable_alpha` where more, or 0 where that would leave
    the claim unable to reject; the claim at alpha less the error every contrary up to its own
    can spend (exact for the sign test; the sum of the levels for sign-flip)."""
    out, spent = [], 0.0
    for c in claims:
        share = min(max(alpha / (2 * max(len(claims), 5)), min_attainable_alpha(c, looks[-1])),
                    alpha - spent)
        opposite = opposite_boundaries(looks, c.test, c.exact, c.parts, share, c.equivalent)
        error = min(share, opposite[-1].error * c.parts)
        room = alpha - spent - error
        if not any(look.can_reject for look in opposite) or room <= 0 or not design(
                looks, c.test, c.exact, room)[-1].can_reject:
            share, error = 0.0, 0.0  # the claim first: it cannot be contradicted
        spent += error
        out.append(Budget(alpha - spent, share))
    return out


@dataclass(frozen=True)
class Worst:
    """A family's chance of any wrong verdict at its worst over every dependence between the
    claims: `defined`, a false claim reproduced or a true one contradicted (docs/claims.md);
    `directional`, reading contradicted as "the opposite effect", so that a claim at its null
    boundary is wrong either way."""

    defined: float
    directional: float


def worst(budgets: list[Budget], claims: list[Contrary], looks: tuple[int, ...]) -> Worst:
    """The family's worst case both ways (`Worst`): max over j of claim j's reproduction error
    plus the contraries before it (directional: and its own), and every claim true (every
    contrary's)."""
    errors = [(design(looks, c.test, c.exact, b.claim)[-1].error,
               opposite_boundaries(looks, c.test, c.exact, c.parts, b.contrary,
                                   c.equivalent)[-1].error * c.parts)
              for b, c in zip(budgets, claims, strict=True)]
    before = np.cumsum([0.0, *(e[1] for e in errors)])
    return Worst(float(max(*(e[0] + before[j] for j, e in enumerate(errors)), before[-1])),
                 float(max(*(e[0] + before[j + 1] for j, e in enumerate(errors)), before[-1])))


def judge(p: np.ndarray, p_opposite: np.ndarray, look: Look, opposite: Look, last: bool,
          futility: float | None) -> np.ndarray:
    """A claim's state at one look from its parts' p's (parts, ...), for every case at once:
    contradicted (a part's opposite p at most its level), reproduced (every part's p at most
    its level), inconclusive (neither, at the last look), futile (neither direction's p below
    `futility`, at an interim look) or undecided (the next look decides)."""
    p, q = np.asarray(p, dtype=float), np.asarray(p_opposite, dtype=float)
    contradicted = (q <= opposite.level * (1 + SLACK)).any(axis=0)
    reproduced = (p <= look.level * (1 + SLACK)).all(axis=0)
    futile = np.zeros(contradicted.shape, bool) if futility is None else (
        (p.max(axis=0) >= futility) & (q.min(axis=0) >= futility))
    return np.select([contradicted, reproduced, np.full(contradicted.shape, last), futile],
                     ["contradicted", "reproduced", "inconclusive", "futile"], "undecided")


@dataclass(frozen=True)
class Operating:
    """A design's rates at q, the chance that a seed lands on the claimed side: how each claim
    ends (`FINAL`), the share of cases decided at each look, and the chance it is reproduced
    at each look."""

    ends: dict[str, float]
    decided: tuple[float, ...]
    reproduced: tuple[float, ...]


@dataclass(frozen=True)
class Reached:
    """How `operating` meets a claim: at which look the sequence reaches it (it is judged from
    that look on), and whether a sign-flip claim's seeds are values of +-1 walked by their
    counts (whose sign-flip p is the sign test's) rather than normal draws."""

    look: int = 0
    counts: bool = False


def operating(looks: tuple[int, ...], c: Contrary, q: float, futility: float | None,
              budget: Budget | None = None, reached: Reached = Reached()) -> Operating:
    """The design's rates at its `budget` (default: a family of one, `family`), parts
    independent and each at q, the claim judged from look `reached.look` on. By counts (the sign
    test; sign-flip with `reached.counts`): exact, by walking the counts of every part through
    `judge` (seeds never tie; an equivalence has every seed off the claimed side beyond one
    margin). Otherwise (sign-flip): REPS draws (seeded) of normal per-seed values whose chance
    of the claimed side is q, through the exact test (`flip_tails`, counted without walking the
    2^n sign patterns) and `judge`."""
    budget = budget or family([c], looks)[0]
    test, parts = c.test, c.parts
    walk = test == "sign" or reached.counts
    claim = design(looks, test, False, budget.claim)
    opposite = opposite_boundaries(looks, test, False, parts, budget.contrary, c.equivalent)
    ends, at, won = dict.fromkeys(FINAL, 0.0), [], []
    if walk:
        mass, before = np.ones((1,) * parts), 0
    else:
        x = np.random.default_rng(0).normal(norm.ppf(q), 1.0, (parts, REPS, looks[-1]))
        mass = np.full(REPS, 1.0 / REPS)
    for k, n in enumerate(looks):
        if walk:
            step = binom.pmf(np.arange(n - before + 1), n - before, q)
            for axis in range(parts):
                mass = np.apply_along_axis(np.convolve, axis, mass, step)
            before, hits = n, np.indices(mass.shape)
            p = binom.sf(hits - 1, n, 0.5)
            p_opp = outside_table(n)[n - hits, 0] if c.equivalent else binom.sf(n - hits - 1, n,
                                                                                 0.5)
        else:
            p, p_opp = flip_tails(x[..., :n])
        state = (judge(p, p_opp, claim[k], opposite[k], k == len(looks) - 1, futility)
                 if k >= reached.look else np.full(mass.shape, "undecided"))
        at.append(float(mass[state != "undecided"].sum()))
        won.append(float(mass[state == "reproduced"].sum()))
        for end in FINAL:
            ends[end] += float(mass[state == end].sum())
        mass = np.where(state == "undecided", mass, 0.0)
    return Operating(ends, tuple(at), tuple(won))


def p_all_reproduced(looks: tuple[int, ...], claims: list[Contrary], budgets: list[Budget],
                     q: list[float], futility: float | None) -> float:
    """The chance that every claim of the sequence comes out reproduced, exactly over count
    paths (`operating` by counts: each claim's seeds land on its claimed side independently
    with its chance q[j], values +-1), the claims independent and each judged from the look at
    which the sequence reaches it (a claim decided at look k passes the next one look k); a
    claim whose values cannot vary by seed (`Contrary.exact`) is taken where it holds."""
    reach = {0: 1.0}
    for c, b, qj in zip(claims, budgets, q, strict=True):
        if c.exact:  # no seed noise (a configured value, a measured cost): it passes the look
            continue
        after: dict[int, float] = {}
        for k0, chance in reach.items():
            won = operating(looks, c, qj, futility, b, Reached(k0, counts=True)).reproduced
            for k, r in enumerate(won):
                after[k] = after.get(k, 0.0) + chance * r
        reach = after
    return float(sum(reach.values()))
