"""Verdicts that settle: the alpha-spending boundaries of group-sequential looks, the error rate
of the whole procedure at the main job's sizes and skew, and the looks in `verdicts.evaluate`.
Fast: no Ray, no training."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from bench.findings import claims, sequential, stats, verdicts
from bench.findings.spec import Looks

ALPHA = stats.ALPHA


def test_one_look_is_the_plain_alpha_and_obrien_fleming_spends_little_early():
    assert sequential.boundaries((5,)) == (ALPHA,)
    first, last = sequential.boundaries((3, 6))
    assert first == pytest.approx(sequential.spent(0.5))  # all the first look may spend
    assert first == pytest.approx(2 * norm.sf(norm.isf(ALPHA / 2) / np.sqrt(0.5)))
    assert first < 0.006 < 0.045 < last < ALPHA  # O'Brien-Fleming: almost all of it at the end
    three = sequential.boundaries((3, 6, 10))
    assert all(a < b for a, b in zip(three, three[1:], strict=False))


@pytest.mark.parametrize("looks", [(3, 6), (3, 6, 10), (2, 4, 6, 8)])
def test_the_boundaries_spend_exactly_alpha_over_the_looks(looks):
    """Brownian motion observed at the looks (independent normal increments per seed): the
    chance that any look crosses its boundary under the null is alpha (Monte Carlo)."""
    rng = np.random.default_rng(0)
    reps = 400_000
    seeds = np.diff((0, *looks))
    sums = np.cumsum(np.stack([rng.normal(0, np.sqrt(k), reps) for k in seeds]), axis=0)
    z = sums / np.sqrt(np.asarray(looks))[:, None]
    crossed = (norm.sf(z) <= np.asarray(sequential.boundaries(looks))[:, None]).any(axis=0)
    se = np.sqrt(ALPHA * (1 - ALPHA) / reps)
    assert abs(crossed.mean() - ALPHA) < 3 * se


def main_job_pattern(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Bits per answer as the main job's seeds spread: most near the floor (about 0.004), a
    quarter that half-learn the probe, 10 to 25 times higher."""
    base = rng.lognormal(np.log(0.004), 0.5, shape)
    return base * np.where(rng.random(shape) < 0.25, rng.uniform(10, 25, shape), 1.0)


def sequential_rejects(values: np.ndarray, looks: tuple[int, ...], expect: str, margin: float,
                       test: str, futility: float = 0.5) -> bool:
    """The procedure one claim follows: at look k the first looks[k] per-seed values, reject
    at the boundary, stop for futility at an interim look."""
    levels = sequential.boundaries(looks)
    for k, n in enumerate(looks):
        p, _ = stats.p_values(values[:n], expect, margin, test)
        if p <= levels[k]:
            return True
        if k < len(looks) - 1 and p > futility:
            return False
    return False


@pytest.mark.parametrize("kind", ["compare", "trend", "non-inferiority"])
def test_false_positives_at_the_null_boundary_stay_at_alpha_under_looks_and_skew(kind):
    """The main job's claims under their nulls, with its skew (a minority of seeds 10 to 25
    times the rest), its looks (3, then 6 seeds) and its analysis (sign-flip on log(y +
    0.001)): the rate of false `reproduced` is at most alpha plus 2 Monte Carlo errors.
    compare: two exchangeable rows; trend: h = 2, 4, 8 exchangeable (slope per doubling, margin
    0); non-inferiority: at the boundary on the claim's scale, y + c grows by the margin's
    factor 1.5 per doubling of h."""
    rng = np.random.default_rng(1)
    reps, looks, c = 3000, (3, 6), 0.001
    if kind == "compare":
        a, b = main_job_pattern(rng, (2, reps, 6))
        per_seed, expect, margin = np.log(a + c) - np.log(b + c), "less", 0.0
    else:
        grow = 1.5 if kind == "non-inferiority" else 1.0
        y = (main_job_pattern(rng, (3, reps, 6)) + c) * (grow ** np.arange(1, 4))[:, None, None] - c
        x = np.arange(1, 4) - 2.0  # log2 h centred: the least-squares slope
        per_seed = np.tensordot(x, np.log(y + c), axes=1) / (x @ x)
        expect, margin = ("less", np.log(grow)) if kind == "non-inferiority" else ("greater", 0)
    rate = np.mean([sequential_rejects(v, looks, expect, margin, "sign-flip") for v in per_seed])
    assert rate <= ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / reps)


