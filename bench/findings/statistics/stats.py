"""Paired statistics for tables and claims: seed k of one row against seed k of another.

Seed k gives every variant the same data order and initial weights (`bench.model.pairing`), so
the per-seed values (differences d_k = row_k - baseline_k, slopes, or the metric itself) remove
the seed's own luck from the comparison. A claim's per-seed values are tested against its
margin by one of two exact tests, each valid at every n for the hypothesis it states
(docs/claims.md, "Statistics"):

- `sign-flip` (about an effect; its statistic is the mean): the exact paired randomization
  test (scipy's `permutation_test`, `samples` permutation type). Its null is the sharp one: the
  rows and the baseline are exchangeable within a seed (the variant changes nothing), so each
  per-seed value is symmetric about 0 and each of the 2^n sign patterns is equally likely,
  however skewed the values. Rejecting it says the variant has an effect, in the direction of
  the mean; it does not test "mean below 0" against a skewed null whose mean is 0 (at 8 seeds
  such a null is rejected well above alpha). The sharp null holds for a difference (or a slope
  of differences) against margin 0, never for a value against a margin: a non-inferiority null
  such as "three times worse" fixes a mean, not a symmetric shape, and a right-skewed sample at
  that mean is rejected far above alpha.
- `sign` (about the median, "the typical seed"): the exact sign test (binomial; scipy's
  `quantile_test` gives its interval). Its null is "at most half the seeds satisfy the claim"
  (the median is on the wrong side of the margin), and the count of seeds that do is at most
  Binomial(n, 1/2) whatever the values' shape, ties and discreteness included. It is the test
  for margins, equivalences and counts.

Both have smallest attainable p 2^-n (`floor`). Each test reports the interval that matches it
(a one-sided bound at its level, the 1 - 2 level interval of an equivalence), the p of the
opposite direction, and what an inconclusive test could see: for the mean, the power of a
one-sided t-test (the sign-flip test's large-sample power: scipy's noncentral t), at an upper
confidence bound of the seeds' std where asked; for the median, the binomial power of the count.
The tables' descriptive marks are Holm-corrected here (`holm`): scipy has no Holm (its
`false_discovery_control` controls the false discovery rate); tests check both against
statsmodels' (`multipletests`, `TTestPower`), which the harness does not need at run time.
"""

import warnings
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq
from scipy.special import gammaln, xlogy
from scipy.stats import binom, chi2, nct, permutation_test, quantile_test, ttest_1samp
from scipy.stats import t as student

ALPHA = 0.05  # family-wise error rate of a table's or a grid's tests
LEVEL = 0.95  # confidence level of two-sided intervals (the tables' paired tests)
POWER = 0.8  # what "could have detected" means
MAX_SEEDS = 10_000  # more would not detect it: reported as None
MAX_SD = 100.0  # a mean further than this many stds beyond the margin counts as undetectable
SD_LEVEL = 0.95  # the upper confidence bound of a std that "seeds needed" assumes
BATCH = 256  # sign patterns scipy evaluates at once (all 2^12 at once is slower, not faster)
Expect = Literal["less", "greater", "equivalent"]
Test = Literal["sign-flip", "sign"]
# what each test's verdict is about, and the null it rejects (docs/claims.md, "Statistics")
ABOUT: dict[str, str] = {"sign-flip": "an effect", "sign": "the median"}
NULL: dict[str, str] = {"sign-flip": "no effect (exchangeable)",
                        "sign": "median on the margin or beyond"}


@dataclass(frozen=True)
class Estimate:
    """n per-seed values summarised as their test sees them: `effect` (their mean for
    sign-flip, their median for sign), the interval matching the test (ci_low / ci_high, -inf or
    inf on a one-sided bound's open side or where too few seeds bound it), the test's p, the
    opposite direction's p (`p_opposite`: greater for less, less for greater, outside the margin
    for an equivalence), the seeds' std and `share`, the fraction of seeds that satisfy the
    claim on their own. Everything but n, effect and share is NaN when n < 2."""

    n: int
    effect: float
    ci_low: float
    ci_high: float
    p: float
    p_opposite: float
    sd: float
    share: float


def holds(value: np.ndarray | float, expect: Expect, margin: float) -> np.ndarray | bool:
    """Whether a value satisfies the expectation strictly (the test's alternative)."""
    if expect == "equivalent":
        return np.abs(value) < margin
    return value < margin if expect == "less" else value > margin


