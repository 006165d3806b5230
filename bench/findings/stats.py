"""Paired statistics for tables and claims: seed k of one row against seed k of another.

Seed k gives every variant the same data order and initial weights (`bench.model.pairing`), so
the per-seed differences d_k = row_k - baseline_k remove the seed's own luck from the
comparison. Every estimate is the mean of per-seed values (differences, slopes or the metric
itself) tested against a margin by one of two tests (docs/claims.md):

- `t`: a one-sample t-test (a paired t-test on differences); it assumes the per-seed values are
  near normal, which a few skewed values (a seed that half-learns a probe) cannot carry;
- `sign-flip`: the exact paired randomization test (scipy's `permutation_test`, `samples`
  permutation type): under the null the per-seed values are symmetric about the margin (two
  rows that differ by no more than the margin are exchangeable within a seed), so each of the
  2^n sign patterns is equally likely, whatever the values' skew. Its smallest p is 2^-n.

Each test reports the interval that matches it (a one-sided bound at its level for a one-sided
test, the 1 - 2 level interval for TOST; inverted from the test for sign-flip), the p-value of
the opposite direction, and, from statsmodels' power analysis, the smallest effect the seeds
could detect and the seeds that would detect the observed one (at an upper confidence bound of
the seeds' std where asked). p-values of a family are Holm-corrected, which scipy does not
provide (its `false_discovery_control` controls the false discovery rate, not the family-wise
error).
"""

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.stats import chi2, norm, permutation_test, ttest_1samp
from statsmodels.stats.power import TTestPower

ALPHA = 0.05  # family-wise error rate of a table's or a grid's tests
LEVEL = 0.95  # confidence level of two-sided intervals (the tables' paired tests)
POWER = 0.8  # what "could have detected" means
MAX_SEEDS = 10_000  # more would not detect it: reported as None
Expect = Literal["less", "greater", "two-sided", "equivalent"]
Test = Literal["t", "sign-flip"]
SD_LEVEL = 0.95  # the upper confidence bound of a std that "seeds needed" assumes


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


def _t(d: np.ndarray, margin: float, alternative: str) -> float:
    return float(ttest_1samp(d, margin, alternative=alternative).pvalue)


def _flip(d: np.ndarray, margin: float, alternative: str) -> float:
    """Exact sign-flip p of mean(d) against `margin` (every one of the 2^n sign patterns of
    d - margin; scipy's paired permutation test of d - margin against 0)."""
    res = permutation_test((d - margin,), np.mean, permutation_type="samples", n_resamples=np.inf,
                           alternative=alternative)
    return float(res.pvalue)


def _bound(d: np.ndarray, alternative: str, alpha: float, test: Test) -> float:
    """The one-sided confidence bound that matches a one-sided test at level alpha: for `less`
    the largest margin m it cannot reject mean >= m at (an upper bound; `greater`: the lowest);
    +-inf where even the most extreme sign pattern cannot reject (2^-n > alpha)."""
    sign = 1.0 if alternative == "less" else -1.0
    if test == "t":
        ci = ttest_1samp(d, 0.0, alternative=alternative).confidence_interval(1 - alpha)
        return float(ci.high if alternative == "less" else ci.low)
    if len(d) < min_seeds(alpha):
        return sign * np.inf
    spread = np.ptp(d) + np.abs(d).max() + 1e-12
    lo, hi = d.min() - spread, d.max() + spread  # rejects at hi, not at lo (for less)
    if alternative == "greater":
        lo, hi = hi, lo
    return float(brentq(lambda m: _flip(d, m, alternative) - alpha - 1e-12, lo, hi, xtol=1e-10))


def p_values(d: np.ndarray, expect: Expect, margin: float, test: Test) -> tuple[float, float]:
    """(p, p_opposite) of per-seed values d (at least 2, not all tied) against `margin`: see
    `estimate`."""
    p_of = _t if test == "t" else _flip
    with warnings.catch_warnings():  # nearly identical values: scipy warns of precision loss
        warnings.simplefilter("ignore", RuntimeWarning)
        if expect == "equivalent":
            return (max(p_of(d, -margin, "greater"), p_of(d, margin, "less")),
                    min(1.0, 2 * min(p_of(d, margin, "greater"), p_of(d, -margin, "less"))))
        if expect == "two-sided":
            return min(1.0, 2 * min(p_of(d, margin, "less"), p_of(d, margin, "greater"))), \
                float("nan")
        opposite = "greater" if expect == "less" else "less"
        return p_of(d, margin, expect), p_of(d, margin, opposite)