def test_a_t_test_on_three_skewed_points_does_not_hold_its_level():
    """Why the main job does not use it: the raw one-sample t-test of a mean at the null
    boundary of a skewed sample (mean exactly at the margin) rejects far above alpha."""
    rng = np.random.default_rng(2)
    y = main_job_pattern(rng, (4000, 3))
    mean = np.exp(np.log(0.004) + 0.5 ** 2 / 2) * (0.75 + 0.25 * 17.5)  # the mixture's mean
    rate = np.mean([stats.p_values(v, "less", mean, "t")[0] <= ALPHA for v in y])
    assert rate > 3 * ALPHA


def looked_runs(effect: float, seeds: int, rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for s in range(seeds):
        base = main_job_pattern(rng, ())
        rows += [{"model.variant": "fixed", "seed": s, "test_probe_bpc.recall": base},
                 {"model.variant": "th", "seed": s,
                  "test_probe_bpc.recall": base * effect * rng.uniform(0.8, 1.2)}]
    return pd.DataFrame(rows)


CLAIM = {"id": "beats", "text": "th beats fixed", "rows": {"model.variant": "th"},
         "baseline": {"model.variant": "fixed"}, "metric": "test_probe_bpc.recall",
         "expect": "less", "test": "sign-flip", "log_offset": 0.001}


def test_evaluate_tests_each_look_at_its_boundary_and_says_when_it_settled():
    rng = np.random.default_rng(3)
    tested = claims.parse([CLAIM, {**CLAIM, "id": "after", "expect": "greater"}])
    runs = looked_runs(0.05, 6, rng)  # twenty times fewer bits: every seed agrees
    looks = Looks(looks=[3, 6])
    first = verdicts.evaluate(tested, runs[runs["seed"] < 3], looks=looks).set_index("claim")
    # three seeds cannot reach the first boundary (2^-3 > 0.0056): undecided, the next waits
    assert first.loc["beats", "verdict"] == "inconclusive" and first.loc["beats", "p"] == 0.125
    assert "look 2 not run" in first.loc["beats", "reason"]
    assert first.loc["after", "reason"] == "waits for beats"
    assert [c.id for c in verdicts.undecided(tested, runs[runs["seed"] < 3], None, looks)] == [
        "beats", "after"]
    done = verdicts.evaluate(tested, runs, looks=looks).set_index("claim")
    assert done.loc["beats", "verdict"] == "reproduced" and done.loc["beats", "look"] == "2 of 2"
    assert done.loc["beats", "p"] == pytest.approx(1 / 64) and done.loc["beats", "n"] == 6
    assert done.loc["beats", "level"] == pytest.approx(sequential.boundaries((3, 6))[1])
    assert done.loc["beats", "test"] == "sign-flip, log(y + 0.001)"
    assert 0 < done.loc["beats", "p_replicate"] < 1
    # the next claim in the sequence is tested at the same look: the opposite, contradicted
    assert done.loc["after", "verdict"] == "contradicted" and done.loc["after", "look"] == "2 of 2"
    assert verdicts.undecided(tested, runs, None, looks) == []


def test_futility_stops_a_claim_at_an_interim_look_and_the_sequence_with_it():
    rng = np.random.default_rng(4)
    tested = claims.parse([CLAIM, {**CLAIM, "id": "after"}])
    runs = looked_runs(20.0, 3, rng)  # the wrong way in every seed
    table = verdicts.evaluate(tested, runs, looks=Looks(looks=[3, 6])).set_index("claim")
    assert table.loc["beats", "verdict"] == "inconclusive"
    assert "stopped for futility at look 1 of 2" in table.loc["beats", "reason"]
    assert table.loc["after", "reason"] == "sequence stopped at beats"
    assert verdicts.undecided(tested, runs, None, Looks(looks=[3, 6])) == []
    # without a futility bound the claim waits for the next look
    waits = verdicts.undecided(tested, runs, None, Looks(looks=[3, 6], futility=None))
    assert [c.id for c in waits] == ["beats", "after"]


def test_seeds_needed_plan_with_the_upper_bound_of_the_std():
    est = stats.estimate(np.array([-0.004, 0.003, -0.009]), "less")
    plain = stats.detectable(est, "less", 0.0, ALPHA)
    upper = stats.detectable(est, "less", 0.0, ALPHA, sd=stats.sd_upper(est.sd, 3))
    assert stats.sd_upper(1.0, 3) == pytest.approx(4.415, abs=1e-3)  # chi-square, 2 df
    assert upper.seeds > plain.seeds and upper.effect > plain.effect
    assert stats.min_seeds(0.05) == 5 and stats.min_seeds(1 / 64) == 6
