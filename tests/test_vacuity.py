"""Vacuous seeds (`bench.findings.decision.vacuity`): a seed of a claim on a probe's bits per answer
whose outcome could not tell a variant that learned the probe from one that learned nothing lands on
neither side, decided per seed from the claim's own geometry, with the floors from the grid. The
outside review's cases (issue 78 item 1), each a built runs table through the findings' own path
(`verdicts.verdict_table`, `judge`): two arms at 10-46% of the floor, a half-vacuous reference, the
geometric case, a zero-floor part; the pilot and the findings agreeing on every shipped grid; the
level of both directions with vacuous seeds present; the dry run's rule. Fast: no Ray, no training,
no MLflow."""

import itertools
from math import comb
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import binom

from bench import pilot, run
from bench.config import ConfigError
from bench.experiment import claims, floors
from bench.experiment.grid import Looks
from bench.experiment.open import open_grid
from bench.findings.decision import vacuity, verdicts
from bench.findings.provenance.judge import judge
from bench.findings.reading import samples
from bench.findings.reading.perseed import settings
from bench.findings.statistics import stats
from bench.sweep.feasible import check_floors

ROOT = Path(__file__).resolve().parents[1]
MAIN = ROOT / "ablations" / "heads_grid.yaml"
DATA = open_grid(MAIN, imports=False).base.data  # the main job's recall probe
COSTS = floors.same(DATA)
F = COSTS({})["recall"].floor  # 0.423 bits per answer without recall
BAR = vacuity.bar(COSTS({})["recall"])  # 0.391: below it a mean is not the floor's noise
C = 0.005  # the main job's log offset
TH, MH = {"model.variant": "talking-heads"}, {"model.variant": "fixed"}
METRIC = "test_probe_bpc.recall"


def claim(**kw) -> claims.Claim:
    """talking-heads against multi-head on the recall probe's bits per answer (log offset C)."""
    return claims.parse([{"id": "c", "text": "t", "rows": TH, "baseline": MH, "metric": METRIC,
                          "expect": "less", "log_offset": C, **kw}])[0]


def runs(th: np.ndarray, mh: np.ndarray) -> pd.DataFrame:
    """Each seed's bits per answer of talking-heads and multi-head."""
    return pd.DataFrame([{"model.variant": v, "seed": s, METRIC: float(x)}
                         for s in range(len(th)) for v, x in (("talking-heads", th[s]),
                                                              ("fixed", mh[s]))])


def row(c: claims.Claim, table: pd.DataFrame, costs: floors.Floors = COSTS) -> pd.Series:
    return verdicts.verdict_table([c], table, reading=verdicts.Reading(costs, False)).iloc[0]


def test_the_floor_and_its_bar_come_from_the_grid_in_closed_form():
    """The main job's no-recall floor, 0.423 bits per answer, and the bar 3 standard errors
    below it over the test split's 2951 episodes (its 100,000 symbols at 30.5 per unit, 90%
    of them episodes), from the grid's data alone: what each run recorded."""
    cost = COSTS({})["recall"]
    assert cost.floor == pytest.approx(0.42256, abs=1e-5)
    assert cost.episodes == pytest.approx(100_000 * 0.9 / (0.1 * 8 + 0.9 * 33))
    assert BAR == pytest.approx(cost.floor - 3 * cost.spread / np.sqrt(cost.episodes))
    assert BAR == pytest.approx(0.3914, abs=1e-4)
    recorded = pd.read_csv(ROOT / "results" / "heads_grid" / "seeds600" / "runs.csv")
    assert (recorded["dataset.no_recall.recall"] == cost.floor).all()


@pytest.mark.parametrize("test", ["sign-flip", "sign"])
def test_two_arms_that_learned_part_of_the_probe_are_compared(test):
    """The review's first case: both arms at 11-46% of the no-recall floor (data7's multi-head
    at h = 8 paid 0.043-0.193), talking-heads with fewer bits in 8 of 8 seeds: reproduced at
    p 1/256, no seed vacuous (each arm far below the bar), where the 10% rule said
    "unanswerable: no arm learned the probe"."""
    mh = F * np.array([0.11, 0.46, 0.2, 0.3, 0.15, 0.4, 0.25, 0.35])
    got = row(claim(test=test), runs(0.7 * mh, mh))
    assert got["verdict"] == "reproduced" and got["p"] == pytest.approx(1 / 256)
    assert "vacuous" not in got["reason"] and "unanswerable" not in got["reason"]
    assert got["unlearned"] == "talking-heads: 0/8; fixed: 0/8; vacuous 0/8"


