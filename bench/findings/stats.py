"""Paired statistics for tables and claims: seed k of one row against seed k of another.

Seed k gives every variant the same data order and initial weights (`bench.pairing`), so the
per-seed differences d_k = row_k - baseline_k remove the seed's own luck from the comparison.
Every estimate is the mean of per-seed values (differences, slopes or the metric itself) with a
t-based confidence interval and a one-sample t-test on them (a paired t-test when they are
differences); p-values of a family are Holm-corrected, which scipy does not provide (its
`false_discovery_control` controls the false discovery rate, not the family-wise error).
"""

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy.stats import ttest_1samp

ALPHA = 0.05  # family-wise error rate of a table's or a grid's tests
LEVEL = 0.95  # confidence level of the intervals
Expect = Literal["less", "greater", "two-sided", "equivalent"]


@dataclass(frozen=True)
class Estimate:
    """Mean of n per-seed values with its CI and the p-value of the test asked for; CI and p are
    NaN when n < 2."""

    n: int
    effect: float
    ci_low: float
    ci_high: float
    p: float


def holds(value: float, expect: Expect, margin: float) -> bool:
    """Whether a value satisfies the expectation exactly (the test's alternative)."""
    return {"less": value < margin, "greater": value > margin, "two-sided": value != margin,
            "equivalent": abs(value) < margin}[expect]


def estimate(values: np.ndarray | pd.Series, expect: Expect = "two-sided",
             margin: float = 0.0, level: float = LEVEL) -> Estimate:
    """Mean, CI and p of per-seed values against `margin`.

    less / greater: one-sided t-test of mean < margin / mean > margin; two-sided: mean != margin;
    equivalent: TOST, p = the larger of the two one-sided tests of mean > -margin and
    mean < margin. Values identical in every seed (a FLOP count, say) are exact: CI of zero
    width, p 0 when they satisfy the expectation and 1 when not.
    """
    d = np.asarray(values, dtype=float)
    d = d[np.isfinite(d)]
    n = len(d)
    if n < 2:
        return Estimate(n, float(d.mean()) if n else np.nan, np.nan, np.nan, np.nan)
    mean = float(d.mean())
    if np.ptp(d) == 0:
        return Estimate(n, mean, mean, mean, 0.0 if holds(mean, expect, margin) else 1.0)
    with warnings.catch_warnings():  # nearly identical values: scipy warns of precision loss
        warnings.simplefilter("ignore", RuntimeWarning)
        ci = ttest_1samp(d, 0.0).confidence_interval(level)
        if expect == "equivalent":
            p = max(ttest_1samp(d, -margin, alternative="greater").pvalue,
                    ttest_1samp(d, margin, alternative="less").pvalue)
        else:
            p = ttest_1samp(d, margin, alternative=expect).pvalue
    return Estimate(n, mean, float(ci.low), float(ci.high), float(p))


def paired(a: pd.Series, b: pd.Series, expect: Expect = "two-sided", margin: float = 0.0
           ) -> Estimate:
    """a - b paired by index (the seed): only seeds with a finite value on both sides count."""
    d = (a - b).dropna()
    return estimate(d.to_numpy(), expect, margin)


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

