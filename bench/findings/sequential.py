"""Group-sequential looks: seeds added in stages, each claim tested at every look against its
own alpha-spending boundary, so that stopping early (or adding seeds only where a claim is
undecided) keeps the error rate.

At look k of K a claim has seen n_k of its planned n_K seeds, the information fraction
t_k = n_k / n_K. The Lan-DeMets spending function of O'Brien-Fleming type spends

    alpha(t) = 2 (1 - Phi(z_{1 - alpha / 2} / sqrt(t)))          (alpha(1) = alpha)

of the one-sided alpha by t, very little at early looks. The boundary c_k on the z scale solves
P(Z_1 < c_1, ..., Z_{k-1} < c_{k-1}, Z_k >= c_k) = alpha(t_k) - alpha(t_{k-1}) for the
canonical joint normal of the looks' statistics (corr(Z_i, Z_j) = sqrt(t_i / t_j), i < j),
computed with scipy's multivariate normal; a test at look k rejects when its p is at most the
nominal level 1 - Phi(c_k). Claims form a fixed sequence, each at the full alpha with its own
boundaries (Glimm, Maurer and Bretz 2010: hierarchical endpoints in group-sequential trials).
Futility stopping is non-binding: the boundaries ignore it, so stopping for futility only lowers
the error rate. docs/claims.md states the standard.
"""

from functools import cache

import numpy as np
from scipy.optimize import brentq
from scipy.stats import multivariate_normal, norm

from .stats import ALPHA


def spent(t: float, alpha: float = ALPHA) -> float:
    """The one-sided alpha the O'Brien-Fleming-type Lan-DeMets function spends by fraction t
    (all of it at t = 1)."""
    return alpha if t >= 1 else float(2 * norm.sf(norm.isf(alpha / 2) / np.sqrt(t)))


def _mvn(cov: np.ndarray):
    """The standard normal with correlation `cov`, its cdf to 1e-7, seeded: scipy integrates 3
    or more dimensions by randomised quasi-Monte Carlo, and a boundary must be the same in
    every process."""
    return multivariate_normal(cov=cov, abseps=1e-7, releps=0, seed=0)


@cache
def boundaries(looks: tuple[int, ...], alpha: float = ALPHA) -> tuple[float, ...]:
    """Nominal one-sided levels of a claim's test at each look (seeds per look, increasing):
    one look is the plain alpha."""
    if len(looks) == 1:
        return (alpha,)
    t = np.asarray(looks, dtype=float) / looks[-1]
    corr = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
    z: list[float] = []
    for k in range(len(t)):
        step = spent(t[k], alpha) - (spent(t[k - 1], alpha) if k else 0.0)
        if not z:
            z.append(float(norm.isf(step)))
            continue
        stay = float(_mvn(corr[:k, :k]).cdf(z) if k > 1 else norm.cdf(z[0]))
        joint = _mvn(corr[: k + 1, : k + 1])

        def crossing(c: float, stay: float = stay, joint=joint, step: float = step) -> float:
            return stay - float(joint.cdf([*z, c])) - step

        z.append(float(brentq(crossing, 0.0, 12.0, xtol=1e-6)))
    return tuple(float(norm.sf(c)) for c in z)
