"""bench.findings.stats against scipy on hand-made data: the paired t-test, the interval that
matches each test (one-sided bound, TOST's 90%), both directions' p-values, exact and tied
values, what an inconclusive test could detect (power from scipy's noncentral t), and Holm."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import nct, ttest_1samp, ttest_rel
from scipy.stats import t as student_t

from bench.findings import stats

A = pd.Series([2.10, 1.95, 2.30, 2.02], index=[0, 1, 2, 3])  # by seed
B = pd.Series([2.15, 2.05, 2.33, 2.01, 9.9], index=[0, 1, 2, 3, 4])  # seed 4 has no pair


def test_paired_matches_scipy_ttest_rel():
    a, b = A.to_numpy(), B.to_numpy()[:4]
    for expect in ("two-sided", "less", "greater"):
        e = stats.paired(A, B, expect)
        ref = ttest_rel(a, b, alternative=expect)
        assert e.n == 4 and e.effect == pytest.approx(np.mean(a - b))
        assert e.p == pytest.approx(ref.pvalue)
        if expect != "two-sided":  # the interval matches the test: a one-sided 95% bound
            bound = ref.confidence_interval(0.95)
            assert (e.ci_low, e.ci_high) == (pytest.approx(bound.low), pytest.approx(bound.high))
            assert np.isinf(e.ci_low if expect == "less" else e.ci_high)
            other = "greater" if expect == "less" else "less"
            assert e.p_opposite == pytest.approx(ttest_rel(a, b, alternative=other).pvalue)
    ci = ttest_rel(a, b).confidence_interval(0.95)
    e = stats.paired(A, B)
    assert (e.ci_low, e.ci_high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    # shuffling one side's seeds breaks the pairing and changes the answer
    assert stats.paired(A, B.rename(index={0: 1, 1: 0})).p != pytest.approx(e.p)


def test_margins_and_tost():
    d = np.array([0.010, -0.004, 0.006, 0.002])
    less = stats.estimate(d, "less", 0.02)
    assert less.p == pytest.approx(ttest_rel(d, np.full(4, 0.02), alternative="less").pvalue)
    tost = stats.estimate(d, "equivalent", 0.02)
    lower = ttest_rel(d, np.full(4, -0.02), alternative="greater").pvalue
    upper = ttest_rel(d, np.full(4, 0.02), alternative="less").pvalue
    assert tost.p == pytest.approx(max(lower, upper)) and tost.p < 0.05
    ci90 = ttest_1samp(d, 0).confidence_interval(0.90)  # inside +-margin exactly when TOST rejects
    assert (tost.ci_low, tost.ci_high) == (pytest.approx(ci90.low), pytest.approx(ci90.high))
    assert -0.02 < tost.ci_low and tost.ci_high < 0.02
    assert stats.estimate(d, "equivalent", 0.004).p > 0.05  # margin narrower than the noise
    outside = stats.estimate(d + 0.05, "equivalent", 0.02)  # the whole interval above +0.02
    # outside the margin is a union of two one-sided tests: twice the smaller p (Bonferroni)
    assert outside.p_opposite == pytest.approx(
        2 * ttest_1samp(d + 0.05, 0.02, alternative="greater").pvalue)
    assert outside.p_opposite < 0.05


def test_exact_values_tied_values_and_too_few_seeds():
    """Values fixed by the config (a parameter count) are exact; tied values of a metric that
    could vary (a capped span) have no spread to test: NaN, not a verdict."""
    e = stats.estimate([-5.0, -5.0, -5.0], "less", exact=True)
    assert (e.effect, e.ci_low, e.ci_high, e.p, e.p_opposite) == (-5.0, -5.0, -5.0, 0.0, 1.0)
    assert stats.estimate([-5.0, -5.0, -5.0], "greater", exact=True).p_opposite == 0.0
    tied = stats.estimate([256.0, 256.0, 256.0], "greater", 128)
    assert tied.effect == 256 and np.isnan(tied.p) and np.isnan(tied.ci_low)
    one = stats.paired(A.iloc[:1], B)
    assert one.n == 1 and np.isnan(one.p) and np.isnan(one.ci_low)


def test_holm_by_hand():
    p = [0.01, 0.04, np.nan, 0.03, 0.005]
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 -> max(0.06, 0.04)
    assert np.allclose(stats.holm(p), [0.03, 0.06, np.nan, 0.06, 0.02], equal_nan=True)
    assert stats.holm([0.5, 0.9]).tolist() == [1.0, 1.0]
    assert stats.holm([]).size == 0


def power(effect: float, sd: float, n: int, alpha: float) -> float:
    """scipy's power of a one-sided one-sample t-test: P(t > t_crit) under the noncentral t."""
    crit = student_t.ppf(1 - alpha, n - 1)
    return float(nct.sf(crit, n - 1, effect / sd * np.sqrt(n)))


def test_detectable_effect_and_seeds_agree_with_scipys_power():
    """An inconclusive test reports the effect its seeds detect with 80% power and the seeds
    that would detect the observed effect: checked against scipy's noncentral t."""
    d = np.array([-0.004, 0.003, -0.009])  # a claim "less than 0", not shown by 3 seeds
    e = stats.estimate(d, "less")
    seen = stats.detectable(e, "less", 0.0, alpha=0.05 / 4)
    assert power(seen.effect, e.sd, 3, 0.05 / 4) == pytest.approx(0.8, abs=1e-4)
    room = -e.effect  # the observed effect beyond the margin, in the claimed direction
    assert power(room, e.sd, seen.seeds, 0.05 / 4) >= 0.8 > power(room, e.sd, seen.seeds - 1,
                                                                    0.05 / 4)
    wrong_way = stats.estimate(-d, "less")  # the observed effect is not in the claimed direction
    assert stats.detectable(wrong_way, "less", 0.0, 0.05).seeds is None
    tost = stats.estimate(d, "equivalent", 0.02)
    eq = stats.detectable(tost, "equivalent", 0.02, 0.05)
    assert eq.effect == pytest.approx(abs(tost.effect) + stats.detectable(
        tost, "greater", 0.0, 0.05).effect)  # the narrowest margin it would establish
    assert power(0.02 - abs(tost.effect), tost.sd, eq.seeds, 0.05) >= 0.8
