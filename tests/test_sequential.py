"""Verdicts a statistician would sign: the levels of group-sequential looks, and the
false-positive rate of the verdict code that runs (`verdicts.evaluate`, what bench.report calls)
for each claim type at its null boundary, with the skew of the main job's committed per-seed
values, under its looks and futility; and that the check fails when the alpha spending is
removed or a level doubled. Fast: no Ray, no training."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from bench.findings import claims, report, sequential, stats, verdicts
from bench.findings.spec import Looks

ALPHA = stats.ALPHA
ROOT = Path(__file__).resolve().parents[1]
C = 0.005  # the main job's log offset
MARGIN = np.log(2)


def test_one_look_is_the_plain_alpha_and_obrien_fleming_spends_little_early():
    assert sequential.levels((5,)) == (ALPHA,)
    first, last = sequential.design((6, 12))
    assert first.level == pytest.approx(2 * norm.sf(norm.isf(ALPHA / 2) / np.sqrt(0.5)))
    assert not first.can_reject  # 2^-6 > 0.0056: spends nothing, its share passes on
    assert last.level == ALPHA
    three = sequential.design((10, 20, 30))
    assert [look.can_reject for look in three] == [False, True, True]  # 2^-10 > alpha(1/3)
    assert three[1].level == pytest.approx(sequential.spent(2 / 3))  # look 1 spent nothing
    # the union bound over the looks that can reject: alpha in all
    assert sum(look.level for look in three if look.can_reject) == pytest.approx(ALPHA)
    assert sequential.levels((3, 6), exact=True)[0] < 0.006  # a metric fixed by the config


def pooled(variant: str, h: int) -> np.ndarray:
    """Test bits per answer of one setting of the main job over its committed design runs
    (18 seeds: a few half-learn the probe, 10 to 40 times the rest)."""
    frames = [pd.read_csv(p) for p in sorted((ROOT / "results" / "design").glob(
        "heads_grid*/runs.csv"))]
    runs = pd.concat(frames)
    cell = runs[(runs["model.variant"] == variant) & (runs["model.n_heads"] == h)]
    return cell.sort_values("seed")["test_probe_bpc.recall"].to_numpy()


TH2, MH2 = pooled("talking-heads", 2), pooled("fixed", 2)
RATIOS = np.log(TH2 + C) - np.log(MH2 + C)  # claim 5 of the old main job: right-skewed
JITTER = 0.05


def test_the_design_runs_give_the_skewed_shape():
    assert len(TH2) == 18 and (TH2 > 0.0423).sum() == 3  # three half-learners
    assert np.mean(RATIOS) - np.median(RATIOS) > 0.2  # a long right tail


def skewed_bits(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Bits per answer drawn from the talking-heads h = 2 design seeds, jittered by 10%."""
    return rng.choice(TH2, shape) * rng.lognormal(0, 0.1, shape)


RATIO_MEDIAN = brentq(lambda m: norm.cdf((m - RATIOS) / JITTER).mean() - 0.5, -5, 5)


def skewed_ratios(rng: np.random.Generator, n: int, median: float) -> np.ndarray:
    """Per-seed log ratios shaped like the design seeds' (a smoothed bootstrap), shifted so that
    their population median is exactly `median`: the sign test's null boundary."""
    return rng.choice(RATIOS, n) + rng.normal(0, JITTER, n) - RATIO_MEDIAN + median


def cells(seeds: int, values: dict) -> pd.DataFrame:
    """A run table: for each (variant, h) cell its per-seed bits per answer."""
    return pd.DataFrame([{"model.variant": v, "model.n_heads": h, "seed": s,
                          "test_probe_bpc.recall": y[s]}
                         for (v, h), y in values.items() for s in range(seeds)])


def null_compare(rng, n):  # two exchangeable rows: the sharp null of a sign-flip difference
    return cells(n, {("th", 8): skewed_bits(rng, (n,)), ("mh", 8): skewed_bits(rng, (n,))})