def test_a_half_vacuous_reference_counts_only_its_informative_seeds_with_no_cliff():
    """The review's second case: not worse than multi-head within log 2, talking-heads learned
    in every seed, multi-head at the floor in the first k seeds: those k seeds are vacuous
    (a variant that learned nothing would pass there) and count on neither side, so p is the
    sign test's of 8 - k seeds of 8 for every k; reproduced up to k = 1 ("7 of 8"), then
    inconclusive step by step, never a cliff; at k = 4 (the 10% rule: "learned", reproduced 8
    of 8) the reason says 4 of 8 seeds are vacuous and why."""
    c = claim(margin=0.693)
    for k in range(9):
        mh = np.where(np.arange(8) < k, F * (1.0 + 0.01 * np.arange(8)), 0.02)
        got = row(c, runs(np.full(8, 0.01), mh))
        assert got["p"] == pytest.approx(binom.sf(8 - k - 1, 8, 0.5)), k
        assert got["verdict"] == ("reproduced" if k <= 1 else "inconclusive"), k
        said = ("" if k == 0 else "unanswerable: every seed is vacuous: " if k == 8 else
                f"{k} of 8 seeds vacuous: ")
        assert got["reason"].startswith(said + "the baseline (fixed) + 0.693" if k else ""), k
        assert got["unlearned"].endswith(f"fixed: {k}/8; vacuous {k}/8")


def test_the_geometry_of_a_non_inferiority_claim_decides_its_vacuous_seeds():
    """The review's third case: a reference at 56% of the floor with a margin of log 2 lets a
    talking-heads that learned nothing pass (2 x its bits is above the floor): every seed
    vacuous, inconclusive. At 40% of the floor it cannot: talking-heads that learned is
    reproduced (the 10% rule called both unanswerable). The seeds flip exactly at the bound
    the rule prints: the baseline above (F + c) / 2 - c."""
    c = claim(margin=0.693)
    nothing = row(c, runs(np.full(8, F), np.full(8, 0.56 * F)))
    assert nothing["verdict"] == "inconclusive"
    assert nothing["reason"].startswith("unanswerable: every seed is vacuous: the baseline "
                                        "(fixed) + 0.693 on the log(y + 0.005) scale reaches "
                                        "the no-recall floor 0.423 (the baseline above 0.209)")
    learned = row(c, runs(np.full(8, 0.01), np.full(8, 0.4 * F)))
    assert learned["verdict"] == "reproduced" and "vacuous" not in learned["reason"]
    bound = (F + C) * np.exp(-0.693) - C
    arms = samples.Arms(np.zeros((1, 2)), np.array([[bound * (1 - 1e-9), bound * (1 + 1e-9)]]),
                        None)
    costs = vacuity.Costs("recall", [COSTS({})["recall"]], [COSTS({})["recall"]],
                          (["talking-heads"], ["fixed"]))
    assert list(vacuity.decide(c, 0.693, arms, costs).vacuous) == [False, True]


def test_a_trend_of_one_row_is_vacuous_where_its_first_point_lets_the_rest_learn_nothing():
    """Not worse as h grows (slope below log 1.5 per doubling): the reference is h = 2, the
    rest could have learned nothing. Where talking-heads at h = 2 is above (F + c) / 2.25 - c
    (0.185), h = 4 and 8 at the floor still give a slope below 0.405: those seeds are vacuous;
    one seed of 6 at 0.2 bits at h = 2 leaves 5 of 6, inconclusive."""
    c = claims.parse([{"id": "c", "text": "t", "type": "trend", "rows": TH,
                       "along": "model.n_heads", "metric": METRIC, "expect": "less",
                       "margin": 0.405, "log_offset": C}])[0]
    table = pd.DataFrame([{"model.variant": "talking-heads", "model.n_heads": h, "seed": s,
                           METRIC: 0.2 if (s == 0 and h == 2) else 0.01 * (1 + s)}
                          for s in range(6) for h in (2, 4, 8)])
    got = row(c, table)
    assert got["reason"].startswith("1 of 6 seeds vacuous: talking-heads n_heads=4 and "
                                    "talking-heads n_heads=8 at the no-recall floor 0.423 would "
                                    "still give a slope below 0.405")
    assert "(talking-heads n_heads=2 above 0.185)" in got["reason"]
    assert got["verdict"] == "inconclusive" and got["p"] == pytest.approx(7 / 64)
    assert (F + C) / np.exp(2 * 0.405) - C == pytest.approx(0.1852, abs=1e-4)


