"""What a decided claim says about a fresh run of its grid: `same_again`, the predictive chance
that a new run of the same design (its looks, futility bound and tests) ends the same way.

Per part, the chance q that a seed lands on the claimed side of the margin gets the Jeffreys
posterior from the seeds at hand: Beta(on the claimed side + 1/2, on the other + 1/2), or for an
equivalence a Dirichlet over inside, below and above the margins; seeds exactly at a margin are
kept as ties where there were some. A sign test sees only the sides, so each draw stands for a
side by a value on it; a sign-flip test also sees magnitudes, so each draw takes one of the
seeds' own distances from 0 and a side drawn at q. Every draw runs through the tests
(`stats.p_values`) and `sequential.judge` look by look, so futility stops count. Parts are
drawn independently (the seeds they share are ignored). Unlike resampling the seeds, it is
below 1 when every seed agrees: 8 of 8 seeds on the claimed side leave q uncertain, and a fresh
run of a sign test at looks 4, 8 reproduces with chance 0.89.
"""

import zlib

import numpy as np

from bench.experiment.claims import EXACT, Claim

from . import sequential, stats

DRAWS = 2000


def _sides(d: np.ndarray, expect: str, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """(stand-in values, counts) of the sides a sign test sees: claimed, opposite and tie for
    less / greater; inside, below and above for an equivalence."""
    if expect == "equivalent":
        sides = np.array([0.0, -2 * margin, 2 * margin])
        counts = [np.sum(np.abs(d) < margin), np.sum(d <= -margin), np.sum(d >= margin)]
    else:
        step = -1.0 if expect == "less" else 1.0
        sides = margin + np.array([step, -step, 0.0])
        counts = [np.sum(stats.holds(d, expect, margin)), np.sum((d - margin) * step < 0),
                  np.sum(d == margin)]
    return sides, np.asarray(counts, dtype=float)


def _draw(d: np.ndarray, expect: str, margin: float, test: str, n: int,
          rng: np.random.Generator) -> np.ndarray:
    """DRAWS fresh runs of n seeds of one part (DRAWS, n), from the posterior of its q."""
    sides, counts = _sides(d, expect, margin)
    keep = (counts > 0) | (np.arange(len(counts)) < (2 if expect != "equivalent" else 3))
    prob = rng.dirichlet(counts[keep] + 0.5, DRAWS)  # (DRAWS, sides)
    below = np.cumsum(prob, axis=1)[:, None, :-1]  # (DRAWS, 1, sides - 1)
    pick = (rng.random((DRAWS, n, 1)) > below).sum(-1)  # (DRAWS, n): each seed's side
    if test == "sign":
        return sides[keep][pick]
    size = rng.choice(np.abs(d - margin), (DRAWS, n))
    return margin + (sides[keep][pick] - margin) * size  # a seed's own distance, on its side


def same_again(c: Claim, values: list[np.ndarray], margin: float, plan: tuple[int, ...],
               futility: float | None, ended: str) -> float:
    """The predictive chance that a fresh run of the design (`plan`'s looks, `futility`) ends
    as `ended` (one of `sequential.FINAL`), from each part's per-seed values (seeded by the
    claim's id)."""
    if c.metric in EXACT:
        return 1.0  # a value fixed by the config comes out the same every time
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))
    runs = np.stack([_draw(np.asarray(d, float), c.expect, margin, c.test, plan[-1], rng)
                     for d in values])  # (parts, DRAWS, n)
    claim = sequential.design(plan, c.test)
    opposite = sequential.against(plan, c.test, False, len(values) * c.sides)
    end = np.full(DRAWS, "undecided", dtype=object)
    for k, n in enumerate(plan):
        p, p_opp = stats.p_values(runs[..., :n], c.expect, margin, c.test)
        state = sequential.judge(p, p_opp, claim[k], opposite[k], k == len(plan) - 1, futility)
        end = np.where(end == "undecided", state, end)
    return float(np.mean(end == ended))
