"""Group-sequential looks: seeds added in stages, each claim tested at every look at a level of
its own, so that stopping early (or adding seeds only where a claim is undecided) keeps the
error rate.

At look k of K a claim has seen n_k of its planned n_K seeds, the information fraction
t_k = n_k / n_K. The Lan-DeMets spending function of O'Brien-Fleming type allows

    alpha(t) = 2 (1 - Phi(z_{1 - alpha / 2} / sqrt(t)))          (alpha(1) = alpha)

of the one-sided alpha to be spent by t, very little at early looks. Look k tests at the level
a_k = alpha(t_k) - (what the earlier looks spent): a look whose smallest attainable p exceeds
its level (an exact test with few seeds) can reject nothing, spends nothing and can only stop
for futility, so its share passes to the next look. The levels sum to at most alpha, and the
chance that any look rejects a true null is at most the sum of the chances that each does
(Bonferroni over the looks): the error rate holds for any test, exact and discrete ones
included, whatever the dependence between looks, and for a family of tests Holm-corrected at
a_k within each look. The nominal normal-theory boundaries would give slightly higher levels,
but their guarantee needs a continuous, normal test statistic, which a sign test on 8 seeds is
not. Claims form a fixed sequence, each with these levels at whichever look it is reached
(Glimm, Maurer and Bretz 2010). Futility stopping is non-binding: the levels ignore it, so
stopping for futility only lowers the error rate. docs/claims.md states the standard.
"""

from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.stats import norm

from .stats import ALPHA, floor


def spent(t: float, alpha: float = ALPHA) -> float:
    """The one-sided alpha the O'Brien-Fleming-type Lan-DeMets function allows by fraction t
    (all of it at t = 1)."""
    return alpha if t >= 1 else float(2 * norm.sf(norm.isf(alpha / 2) / np.sqrt(t)))


@dataclass(frozen=True)
class Look:
    """One look of a claim's design: its seeds n, the smallest p its test can reach there
    (`floor`), its level, and whether it can reject at all (else: futility only)."""

    n: int
    floor: float
    level: float

    @property
    def can_reject(self) -> bool:
        return self.floor <= self.level


@cache
def design(looks: tuple[int, ...], exact: bool = False, alpha: float = ALPHA
           ) -> tuple[Look, ...]:
    """Each look's level (seeds per look, increasing; `exact`: a metric fixed by the config,
    whose test reaches p = 0): alpha(t_k) less what the earlier looks that can reject spent."""
    out: list[Look] = []
    used = 0.0
    for n in looks:
        look = Look(n, floor(n, exact), spent(n / looks[-1], alpha) - used)
        used += look.level if look.can_reject else 0.0
        out.append(look)
    return tuple(out)


def levels(looks: tuple[int, ...], exact: bool = False) -> tuple[float, ...]:
    """The nominal one-sided level of each look (`design`)."""
    return tuple(look.level for look in design(looks, exact))