def floor(n: int, exact: bool = False) -> float:
    """The smallest p either test can reach with n seeds (both directions: 2^-n); 0 for values
    fixed by the config (`exact`)."""
    return 0.0 if exact else 2.0 ** -n


def _mean(x: np.ndarray, axis: int) -> np.ndarray:
    return x.mean(axis=axis)


def tail(d: np.ndarray, margin: float, alternative: str, test: Test) -> np.ndarray:
    """One-sided exact p of per-seed values d (..., n) against `margin`, vectorised over the
    leading axes: sign-flip, of mean(d) over the 2^n sign patterns of d - margin; sign, of the
    count of seeds on the claimed side of the margin under Binomial(n, 1/2) (a seed exactly at
    the margin counts against the claim)."""
    x = np.asarray(d, dtype=float) - margin
    if test == "sign":
        hits = (x < 0 if alternative == "less" else x > 0).sum(axis=-1)
        return binom.sf(hits - 1, x.shape[-1], 0.5)
    res = permutation_test((x,), _mean, permutation_type="samples", n_resamples=np.inf,
                           alternative=alternative, vectorized=True, axis=-1,
                           batch=BATCH)
    return np.minimum(1.0, res.pvalue)


def flip_tails(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both one-sided exact sign-flip p's of per-seed values d (..., n) against 0, each (...):
    what `tail` gives for "greater" and "less", counted without enumerating the 2^n patterns.
    Flipping a subset F moves the sum T to T - 2 sum_F d, so "greater" counts the subsets whose
    sum is at most 0 (less: at least 0), within scipy's tie tolerance (100 eps |mean|, i.e.
    50 eps |T| on sum_F); split d in halves, each half's 2^(n/2) subset sums, and count the pairs
    by one sort per row (`_pairs_at_most`). For continuous values such as `operating`'s normal
    draws; `tail` stays the findings' test, whose data can tie."""
    x = np.asarray(d, dtype=float)
    n, lead = x.shape[-1], x.shape[:-1]
    x = x.reshape(-1, n)
    tol = 50 * np.finfo(float).eps * np.abs(x.sum(axis=-1))
    half = n // 2
    rows = max(1, 2 ** 22 // (2 ** half + 2 ** (n - half)))  # a chunk's rows: 32 MB of keys
    greater, less = np.empty(len(x)), np.empty(len(x))
    for i in range(0, len(x), rows):
        a, b = _subset_sums(x[i:i + rows, :half]), _subset_sums(x[i:i + rows, half:])
        greater[i:i + rows] = _pairs_at_most(a, b, tol[i:i + rows])
        less[i:i + rows] = _pairs_at_most(-a, -b, tol[i:i + rows])
    return (greater / 2 ** n).reshape(lead), (less / 2 ** n).reshape(lead)


def _subset_sums(x: np.ndarray) -> np.ndarray:
    """(rows, m) -> (rows, 2^m): the sum of every subset of each row (subset k holds the
    values whose bit is set in k)."""
    m = x.shape[-1]
    bits = (np.arange(2 ** m)[:, None] >> np.arange(m)) & 1
    return x @ bits.T.astype(float)


def _pairs_at_most(a: np.ndarray, b: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """Per row of a (rows, i) and b (rows, j): how many pairs have a + b <= tol (rows,). The
    keys b and tol - a sorted together, b first among equals (a stable sort of b then a), so
    each key tol - a counts the b's at or before it."""
    keys = np.concatenate([b, tol[:, None] - a], axis=1)
    is_b = np.concatenate([np.ones(b.shape), np.zeros(a.shape)], axis=1)
    order = np.argsort(keys, axis=1, kind="stable")
    in_order = np.take_along_axis(is_b, order, axis=1)
    return np.where(in_order == 0, np.cumsum(in_order, axis=1), 0).sum(axis=1)


GRID = np.linspace(0.0, 0.5, 201)  # the shares beyond each margin `outside` maximises over


@cache
def outside_table(n: int) -> np.ndarray:
    """p[up, lo] of an equivalence's contrary with n seeds, `up` beyond the upper margin and `lo`
    beyond the lower (up + lo <= n; NaN elsewhere). Outcomes are ordered by s = max(up, lo),
    then by fewer t = min(up, lo) beyond the other margin: "7 of 8 beyond one margin and none
    beyond the other" is more extreme than "7 of 8 and 1". p is the largest chance, over every
    pair of shares
    beyond the two margins at which the claim holds (each at most 1/2: GRID, corners
    included), of an outcome at least as extreme: the test's worst case over its whole null."""
    up, lo = (a.ravel() for a in np.indices((n + 1, n + 1)))
    ok = up + lo <= n
    up, lo = up[ok], lo[ok]
    s, t = np.maximum(up, lo), np.minimum(up, lo)
    pu, pl = (a.ravel()[:, None] for a in np.meshgrid(GRID, GRID))
    inside = np.clip(1.0 - pu - pl, 0.0, 1.0)
    rest = n - up - lo
    log_coef = gammaln(n + 1) - gammaln(up + 1) - gammaln(lo + 1) - gammaln(rest + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        pmf = np.exp(log_coef + xlogy(up, pu) + xlogy(lo, pl) + xlogy(rest, inside))
    extreme = (s[None, :] > s[:, None]) | ((s[None, :] == s[:, None]) & (t[None, :] <= t[:, None]))
    worst = (pmf @ extreme.T.astype(float)).max(axis=0)  # per outcome: sup over the null
    table = np.full((n + 1, n + 1), np.nan)
    table[up, lo] = np.minimum(worst, 1.0)
    return table


def outside_level(n: int, alpha: float) -> tuple[float, str]:
    """The largest p of `outside_table(n)` at most alpha (0: none), and its rule in words."""
    table = outside_table(n)
    fits = np.argwhere(table <= alpha * (1 + 1e-9))
    if not fits.size:
        return 0.0, "none"
    up, lo = max(fits.tolist(), key=lambda ul: table[ul[0], ul[1]])
    s, t = max(up, lo), min(up, lo)
    return float(table[up, lo]), (f"{s} of {n} beyond one margin, at most {t} beyond the other"
                                + (f" (or {s + 1} beyond one)" if s < n else ""))


def outside(d: np.ndarray, margin: float) -> np.ndarray:
    """The p of an equivalence's contrary, "beyond a margin" (`outside_table`), of per-seed
    values d (..., n): a seed at or beyond +-margin counts as beyond it."""
    x = np.asarray(d, dtype=float)
    up, lo = (x >= margin).sum(axis=-1), (x <= -margin).sum(axis=-1)
    return outside_table(x.shape[-1])[up, lo]


def p_values(d: np.ndarray, expect: Expect, margin: float, test: Test
             ) -> tuple[np.ndarray, np.ndarray]:
    """(p, p_opposite) of per-seed values d (..., n) against `margin`, vectorised over the
    leading axes. less / greater: one-sided, and the other side as the opposite; equivalent:
    TOST (the larger p of > -margin and < margin), its opposite "beyond a margin" one exact
    test of both sides (`outside`)."""
    with warnings.catch_warnings():  # nearly identical values: scipy warns of precision loss
        warnings.simplefilter("ignore", RuntimeWarning)
        if expect == "equivalent":
            return (np.maximum(tail(d, -margin, "greater", test), tail(d, margin, "less", test)),
                    outside(d, margin))
        opposite = "greater" if expect == "less" else "less"
        return tail(d, margin, expect, test), tail(d, margin, opposite, test)


def _flip_bound(d: np.ndarray, alternative: str, alpha: float) -> float:
    """The sign-flip test's one-sided confidence bound at level alpha, the inversion of the
    test: for `less` the largest margin m at which it cannot reject mean >= m (an upper bound;
    `greater`: the lowest). The test rejects mean <= m exactly when fewer than alpha 2^n - 1 of
    the 2^n - 1 subset means of d lie at or below m (flipping the signs of a subset A of d - m
    makes the sum no larger exactly when A's mean is at least m), so the bound is the k-th
    smallest (largest) subset mean, k = floor(alpha 2^n) (Hartigan 1969); +-inf where k = 0
    (2^-n > alpha), NaN beyond 20 seeds (a million subsets)."""
    n = len(d)
    k = int(np.floor(alpha * 2.0 ** n + 1e-9))
    if k == 0:
        return np.inf if alternative == "less" else -np.inf
    if n > 20:
        return float("nan")
    subsets = (np.arange(1, 2 ** n)[:, None] >> np.arange(n)) & 1  # every nonempty subset
    means = np.sort(subsets @ d / subsets.sum(axis=1))
    return float(means[-k] if alternative == "less" else means[k - 1])


def _median_bound(d: np.ndarray, alternative: str, alpha: float) -> float:
    """The sign test's one-sided bound on the median (an order statistic: scipy's
    `quantile_test` interval); +-inf where too few seeds bound it."""
    ci = quantile_test(d, alternative=alternative).confidence_interval(1 - alpha)
    bound = ci.high if alternative == "less" else ci.low
    return float(bound) if np.isfinite(bound) else (np.inf if alternative == "less" else -np.inf)


def interval(d: np.ndarray, expect: Expect, test: Test, alpha: float) -> tuple[float, float]:
    """The interval that matches the test at level alpha: the one-sided bound for less /
    greater, the 1 - 2 alpha interval (inside +-margin exactly when TOST rejects) for an
    equivalence."""
    bound = _flip_bound if test == "sign-flip" else _median_bound
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if expect == "equivalent":
            return bound(d, "greater", alpha), bound(d, "less", alpha)
        b = bound(d, expect, alpha)
    return (-np.inf, b) if expect == "less" else (b, np.inf)


def estimate(values: ArrayLike, expect: Expect, margin: float = 0.0,
             exact: bool = False, test: Test = "sign", alpha: float = ALPHA) -> Estimate:
    """Effect, interval and both directions' p of per-seed values against `margin` by `test`
    at level `alpha` (see `p_values`, `interval`). `exact`: values that cannot vary by seed (a
    parameter count): p is 0 where they satisfy the expectation and 1 where not."""
    d = np.asarray(values, dtype=float)
    d = d[np.isfinite(d)]
    n, nan = len(d), float("nan")
    if n == 0:
        return Estimate(0, nan, nan, nan, nan, nan, nan, nan)
    effect = float(d.mean() if test == "sign-flip" else np.median(d))
    share = float(np.mean(holds(d, expect, margin)))
    if n < 2:
        return Estimate(n, effect, nan, nan, nan, nan, nan, share)
    sd = float(d.std(ddof=1))
    if exact and np.ptp(d) == 0:
        ok = bool(holds(effect, expect, margin))
        wrong = not ok and effect != margin
        return Estimate(n, effect, effect, effect, 0.0 if ok else 1.0, 0.0 if wrong else 1.0,
                        0.0, share)
    p, p_opp = p_values(d, expect, margin, test)
    low, high = interval(d, expect, test, alpha)
    return Estimate(n, effect, float(low), float(high), float(p), float(p_opp), sd, share)


@dataclass(frozen=True)
class Detectable:
    """What an inconclusive test could see at `alpha` with 80% power: `effect`, for the mean
    the smallest distance beyond the margin in the claimed direction its seeds detect (for an
    equivalence: the narrowest margin they would establish), for the median the smallest share
    of seeds satisfying the claim; and `seeds`, how many seeds would detect what was observed
    (None where it is not in the claimed direction or needs more than MAX_SEEDS)."""

    effect: float
    seeds: int | None


def sd_upper(sd: float, n: int, level: float = SD_LEVEL) -> float:
    """The one-sided `level` upper confidence bound of a std estimated from n values (chi-square
    with n - 1 df): at n = 3 the true std may be up to 4.4 times the observed one."""
    return float(sd * np.sqrt((n - 1) / chi2.ppf(1 - level, n - 1)))


def t_power(d: np.ndarray | float, n: np.ndarray | int, alpha: float) -> np.ndarray:
    """The power of a one-sided one-sample t-test at `alpha` with n values and standardised
    effect d (mean / std): the noncentral t's tail beyond the test's critical value."""
    n = np.asarray(n, dtype=float)
    return nct.sf(student.isf(alpha, n - 1), n - 1, np.asarray(d, dtype=float) * np.sqrt(n))


def detectable(est: Estimate, expect: Expect, margin: float, alpha: float, test: Test = "sign",
               sd: float | None = None) -> Detectable:
    """For the mean (sign-flip): the power of a one-sided t-test at `alpha` (`t_power`), the
    sign-flip test's large-sample power, at the std `sd` (default: the seeds' own; pass
    `sd_upper` for a bound a reader can plan with), and never fewer seeds than can reject at
    all. For the median (sign): the binomial power of the count at the observed share. The
    mean's `effect` is NaN where nothing is detectable at this n: the exact test cannot reject
    with n seeds at `alpha` (2^-n > alpha), or no effect within MAX_SD stds reaches 80%. A
    level of 0 (a claim no attainable p can reach) detects nothing: (NaN, None)."""
    if not alpha > 0:
        return Detectable(float("nan"), None)
    if test == "sign":
        return _count_power(est, alpha)
    sd = est.sd if sd is None else sd
    d = (brentq(lambda x: t_power(x, est.n, alpha) - POWER, 0.0, MAX_SD, xtol=1e-12)
         if floor(est.n) <= alpha and t_power(MAX_SD, est.n, alpha) >= POWER else np.nan)
    if expect == "equivalent":
        effect, room = abs(est.effect) + d * sd, margin - abs(est.effect)
    else:
        effect = d * sd
        room = margin - est.effect if expect == "less" else est.effect - margin
    if not room > 0:
        return Detectable(float(effect), None)
    seeds = np.arange(2, MAX_SEEDS + 1)
    reach = t_power(room / sd, seeds, alpha)
    enough = np.flatnonzero(reach >= POWER)
    fewest = min_seeds(alpha)
    return Detectable(float(effect), max(int(seeds[enough[0]]), fewest) if enough.size else None)


def needed(n: np.ndarray | int, alpha: float) -> np.ndarray:
    """The fewest of n seeds that must satisfy a claim for the sign test to reject at alpha
    (n + 1 where none can)."""
    n = np.asarray(n)
    k = np.arange(int(n.max()) + 2)
    ok = binom.sf(k[None, :] - 1, n[..., None], 0.5) <= alpha  # (n, k): P(count >= k)
    return np.where(ok.any(-1), ok.argmax(-1), n + 1)


def _count_power(est: Estimate, alpha: float) -> Detectable:
    """The sign test's power: the share of seeds satisfying the claim that n seeds detect with
    80% power, and the seeds that would detect the observed share."""
    c = needed(est.n, alpha)
    shares = np.linspace(0.5, 1.0, 501)
    reach = binom.sf(c - 1, est.n, shares) >= POWER
    effect = float(shares[reach.argmax()]) if reach.any() else float("nan")
    if not est.share > 0.5:
        return Detectable(effect, None)
    seeds = np.arange(1, 1001)
    enough = np.flatnonzero(binom.sf(needed(seeds, alpha) - 1, seeds, est.share) >= POWER)
    return Detectable(effect, int(seeds[enough[0]]) if enough.size else None)


def min_seeds(alpha: float) -> int:
    """The fewest paired seeds with which an exact test can reject at alpha (2^-n <= alpha): 5
    at 0.05, 8 at 0.005."""
    return int(np.ceil(np.log2(1 / alpha) - 1e-12))


def holm(p: ArrayLike) -> np.ndarray:
    """Holm-adjusted p-values (family-wise error control); NaN entries are not tests and stay
    NaN. adjusted p_(i) = max over j <= i of min(1, (m - j + 1) p_(j)), p sorted ascending."""
    p = np.asarray(p, dtype=float)
    out = np.full_like(p, np.nan)
    ok = ~np.isnan(p)
    order = np.flatnonzero(ok)[np.argsort(p[ok], kind="stable")]  # the tests, p ascending
    m = order.size
    out[order] = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    return out


def paired_t(d: np.ndarray) -> tuple[float, float, float, float, int]:
    """The tables' descriptive marks: per-seed differences d (n,) of two rows (the finite ones),
    two-sided t-test: (mean, 95% low, 95% high, p, n); NaN below 2 seeds or without spread.
    Outside every claim's family: the verdicts are the findings'."""
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d)]
    nan = float("nan")
    if len(d) < 2 or np.ptp(d) == 0:
        return (float(d.mean()) if len(d) else nan), nan, nan, nan, len(d)
    res = ttest_1samp(d, 0.0)
    ci = res.confidence_interval(LEVEL)
    return float(d.mean()), float(ci.low), float(ci.high), float(res.pvalue), len(d)