def test_neither_arm_learning_is_unanswerable_and_one_arm_learning_is_answered():
    """Better claims (margin 0): a seed is vacuous where both arms answer at the floor within
    noise (at or above the bar); the headline's shape, one arm learning, is answered."""
    noise = 1 + 0.02 * np.arange(8)
    both = row(claim(test="sign-flip"), runs(BAR * noise, 1.01 * BAR * noise))
    assert both["verdict"] == "inconclusive" and both["reason"].startswith(
        "unanswerable: every seed is vacuous: every arm at the no-recall floor 0.423 within "
        "noise: at or above 0.391")
    one = row(claim(test="sign-flip"), runs(0.01 * noise, F * noise))
    assert one["verdict"] == "reproduced" and "vacuous" not in one["reason"]
    below = row(claim(test="sign-flip"), runs(np.full(8, 0.99 * BAR), F * noise))
    assert below["verdict"] == "reproduced"  # just below the bar: measurably under the floor


def zero_floor_grid(tmp_path: Path) -> Path:
    """The main job's grid, renamed, with its headline claimed on the repeated answers' bits."""
    raw = yaml.safe_load(MAIN.read_text())
    raw["name"] = "repeats"
    raw["claims"] = [{**raw["claims"][0], "id": "th_beats_mh_on_repeats",
                      "metric": "test_probe_bpc.recall_repeat"}]
    path = tmp_path / "repeats.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_claim_on_a_part_whose_floor_is_0_is_refused_and_the_findings_agree(tmp_path,
                                                                               capsys):
    """recall_repeat's floor without recall is 0 (a repeated answer is copied): nothing to
    learn without recall. bench.run (its dry run too) and bench.pilot exit 2 before anything
    runs, naming the claim and the metric; the findings on such runs say every seed is
    vacuous, the pilot's refusal and the findings' inconclusive on the same grounds."""
    path = zero_floor_grid(tmp_path)
    said = ("claims.0 (th_beats_mh_on_repeats): metric test_probe_bpc.recall_repeat: the "
            "no-recall floor of recall_repeat is 0")
    assert run.main([str(path), "--dry-run"]) == 2
    assert said in capsys.readouterr().err
    assert pilot.main([str(path), "--results-dir", str(tmp_path / "r")]) == 2
    assert said in capsys.readouterr().err and not (tmp_path / "r").exists()
    grid = open_grid(path, imports=False)
    table = pd.DataFrame([{"model.variant": v, "model.n_heads": h, "seed": 600 + s,
                           "test_probe_bpc.recall_repeat": 0.01 + 0.001 * s}
                          for v in ("fixed", "talking-heads") for h in (2, 4, 8)
                          for s in range(4)])
    found = judge(grid, table, pd.DataFrame(), None).table.iloc[0]
    assert found["verdict"] == "inconclusive" and found["reason"].startswith(
        "unanswerable: every seed is vacuous: the no-recall floor of recall_repeat is 0")
    with pytest.raises(ConfigError, match="the no-recall floor of recall_repeat is 0"):
        check_floors(grid)  # the pilot's check, before it trains


SHIPPED = [p for p in sorted((ROOT / "ablations").glob("*.yaml"))
           if any(vacuity.target(c.metric) for c in open_grid(p, imports=False).claims)]


