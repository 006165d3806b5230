"""bench.findings.statistics.stats against scipy on hand-made data: the two exact tests (sign-flip
against scipy's permutation test, sign against its binomial quantile test), their intervals
(inverting the test), both directions' p, TOST, exact and tied values, what an inconclusive test
could detect (t power from scipy's noncentral t, binomial power by hand), Holm, and the tables'
descriptive paired t-test."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom, nct, permutation_test, quantile_test, ttest_rel
from scipy.stats import t as student_t
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

from bench.findings.presentation.tables import differences
from bench.findings.statistics import stats

A = pd.Series([2.10, 1.95, 2.30, 2.02], index=[0, 1, 2, 3])  # by seed
B = pd.Series([2.15, 2.05, 2.33, 2.01, 9.9], index=[0, 1, 2, 3, 4])  # seed 4 has no pair
D = np.array([-0.31, -0.12, -0.45, 0.08, -0.27, -0.19, -0.6, -0.05])  # per-seed differences


def test_the_tables_paired_t_matches_scipy_ttest_rel():
    a, b = A.to_numpy(), B.to_numpy()[:4]
    mean, low, high, p, n = stats.paired_t(differences(A, B))
    ref = ttest_rel(a, b)
    ci = ref.confidence_interval(0.95)
    assert (mean, low, high, p, n) == (pytest.approx(np.mean(a - b)), pytest.approx(ci.low),
                                       pytest.approx(ci.high), pytest.approx(ref.pvalue), 4)
    # shuffling one side's seeds breaks the pairing and changes the answer
    assert stats.paired_t(differences(A, B.rename(index={0: 1, 1: 0})))[3] != pytest.approx(p)
    assert np.isnan(stats.paired_t(differences(A.iloc[:1], B))[3])


@pytest.mark.parametrize("expect", ["less", "greater"])
def test_sign_flip_is_scipys_paired_permutation_test(expect):
    e = stats.estimate(D, expect, 0.0, test="sign-flip")
    ref = permutation_test((D,), np.mean, permutation_type="samples", n_resamples=np.inf,
                           alternative=expect)
    other = "greater" if expect == "less" else "less"
    assert e.p == pytest.approx(ref.pvalue) and e.effect == pytest.approx(D.mean())
    assert e.p_opposite == pytest.approx(permutation_test(
        (D,), np.mean, permutation_type="samples", n_resamples=np.inf,
        alternative=other).pvalue)
    # as extreme as observed: D itself, 0.08 flipped, and 0.08 and -0.05 flipped together
    assert stats.estimate(D, "less", 0.0, test="sign-flip").p == pytest.approx(3 / 256)


@pytest.mark.parametrize("n", [2, 3, 7, 10, 12])
def test_flip_tails_are_the_sign_flip_test_counted_without_its_patterns(n):
    """`flip_tails` (the dry run's power, by meet in the middle) gives `tail`'s exact p's, both
    sides, on normal draws whose sum is not within rounding of 0; with a sum within rounding
    of 0 it still counts the observed pattern on both sides (p >= 2^-n)."""
    x = np.random.default_rng(n).normal(0.4, 1.0, (2, 300, n))
    x = x[:, np.abs(x.sum(axis=(0, 2))) > 1e-6]  # every row: scipy's tolerance is not in play
    greater, less = stats.flip_tails(x)
    assert greater.shape == less.shape == x.shape[:2]
    assert np.array_equal(greater, stats.tail(x, 0.0, "greater", "sign-flip"))
    assert np.array_equal(less, stats.tail(x, 0.0, "less", "sign-flip"))
    # each pattern is counted on one side, the observed one (no flip: sum_F = 0) on both
    assert np.allclose(greater + less, 1 + 2.0 ** -n)
    zero = np.array([0.3, -0.1, -0.2, 1e-17])  # sum ~1e-17: the identity pattern ties itself
    g, lo = stats.flip_tails(zero)
    assert g >= 1 / 16 and lo >= 1 / 16 and g + lo >= 1


@pytest.mark.parametrize("n,alpha", [(5, 0.05), (6, 0.05), (8, 0.0444), (10, 0.1)])
def test_the_sign_flip_bound_inverts_the_test(n, alpha):
    """The bound (the k-th subset mean) is where the test's p crosses alpha: just beyond it the
    test rejects, just inside it does not."""
    d = np.random.default_rng(n).lognormal(0, 1, n) - 1
    for alternative, beyond in (("less", 1e-9), ("greater", -1e-9)):
        b = stats._flip_bound(d, alternative, alpha)
        assert stats.tail(d, b + beyond, alternative, "sign-flip") <= alpha
        assert stats.tail(d, b - beyond, alternative, "sign-flip") > alpha
    assert stats._flip_bound(d[:4], "less", 0.05) == np.inf  # 2^-4 > 0.05: unbounded


def test_sign_test_is_scipys_quantile_test_and_its_bound_an_order_statistic():
    margin = 0.0
    for expect in ("less", "greater"):
        e = stats.estimate(D, expect, margin)
        ref = quantile_test(D, q=margin, alternative=expect)
        assert e.p == pytest.approx(ref.pvalue) and e.effect == np.median(D)
        bound = ref.confidence_interval(0.95)
        assert (e.ci_high if expect == "less" else e.ci_low) == pytest.approx(
            bound.high if expect == "less" else bound.low)
    assert stats.estimate(D, "less").p == pytest.approx(9 / 256)  # 7 of 8 below 0
    assert stats.estimate(D, "less").share == 7 / 8
    # a seed exactly at the margin counts against the claim
    assert stats.estimate([0.0, -1, -1, -1, -1], "less").p == pytest.approx(5 / 32 + 1 / 32)


def test_equivalence_is_two_sign_tests_and_outside_one_exact_test():
    d = np.array([0.010, -0.004, 0.006, 0.002, -0.008, 0.001])
    tost = stats.estimate(d, "equivalent", 0.02)
    assert tost.p == pytest.approx(1 / 64) and -0.02 < tost.ci_low < tost.ci_high < 0.02
    assert stats.estimate(d, "equivalent", 0.005).p > 0.05  # narrower than the noise
    outside = stats.estimate(d + 0.05, "equivalent", 0.02)  # every seed above +0.02
    # the opposite, "beyond a margin": one exact test of both sides, its worst case over the
    # claim's whole null at half the seeds beyond each margin (either side's 6 of 6: 2/64)
    assert outside.p_opposite == pytest.approx(2 / 64) and outside.p == 1.0


def test_exact_values_and_ties():
    """Values fixed by the config (a parameter count) are exact; tied values of a metric that
    could vary (a capped span, a count) are an ordinary sign test: every seed on one side."""
    e = stats.estimate([-5.0, -5.0, -5.0], "less", exact=True)
    assert (e.effect, e.ci_low, e.ci_high, e.p, e.p_opposite) == (-5.0, -5.0, -5.0, 0.0, 1.0)
    assert stats.estimate([-5.0, -5.0, -5.0], "greater", exact=True).p_opposite == 0.0
    tied = stats.estimate([0.25] * 6, "less", 0.5)
    assert tied.p == pytest.approx(1 / 64) and tied.share == 1.0
    one = stats.estimate([1.0], "less")
    assert one.n == 1 and np.isnan(one.p)


def test_holm_by_hand():
    p = [0.01, 0.04, np.nan, 0.03, 0.005]
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 -> max(0.06, 0.04)
    assert np.allclose(stats.holm(p), [0.03, 0.06, np.nan, 0.06, 0.02], equal_nan=True)
    assert stats.holm([0.5, 0.9]).tolist() == [1.0, 1.0]
    assert stats.holm([]).size == 0


def test_t_power_is_statsmodels_t_power():
    """The t power behind `detectable` is statsmodels' TTestPower (its reference, a test
    dependency only), at the seeds and effects the findings use."""
    ref = TTestPower()
    for n in (3, 5, 8, 20):
        for d in (0.2, 1.0, 2.5):
            assert stats.t_power(d, n, 0.05) == pytest.approx(
                ref.power(effect_size=d, nobs=n, alpha=0.05, alternative="larger"), rel=1e-9)


def test_holm_is_statsmodels_holm():
    rng = np.random.default_rng(0)
    for m in range(1, 9):
        p = rng.uniform(0, 0.1, m)
        assert np.array_equal(stats.holm(p), multipletests(p, method="holm")[1])


def power(effect: float, sd: float, n: int, alpha: float) -> float:
    """scipy's power of a one-sided one-sample t-test: P(t > t_crit) under the noncentral t."""
    crit = student_t.ppf(1 - alpha, n - 1)
    return float(nct.sf(crit, n - 1, effect / sd * np.sqrt(n)))


