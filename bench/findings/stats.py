"""Paired statistics for tables and claims: seed k of one row against seed k of another.

Seed k gives every variant the same data order and initial weights (`bench.model.pairing`), so
the per-seed differences d_k = row_k - baseline_k remove the seed's own luck from the
comparison. Every estimate is the mean of per-seed values (differences, slopes or the metric
itself) with a one-sample t-test on them (a paired t-test when they are differences), the
interval that matches the test (a one-sided 95% bound for a one-sided test, the 90% interval
for TOST, the 95% interval for a two-sided test), the p-value of the opposite direction, and,
from statsmodels' power analysis, the smallest effect the seeds could detect and the seeds that
would detect the observed one. p-values of a family are Holm-corrected, which scipy does not
provide (its `false_discovery_control` controls the false discovery rate, not the family-wise
error).
"""

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy.stats import ttest_1samp
from statsmodels.stats.power import TTestPower

ALPHA = 0.05  # family-wise error rate of a table's or a grid's tests
LEVEL = 0.95  # confidence level of two-sided intervals (the tables' paired tests)
POWER = 0.8  # what "could have detected" means
MAX_SEEDS = 10_000  # more would not detect it: reported as None
Expect = Literal["less", "greater", "two-sided", "equivalent"]


@dataclass(frozen=True)
class Estimate:
    """Mean of n per-seed values, the interval matching the test (ci_low / ci_high, -inf or inf
    on a one-sided bound's open side), the test's p, the opposite direction's p (`p_opposite`:
    greater for less, less for greater, outside the margin for an equivalence; NaN two-sided)
    and the seeds' std. Everything but n and effect is NaN when n < 2 or the seeds tie (no
    spread to test) unless the values are `exact`."""

    n: int
    effect: float
    ci_low: float
    ci_high: float
    p: float
    p_opposite: float
    sd: float


def holds(value: float, expect: Expect, margin: float) -> bool:
    """Whether a value satisfies the expectation exactly (the test's alternative)."""
    return {"less": value < margin, "greater": value > margin, "two-sided": value != margin,
            "equivalent": abs(value) < margin}[expect]


def estimate(values: np.ndarray | pd.Series, expect: Expect = "two-sided",
             margin: float = 0.0, exact: bool = False) -> Estimate:
    """Mean, interval and p of per-seed values against `margin`.

    less / greater: one-sided t-test of mean < margin / mean > margin, with the one-sided 95%
    bound; two-sided: mean != margin, the 95% interval; equivalent: TOST, p = the larger of the
    one-sided tests of mean > -margin and mean < margin, with the 90% interval (inside
    +-margin exactly when TOST rejects at 5%). `exact`: values that cannot vary by seed (a
    parameter count): when they tie, p is 0 where they satisfy the expectation and 1 where not.
    """
    d = np.asarray(values, dtype=float)
    d = d[np.isfinite(d)]
    n = len(d)
    nan = float("nan")
    mean = float(d.mean()) if n else nan
    if n < 2 or np.ptp(d) == 0:
        if n >= 2 and exact:
            ok = holds(mean, expect, margin)
            opposite = expect != "two-sided" and not ok and mean != margin
            return Estimate(n, mean, mean, mean, 0.0 if ok else 1.0,
                            0.0 if opposite else 1.0, 0.0)
        return Estimate(n, mean, nan, nan, nan, nan, float(d.std(ddof=1)) if n > 1 else nan)
    sd = float(d.std(ddof=1))
    with warnings.catch_warnings():  # nearly identical values: scipy warns of precision loss
        warnings.simplefilter("ignore", RuntimeWarning)
        if expect == "equivalent":
            low, high = ttest_1samp(d, 0.0).confidence_interval(1 - 2 * ALPHA)
            p = max(ttest_1samp(d, -margin, alternative="greater").pvalue,
                    ttest_1samp(d, margin, alternative="less").pvalue)
            p_opp = min(ttest_1samp(d, margin, alternative="greater").pvalue,
                        ttest_1samp(d, -margin, alternative="less").pvalue)
        elif expect == "two-sided":
            low, high = ttest_1samp(d, 0.0).confidence_interval(LEVEL)
            p, p_opp = ttest_1samp(d, margin).pvalue, nan
        else:
            opposite = "greater" if expect == "less" else "less"
            low, high = ttest_1samp(d, 0.0, alternative=expect).confidence_interval(1 - ALPHA)
            p = ttest_1samp(d, margin, alternative=expect).pvalue
            p_opp = ttest_1samp(d, margin, alternative=opposite).pvalue
    return Estimate(n, mean, float(low), float(high), float(p), float(p_opp), sd)


def paired(a: pd.Series, b: pd.Series, expect: Expect = "two-sided", margin: float = 0.0
           ) -> Estimate:
    """a - b paired by index (the seed): only seeds with a finite value on both sides count."""
    d = (a - b).dropna()
    return estimate(d.to_numpy(), expect, margin)


@dataclass(frozen=True)
class Detectable:
    """What an inconclusive test could see (one-sided t-test at `alpha`, power POWER):
    `effect`, the smallest distance beyond the margin in the claimed direction its seeds detect
    (for an equivalence: the narrowest margin they would establish were the true difference the
    observed one), and `seeds`, how many seeds would detect the observed effect (None where it
    is not in the claimed direction, lies outside an equivalence margin, or needs more than
    MAX_SEEDS)."""

    effect: float
    seeds: int | None


def detectable(est: Estimate, expect: Expect, margin: float, alpha: float) -> Detectable:
    """statsmodels' power analysis of the test `est` came from, at its seeds' std."""
    power = TTestPower()
    d = power.solve_power(nobs=est.n, alpha=alpha, power=POWER, alternative="larger")
    if expect == "equivalent":
        effect, room = abs(est.effect) + d * est.sd, margin - abs(est.effect)
    else:
        effect = d * est.sd
        room = margin - est.effect if expect == "less" else est.effect - margin
    if not room > 0:
        return Detectable(float(effect), None)
    seeds = np.arange(2, MAX_SEEDS + 1)
    reach = power.power(effect_size=room / est.sd, nobs=seeds, alpha=alpha, alternative="larger")
    enough = np.flatnonzero(reach >= POWER)
    return Detectable(float(effect), int(seeds[enough[0]]) if enough.size else None)


def holm(p: np.ndarray | pd.Series | list[float]) -> np.ndarray:
    """Holm-adjusted p-values (family-wise error control); NaN entries are not tests and stay
    NaN. adjusted p_(i) = max over j <= i of min(1, (m - j + 1) p_(j)), p sorted ascending."""
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    m = int(ok.sum())
    order = np.argsort(p[ok], kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate(p[ok][order] * (m - np.arange(m))))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    out[ok] = adjusted
    return out