def regimes(grid, seeds: list[int], draw: int) -> pd.DataFrame:
    """A per-seed table of the grid's settings on `seeds`: each setting and seed at the floor,
    half-learned or learned, drawn (seeded) with chances that vary by draw."""
    rng = np.random.default_rng(draw)
    chance = [(0.6, 0.2, 0.2), (0.2, 0.3, 0.5), (0.95, 0.05, 0.0)][draw % 3]
    rows = []
    for cell in settings(grid):
        for s in seeds:
            kind = rng.choice(3, p=chance)
            bits = [F * rng.uniform(0.97, 1.2), F * rng.uniform(0.3, 0.6),
                    rng.uniform(0.001, 0.02)][kind]
            rows.append({**cell, "seed": s, METRIC: bits})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_the_pilot_and_the_findings_agree_on_every_shipped_grid(path):
    """Each shipped grid with claims on a probe, each claim alone, on per-seed tables of its
    first look's seeds drawn from three mixes of floor, half-learned and learned runs: the
    claims the pilot names unanswerable (`pilot.unanswerable`) are exactly those whose findings
    (`judge`, the floors from the grid) say "unanswerable"; and both outcomes occur."""
    grid = open_grid(path, imports=False)
    costs = check_floors(grid)
    seeds = list(range(grid.seeds.start, grid.seeds.start + grid.seeds.looks[0]))
    seen = set()
    for draw in range(3):
        table = regimes(grid, seeds, draw)
        for c in grid.claims:
            alone = grid.model_copy(update={"claims": [c]})
            named = {line.split(":")[0].split(" [")[0]
                     for line in pilot.unanswerable(alone, table, costs)[0]}
            found = judge(alone, table, pd.DataFrame(), None).table
            says = {c.id} if found["reason"].fillna("").str.startswith("unanswerable").any() \
                else set()
            assert named == says, (path.name, c.id, draw)
            seen.add(bool(says))
    assert seen == {True, False}


def boundary_rates(c: claims.Claim, vacuous: int, n: int) -> tuple[dict, pd.Series]:
    """Every count of claimed seeds among the n - `vacuous` informative ones, each informative
    seed on the claimed side with chance 1/2 (both directions' boundary), the `vacuous` seeds'
    reference at the floor: the exact chance of each verdict, and one row."""
    out: dict[str, float] = {}
    m = n - vacuous
    for k in range(m + 1):
        mh = np.concatenate([F * np.ones(vacuous), np.full(m, 0.05)])
        th = np.concatenate([np.full(vacuous, 0.01), np.full(k, 0.01), np.full(m - k, 0.2)])
        got = row(c, runs(th, mh))
        out[got["verdict"]] = out.get(got["verdict"], 0.0) + comb(m, k) / 2 ** m
    return out, got


def test_the_sign_tests_level_holds_both_ways_with_vacuous_seeds_present():
    """A non-inferiority claim on 12 seeds, 2 of them vacuous: at the boundary (each
    informative seed either side with chance 1/2) it is reproduced with chance P(10 of 10), the
    vacuous seeds counting against it, and contradicted with chance at most its contrary's
    level, the vacuous seeds counting against the contrary too: each at most its level."""
    c = claim(margin=0.693)
    rates, last = boundary_rates(c, 2, 12)
    assert last["rule"] == "10 of 12" and "2 of 12 seeds vacuous" in last["reason"]
    assert rates.get("reproduced", 0.0) == pytest.approx(binom.sf(9, 10, 0.5))
    assert rates.get("reproduced", 0.0) <= last["level"]
    need = next(k for k in range(13) if binom.sf(k - 1, 12, 0.5) <= last["level_opposite"])
    assert rates.get("contradicted", 0.0) == pytest.approx(binom.sf(need - 1, 10, 0.5))
    assert rates.get("contradicted", 0.0) <= last["level_opposite"]


def test_the_sign_flip_tests_level_holds_both_ways_under_its_sharp_null_with_vacuous_seeds():
    """A sign-flip claim (margin 0) on 8 seeds, 3 with both arms at the floor: under the sharp
    null the arms swap within a seed with chance 1/2, every one of the 2^8 swaps through the
    verdict code. The rule is symmetric in the arms, so those 3 stay vacuous, their values 0
    (no side), and each direction's rate is at most its level; a seed's p is the exact test's
    with them at 0."""
    pairs = [(F * 1.01, F * 1.08), (F * 1.15, F * 1.02), (F * 1.05, F * 1.1),
             (0.01, 0.3), (0.02, 0.05), (0.004, 0.2), (0.1, 0.12), (0.03, 0.002)]
    c = claim(test="sign-flip")
    rates: dict[str, float] = {}
    for swap in itertools.product((False, True), repeat=8):
        th, mh = zip(*[(b, a) if s else (a, b) for (a, b), s in zip(pairs, swap, strict=True)],
                     strict=True)
        got = row(c, runs(np.array(th), np.array(mh)))
        rates[got["verdict"]] = rates.get(got["verdict"], 0.0) + 2.0 ** -8
        if not any(swap):
            first = got
    assert "3 of 8 seeds vacuous" in first["reason"]
    d = [0.0] * 3 + [np.log((a + C) / (b + C)) for a, b in pairs[3:]]
    assert first["p"] == pytest.approx(float(stats.tail(np.array(d), 0.0, "less", "sign-flip")))
    assert rates.get("reproduced", 0.0) <= first["level"] + 1e-12
    assert rates.get("contradicted", 0.0) <= first["level_opposite"] + 1e-12


