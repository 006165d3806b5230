"""What a design needs, said by the dry run: for each claim whose power is under `TARGET` at a
chance q that a seed lands on its claimed side, the grid's looks stretched to more seeds (the
same proportions, the family's alpha shared as `feasible.family` shares it) until that power
reaches `TARGET`, with the time those seeds take here (`bench.sweep.estimate`).

The sign test's power is exact. A sign-flip claim's is counted from REPS normal draws, as the
dry run's rates are, up to FLIP_DRAWN seeds, and beyond that with values of +-1 by their counts
(exact and fast; its p is then the sign test's, so it usually asks for more seeds than normal
values would need): each row says which.
"""

from typing import Any

import pandas as pd

from bench.experiment.claims import Claim
from bench.experiment.grid import Looks
from bench.findings.statistics import sequential
from bench.sweep import feasible

TARGET = 0.8
FLIP_DRAWN = 18  # the most seeds a sign-flip design's power is drawn at (2^(n/2) per draw)
MOST = 64  # the most seeds proposed


def stretched(looks: tuple[int, ...], n: int) -> tuple[int, ...]:
    """`looks` stretched to end at n seeds in the same proportions, rising by at least one."""
    out: list[int] = []
    for k in looks:
        out.append(max(round(k * n / looks[-1]), out[-1] + 1 if out else 1))
    return tuple(out)


def power(looks: tuple[int, ...], c: sequential.Contrary, b: sequential.Budget, q: float,
          futility: float | None) -> tuple[float, str]:
    """A claim's power to come out reproduced at q with these looks and budget, and its basis."""
    counts = c.test == "sign" or looks[-1] > FLIP_DRAWN
    basis = "exact" if c.test == "sign" else ("values +-1" if counts else "normal draws")
    reached = sequential.Reached(counts=counts)
    return sequential.operating(looks, c, q, futility, b, reached).ends["reproduced"], basis


def needed(claims: list[Claim], axes: dict[str, list[Any]], looks: tuple[int, ...],
           futility: float | None, rates: pd.DataFrame, power_at: tuple[float, ...]
           ) -> list[dict]:
    """Per claim and q of `power_at` where `rates` (`feasible.rates` of these looks) shows
    power under TARGET: the fewest looks (stretched) that reach it, their power and basis;
    looks None where MOST seeds do not."""
    want = [(i, q) for i, row in rates.reset_index(drop=True).iterrows() for q in power_at
            if row.get(f"power q {q:g}", 1.0) < TARGET]
    found: dict[tuple[int, float], dict] = {}
    for n in range(looks[-1] + 1, MOST + 1):
        todo = [w for w in want if w not in found]
        if not todo:
            break
        plan = stretched(looks, n)
        contraries, budgets = feasible.family(claims, axes, Looks(looks=list(plan),
                                                                  futility=futility))
        for i, q in todo:
            p, basis = power(plan, contraries[i], budgets[i], q, futility)
            if p >= TARGET:
                found[i, q] = {"looks": plan, "power": p, "basis": basis}
    return [{"claim": claims[i].id, "q": q, "now": rates.iloc[i][f"power q {q:g}"],
             **found.get((i, q), {"looks": None, "power": None, "basis": None})}
            for i, q in want]