def null_trend(rng, n):  # one row, exchangeable over h: no trend
    return cells(n, {("mh", h): skewed_bits(rng, (n,)) for h in (2, 4, 8)})


def null_margin(rng, n, median=MARGIN):  # the row log(2) worse in the typical seed, skewed
    base = rng.choice(MH2, n) * rng.lognormal(0, 0.1, n)
    row = np.exp(np.log(base + C) + skewed_ratios(rng, n, median)) - C
    return cells(n, {("th", 2): row, ("mh", 2): base})


def null_trend_margin(rng, n):  # y + c grows by the margin's factor 1.5 per doubling of h
    return cells(n, {("th", h): (skewed_bits(rng, (n,)) + C) * 1.5 ** np.log2(h) - C
                     for h in (2, 4, 8)})


def null_equivalent(rng, n):  # the typical seed exactly at the equivalence bound
    return null_margin(rng, n, median=0.5)


COMMON = {"text": "t", "metric": "test_probe_bpc.recall", "log_offset": C}
KINDS = {  # claim type: (the claim, runs at its null boundary)
    "compare": ({"rows": {"model.variant": "th"}, "baseline": {"model.variant": "mh"},
                 "expect": "less", "test": "sign-flip"}, null_compare),
    "trend": ({"type": "trend", "rows": {"model.variant": "mh"}, "along": "model.n_heads",
               "expect": "greater", "test": "sign-flip"}, null_trend),
    "non-inferiority": ({"rows": {"model.variant": "th"}, "baseline": {"model.variant": "mh"},
                         "expect": "less", "margin": float(MARGIN), "test": "sign"}, null_margin),
    "trend non-inferiority": ({"type": "trend", "rows": {"model.variant": "th"},
                               "along": "model.n_heads", "expect": "less",
                               "margin": float(np.log(1.5)), "test": "sign"}, null_trend_margin),
    "equivalence": ({"rows": {"model.variant": "th"}, "baseline": {"model.variant": "mh"},
                     "expect": "equivalent", "margin": 0.5, "test": "sign"}, null_equivalent),
}
REPS = 600
BOUND = ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / REPS)


def false_positives(kind: str, looks: tuple[int, ...], seed: int = 0) -> float:
    """How often `verdicts.evaluate` reproduces a claim whose null holds at its boundary."""
    raw, make = KINDS[kind]
    claim = claims.parse([{"id": "c", **COMMON, **raw}])
    design = Looks(looks=list(looks), futility=0.5)
    rng = np.random.default_rng(seed)
    hits = sum(verdicts.evaluate(claim, make(rng, looks[-1]), looks=design, describe=False)
               ["verdict"].iloc[-1] == "reproduced" for _ in range(REPS))
    return hits / REPS


@pytest.mark.parametrize("kind", list(KINDS))
def test_false_positives_at_the_null_boundary_hold_alpha_at_the_main_jobs_looks(kind):
    """The main job's looks (4, then 8 seeds; futility 0.5) and skew: the rate of false
    `reproduced` is at most alpha plus 2 Monte Carlo errors for every claim type."""
    assert false_positives(kind, (4, 8)) <= BOUND


def test_false_positives_hold_alpha_where_the_spending_matters():
    """Looks of 6, 9 and 12 seeds: an exact test reaches 1/64 at 6 and 1/512 at 9, so looks
    that each tested at the full alpha would leak; with the spending the rate holds."""
    assert false_positives("compare", (6, 9, 12)) <= BOUND


@pytest.fixture
def broken(monkeypatch):
    """The looks' levels replaced by `change(design)` (a list of levels) in the code that runs."""
    real = sequential.design

    def use(change):
        def design(looks: tuple[int, ...], exact: bool = False) -> tuple:
            out = real(looks, exact)
            return tuple(sequential.Look(look.n, look.floor, level)
                         for look, level in zip(out, change(out), strict=True))
        monkeypatch.setattr(sequential, "design", design)
    return use