def test_detectable_for_a_mean_agrees_with_scipys_t_power():
    """An inconclusive sign-flip test reports the effect its seeds detect with 80% power and
    the seeds that would detect the observed effect (never fewer than can reject at all)."""
    d = np.array([-0.004, 0.003, -0.009, -0.002, 0.001])
    e = stats.estimate(d, "less", test="sign-flip")
    seen = stats.detectable(e, "less", 0.0, 0.05, "sign-flip")
    assert power(seen.effect, e.sd, 5, 0.05) == pytest.approx(0.8, abs=1e-4)
    room = -e.effect
    assert power(room, e.sd, seen.seeds, 0.05) >= 0.8 > power(room, e.sd, seen.seeds - 1, 0.05)
    assert stats.detectable(stats.estimate(-d, "less", test="sign-flip"), "less", 0.0, 0.05,
                            "sign-flip").seeds is None  # not in the claimed direction


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.003, 0.001, 1e-6])
def test_detectable_never_crashes_and_is_empty_where_the_seeds_cannot_reject(alpha):
    """An inconclusive 2-seed sign-flip part (results/heads_grid/pilot-seeds0's shape) at any alpha:
    its exact test cannot reject with 2 seeds (2^-2 > alpha), so no effect is detectable
    (NaN: "not detectable at this n", no crash of brentq's bracket); the seeds that would
    detect what it saw are still counted, never fewer than can reject at all."""
    e = stats.estimate(np.array([-0.3, 0.1]), "less", test="sign-flip")
    found = stats.detectable(e, "less", 0.0, alpha, "sign-flip")
    assert np.isnan(found.effect)
    assert found.seeds is None or found.seeds >= stats.min_seeds(alpha)
    eight = stats.estimate(D, "less", test="sign-flip")  # 2^-8 <= alpha only from 0.0039
    at = stats.detectable(eight, "less", 0.0, alpha, "sign-flip")
    assert np.isnan(at.effect) == (2.0 ** -8 > alpha)
    if not np.isnan(at.effect):
        assert power(at.effect, eight.sd, 8, alpha) == pytest.approx(0.8, abs=1e-4)
    nothing = stats.detectable(eight, "less", 0.0, 0.0, "sign-flip")  # a level no p reaches
    assert np.isnan(nothing.effect) and nothing.seeds is None