def estimate(values: np.ndarray | pd.Series, expect: Expect = "two-sided",
             margin: float = 0.0, exact: bool = False, test: Test = "t",
             alpha: float = ALPHA) -> Estimate:
    """Mean, interval and p of per-seed values against `margin`, by `test` at level `alpha`.

    less / greater: one-sided test of mean < margin / mean > margin, with the one-sided bound at
    alpha; two-sided: mean != margin (p twice the smaller one-sided p), the 1 - alpha interval
    for `t` (none for sign-flip); equivalent: TOST, p = the larger of the one-sided tests of
    mean > -margin and mean < margin, with the 1 - 2 alpha interval (inside +-margin exactly
    when TOST rejects at alpha), and p_opposite of "outside the margin" twice the smaller of
    the two one-sided p's beyond it (a union of two tests, Bonferroni). `exact`: values that
    cannot vary by seed (a parameter count): when they tie, p is 0 where they satisfy the
    expectation and 1 where not.
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
    p, p_opp = p_values(d, expect, margin, test)
    with warnings.catch_warnings():  # nearly identical values: scipy warns of precision loss
        warnings.simplefilter("ignore", RuntimeWarning)
        if expect == "equivalent":
            low, high = _bound(d, "greater", alpha, test), _bound(d, "less", alpha, test)
        elif expect == "two-sided":
            low, high = ttest_1samp(d, 0.0).confidence_interval(1 - alpha) if test == "t" \
                else (nan, nan)
        else:
            bound = _bound(d, expect, alpha, test)
            low, high = (-np.inf, bound) if expect == "less" else (bound, np.inf)
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


def sd_upper(sd: float, n: int, level: float = SD_LEVEL) -> float:
    """The one-sided `level` upper confidence bound of a std estimated from n values (chi-square
    with n - 1 df): at n = 3 the true std may be up to 4.4 times the observed one."""
    return float(sd * np.sqrt((n - 1) / chi2.ppf(1 - level, n - 1)))


def detectable(est: Estimate, expect: Expect, margin: float, alpha: float,
               sd: float | None = None) -> Detectable:
    """statsmodels' power analysis of a one-sided t-test at `alpha`, at the std `sd` (default:
    the seeds' own; pass `sd_upper` for a bound a reader can plan with). For a sign-flip test
    the t-test's power is its large-sample approximation, and no fewer seeds than
    `min_seeds(alpha)` can reject at all: the seeds needed are at least that."""
    sd = est.sd if sd is None else sd
    power = TTestPower()
    d = power.solve_power(nobs=est.n, alpha=alpha, power=POWER, alternative="larger")
    if expect == "equivalent":
        effect, room = abs(est.effect) + d * sd, margin - abs(est.effect)
    else:
        effect = d * sd
        room = margin - est.effect if expect == "less" else est.effect - margin
    if not room > 0:
        return Detectable(float(effect), None)
    seeds = np.arange(2, MAX_SEEDS + 1)
    reach = power.power(effect_size=room / sd, nobs=seeds, alpha=alpha, alternative="larger")
    enough = np.flatnonzero(reach >= POWER)
    return Detectable(float(effect), int(seeds[enough[0]]) if enough.size else None)


def min_seeds(alpha: float) -> int:
    """The fewest paired seeds with which an exact sign-flip test can reject at alpha (2^-n <=
    alpha): 5 at 0.05, 8 at 0.005."""
    return int(np.ceil(np.log2(1 / alpha) - 1e-12))


def replication(p: float, alpha: float, n: int, test: Test) -> float:
    """The probability that a fresh set of n seeds decides the same way at level alpha, given
    the observed one-sided p (the predictive probability under a flat prior on the effect:
    Phi((z_p - z_alpha) / sqrt 2); Goodman 1992, Senn 2002). 0 where the test cannot reject at
    n (a sign-flip test with 2^-n > alpha)."""
    if test == "sign-flip" and n < min_seeds(alpha) or not np.isfinite(p):
        return 0.0
    z_p = norm.isf(min(max(p, 1e-300), 1 - 1e-16))
    return float(norm.cdf((z_p - norm.isf(alpha)) / np.sqrt(2)))


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
