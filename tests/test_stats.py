"""bench.stats against scipy on hand-made data: the paired t-test, its CI, one-sided and TOST
p-values, exact (zero-variance) differences, and the Holm correction."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ttest_rel

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
    assert stats.estimate(d, "equivalent", 0.004).p > 0.05  # margin narrower than the noise


def test_identical_differences_are_exact_and_too_few_seeds_are_nan():
    e = stats.estimate([-5.0, -5.0, -5.0], "less")
    assert (e.effect, e.ci_low, e.ci_high, e.p) == (-5.0, -5.0, -5.0, 0.0)
    assert stats.estimate([-5.0, -5.0, -5.0], "greater").p == 1.0
    one = stats.paired(A.iloc[:1], B)
    assert one.n == 1 and np.isnan(one.p) and np.isnan(one.ci_low)


def test_holm_by_hand():
    p = [0.01, 0.04, np.nan, 0.03, 0.005]
    # sorted: 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 -> max(0.06, 0.04)
    assert np.allclose(stats.holm(p), [0.03, 0.06, np.nan, 0.06, 0.02], equal_nan=True)
    assert stats.holm([0.5, 0.9]).tolist() == [1.0, 1.0]
    assert stats.holm([]).size == 0