def test_the_check_fails_without_alpha_spending(broken):
    """Every look at the full alpha (no spending): at 6, 9 and 12 seeds the rate is about
    0.09, above the bound the tests above assert."""
    broken(lambda design: [ALPHA] * len(design))
    assert false_positives("compare", (6, 9, 12)) > BOUND


def test_the_check_fails_when_a_level_is_doubled(broken):
    """The main job's last level doubled (0.1): the sign-flip claim's rate is about 0.09."""
    broken(lambda design: [look.level for look in design[:-1]] + [2 * design[-1].level])
    assert false_positives("compare", (4, 8)) > BOUND


def test_sign_flip_at_a_margin_rejects_far_above_alpha():
    """Why a margin claim may not use sign-flip (the schema refuses it): its null symmetric
    about the margin is not the null at the boundary of a skewed claim. With the main job's old
    claim 5 shape, its mean at the margin (log 2), 6 seeds reject about 5 times as often as
    alpha allows."""
    rng = np.random.default_rng(2)
    d = np.stack([skewed_ratios(rng, 6, MARGIN) for _ in range(3000)])
    d = d - np.mean(RATIOS) + RATIO_MEDIAN  # the mean at the margin: sign-flip's own boundary
    flip = np.mean(stats.p_values(d, "less", MARGIN, "sign-flip")[0] <= ALPHA)
    assert flip > 3 * ALPHA
    with pytest.raises(ValueError, match="needs test: sign"):
        claims.parse([{"id": "c", **COMMON, **KINDS["non-inferiority"][0],
                       "test": "sign-flip"}])


def looked_runs(effect: float, seeds: int, rng: np.random.Generator) -> pd.DataFrame:
    base = skewed_bits(rng, (seeds,))
    return cells(seeds, {("fixed", 8): base, ("th", 8): base * effect * rng.uniform(
        0.8, 1.2, seeds)})


CLAIM = {"id": "beats", **COMMON, **KINDS["compare"][0],
         "rows": {"model.variant": "th"}, "baseline": {"model.variant": "fixed"}}


def test_evaluate_tests_each_look_at_its_level_and_says_when_it_settled():
    rng = np.random.default_rng(3)
    tested = claims.parse([CLAIM, {**CLAIM, "id": "after", "expect": "greater"}])
    runs = looked_runs(0.05, 8, rng)  # twenty times fewer bits: every seed agrees
    looks = Looks(looks=[4, 8])
    first = verdicts.evaluate(tested, runs[runs["seed"] < 4], looks=looks).set_index("claim")
    # four seeds cannot reach the first level (2^-4 > 0.0056): undecided, the next waits
    assert first.loc["beats", "verdict"] == "inconclusive" and first.loc["beats", "p"] == 1 / 16
    assert "look 2 not run" in first.loc["beats", "reason"]
    assert "smallest attainable p is 0.0625" in first.loc["beats", "reason"]
    assert first.loc["after", "reason"] == "waits for beats"
    assert [c.id for c in verdicts.undecided(tested, runs[runs["seed"] < 4], None, looks)] == [
        "beats", "after"]
    done = verdicts.evaluate(tested, runs, looks=looks).set_index("claim")
    assert done.loc["beats", "verdict"] == "reproduced" and done.loc["beats", "look"] == "2 of 2"
    assert done.loc["beats", "p"] == pytest.approx(1 / 256) and done.loc["beats", "n"] == 8
    assert done.loc["beats", "level"] == ALPHA  # look 1 spent nothing
    assert done.loc["beats", "test"] == "sign-flip, log(y + 0.005)"
    assert done.loc["beats", "about"] == "mean" and done.loc["beats", "p_replicate"] == 1.0
    assert done.loc["beats", "evidence"] == "confirmatory"
    assert done.loc["beats", "seed_range"] == "0-7"
    # the next claim in the sequence is tested at the same look: the opposite, contradicted
    assert done.loc["after", "verdict"] == "contradicted" and done.loc["after", "look"] == "2 of 2"
    assert verdicts.undecided(tested, runs, None, looks) == []