def test_detectable_for_a_median_is_the_binomial_power_of_the_count():
    e = stats.estimate(D, "less", 0.0)  # 7 of 8 seeds below the margin
    c = stats.needed(8, 0.05)
    assert c == 7 and binom.sf(c - 1, 8, 0.5) <= 0.05 < binom.sf(c - 2, 8, 0.5)
    found = stats.detectable(e, "less", 0.0, 0.05)
    assert binom.sf(c - 1, 8, found.effect) >= 0.8 > binom.sf(c - 1, 8, found.effect - 0.002)
    n = found.seeds  # the seeds that detect a share of 7/8 with 80% power
    assert binom.sf(stats.needed(n, 0.05) - 1, n, 7 / 8) >= 0.8
    assert binom.sf(stats.needed(n - 1, 0.05) - 1, n - 1, 7 / 8) < 0.8
    assert stats.needed(4, 0.05) == 5  # no count of 4 seeds can reject
    half = stats.estimate(np.array([-1.0, 1, -1, 1]), "less")
    assert stats.detectable(half, "less", 0.0, 0.05).seeds is None


def test_seeds_needed_plan_with_the_upper_bound_of_the_std():
    est = stats.estimate(np.array([-0.004, 0.003, -0.009, -0.001, -0.006]), "less",
                         test="sign-flip")
    plain = stats.detectable(est, "less", 0.0, 0.05, "sign-flip")
    upper = stats.detectable(est, "less", 0.0, 0.05, "sign-flip", sd=stats.sd_upper(est.sd, 5))
    assert stats.sd_upper(1.0, 3) == pytest.approx(4.415, abs=1e-3)  # chi-square, 2 df
    assert upper.seeds > plain.seeds and upper.effect > plain.effect
    assert stats.min_seeds(0.05) == 5 and stats.min_seeds(1 / 64) == 6
    assert stats.floor(8) == 1 / 256 and stats.floor(8, exact=True) == 0.0