def test_an_equivalences_vacuous_seeds_count_against_it_and_against_its_contrary():
    """An equivalence (within log 2 of multi-head) where multi-head pays 2.5 times the floor in
    3 of 8 seeds (worse than a model without recall): there talking-heads anywhere from 0 bits
    to the floor is beyond the margin, so those seeds are vacuous, and sit on the margin for the
    claim (not inside) and inside it for the contrary (not beyond). Multi-head at the floor is
    not vacuous for an equivalence: talking-heads there could be inside or not."""
    c = claim(expect="equivalent", margin=0.693)
    mh = np.where(np.arange(8) < 3, 2.5 * F, np.where(np.arange(8) < 5, F, 0.05))
    th = np.where(np.arange(8) < 5, F, 0.5)
    got = row(c, runs(th, mh))
    d = np.log((th + C) / (mh + C))
    assert (np.abs(d[:3]) >= 0.693).all()  # each beyond the margin as measured
    d[:3] = 0.0
    assert got["reason"].startswith("3 of 8 seeds vacuous: talking-heads anywhere from 0 bits "
                                    "to the no-recall floor 0.423 would land all inside or all "
                                    "outside the margin")
    assert got["p_opposite"] == pytest.approx(float(stats.outside(d, 0.693)))
    assert got["p"] == pytest.approx(float(np.maximum(*(stats.tail(
        np.where(np.arange(8) < 3, 0.693, np.log((th + C) / (mh + C))), m, side, "sign")
        for m, side in ((-0.693, "greater"), (0.693, "less"))))))


def test_the_findings_read_the_floor_from_the_grid_not_from_runs_csv():
    """A runs.csv without its recorded floors gives the same findings: the floors are the
    grid's, in closed form."""
    folder = ROOT / "results" / "heads_grid" / "seeds600"
    grid = open_grid(folder / "grid.yaml", imports=False)
    kept = pd.read_csv(folder / "runs.csv")
    dropped = kept.drop(columns=[c for c in kept if c.startswith("dataset.no_recall")])
    a, b = (judge(grid, t, pd.DataFrame(), None).table for t in (kept, dropped))
    assert a["unlearned"].notna().sum() == 5
    pd.testing.assert_frame_equal(a, b)


def test_the_dry_run_prints_each_claims_vacuity_rule_with_its_numbers(capsys):
    assert run.main([str(MAIN), "--dry-run"]) == 0
    out = capsys.readouterr().out.split("Vacuous seeds")[1]
    assert "th_beats_mh_at_8: a seed is vacuous where every arm it reads answers at the " \
        "no-recall floor 0.423 within noise: at or above 0.391" in out
    assert "th_not_worse_as_h_grows: a seed is vacuous where talking-heads n_heads=4 and " \
        "talking-heads n_heads=8 at the no-recall floor 0.423 would still give a slope below " \
        "0.405 on the log(y + 0.005) scale, i.e. talking-heads n_heads=2 above 0.185" in out
    assert "th_not_worse_than_mh_at_4: a seed is vacuous where the baseline (fixed " \
        "n_heads=4) + 0.693 on the log(y + 0.005) scale reaches the no-recall floor 0.423, " \
        "i.e. the baseline above 0.209" in out


def test_looks_keep_vacuous_seeds_on_neither_side_at_each_look():
    """At an interim look every seed vacuous: neither direction leans (p 1 both ways), so the
    claim stops for futility, inconclusive, its reason saying why."""
    got = verdicts.verdict_table([claim(margin=0.693)], runs(np.full(8, 0.01), np.full(8, F)),
                                 looks=Looks(looks=[4, 8]),
                                 reading=verdicts.Reading(COSTS, False)).iloc[0]
    assert got["verdict"] == "inconclusive" and got["look"] == "1 of 2"
    assert got["reason"].startswith("unanswerable: every seed is vacuous")