def test_futility_stops_a_claim_at_an_interim_look_and_the_sequence_with_it():
    rng = np.random.default_rng(4)
    tested = claims.parse([CLAIM, {**CLAIM, "id": "after"}])
    runs = looked_runs(20.0, 4, rng)  # the wrong way in every seed
    table = verdicts.evaluate(tested, runs, looks=Looks(looks=[4, 8])).set_index("claim")
    assert table.loc["beats", "verdict"] == "inconclusive"
    assert "stopped for futility at look 1 of 2" in table.loc["beats", "reason"]
    assert table.loc["after", "reason"] == "sequence stopped at beats"
    assert verdicts.undecided(tested, runs, None, Looks(looks=[4, 8])) == []
    # without a futility bound the claim waits for the next look
    waits = verdicts.undecided(tested, runs, None, Looks(looks=[4, 8], futility=None))
    assert [c.id for c in waits] == ["beats", "after"]


def test_design_seeds_make_every_finding_exploratory():
    rng = np.random.default_rng(5)
    tested = claims.parse([CLAIM, {**CLAIM, "id": "after", "expect": "greater"}])
    runs = looked_runs(0.05, 8, rng)
    table = verdicts.evaluate(tested, runs, design=[6, 7, 30]).set_index("claim")
    assert table.loc["beats", "verdict"] == "holds (exploratory)"
    assert table.loc["after", "verdict"] == "fails (exploratory)"
    assert (table["evidence"] == "exploratory").all()
    assert "seeds 6-7 are design data" in table.loc["beats", "reason"]
    unnamed = verdicts.evaluate(tested, runs, design=None)
    assert unnamed["verdict"].iloc[0] == "holds (exploratory)"
    assert "does not name the seeds" in unnamed["reason"].iloc[0]
    fresh = verdicts.evaluate(tested, runs.assign(seed=runs["seed"] + 100), design=[0, 1])
    assert fresh["verdict"].tolist() == ["reproduced", "contradicted"]


def test_p_replicate_resamples_seeds_and_the_half_learning_rate_is_counted():
    """p_replicate: the share of seed resamples the same test decides the same way (one seed of
    eight on the wrong side: the sign test's count falls to 6 in many resamples); the
    unlearned column counts seeds above a tenth of the no-recall bits."""
    rng = np.random.default_rng(6)
    base = rng.uniform(0.002, 0.01, 8)
    row = base * rng.uniform(0.5, 1.5, 8)
    row[3] = 0.2  # half-learned: 14 to 30 times its pair
    runs = cells(8, {("th", 2): row, ("mh", 2): base}).assign(
        **{"dataset.no_recall.recall": 0.423})
    claim = claims.parse([{"id": "ni", **COMMON, **KINDS["non-inferiority"][0]}])
    row = verdicts.evaluate(claim, runs).iloc[0]
    assert row["verdict"] == "reproduced" and row["p"] == pytest.approx(9 / 256)
    assert 0.4 < row["p_replicate"] < 0.9
    assert row["p_replicate"] == verdicts.evaluate(claim, runs).iloc[0]["p_replicate"]
    assert row["unlearned"] == "th: 1/8; mh: 0/8"


def test_committed_design_runs_are_exploratory():
    """The main job's design runs (seeds 0-5 and 20-25), re-analysed with the claims written
    from them: every finding exploratory, none reproduced."""
    for folder in sorted((ROOT / "results" / "design").glob("heads_grid*")):
        table = pd.read_csv(folder / "findings.csv")
        assert (table["evidence"] == "exploratory").all(), folder
        assert not table["verdict"].isin(["reproduced", "contradicted"]).any(), folder
        assert report.read_per_seed(folder / "runs.csv")["seed"].max() <= 25
