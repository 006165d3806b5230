"""Claims as data: verdicts computed from synthetic run tables (reproduced, contradicted,
inconclusive with what it could detect or why, not tested by construction; each claim type, a
claim of several parts as one hypothesis, derived metrics), and grid files whose claims the
schema or the dry run refuses (exit 2, naming the claim) or prints in the plan. Fast: no Ray, no
training, no MLflow."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import permutation_test, quantile_test

from bench import run
from bench.experiment import claims
from bench.findings.decision import verdicts
from bench.findings.reading.samples import derive
from bench.findings.statistics import bounds, sequential
from tests.helpers import ROOT, write_grid

SEEDS = tuple(range(6))
# final test bpc per (variant, h) and seed: talking-heads better by about 0.1 everywhere;
# multi-head worse as h doubles (+0.05 per doubling), talking-heads flat
NOISE = np.array([0.01, -0.02, 0.015, 0.0, -0.01, 0.02])


def heads_runs() -> pd.DataFrame:
    rows = []
    for h in (2, 4, 8):
        for s in SEEDS:
            mh = 2.0 + 0.05 * np.log2(h) + NOISE[s] + 0.003 * h * s
            rows.append({"model.variant": "fixed", "model.n_heads": h, "seed": s,
                         "final_test_bpc": mh, "mean_span": 30.0, "model.span": 64})
            rows.append({"model.variant": "talking-heads", "model.n_heads": h, "seed": s,
                         "final_test_bpc": 1.95 + NOISE[s] + 0.004 * (s - 2.5) * np.log2(h),
                         "mean_span": 30.0, "model.span": 64})
    return pd.DataFrame(rows)


def claim(**kw) -> claims.Claim:
    return claims.parse([{"id": "c", "text": "a claim", "metric": "final_test_bpc", **kw}])[0]


TH = {"model.variant": "talking-heads"}
MH = {"model.variant": "fixed"}


def by_claim(table: pd.DataFrame) -> dict[str, pd.Series]:
    return {r["claim"]: r for _, r in table.iterrows()}


def sel(runs: pd.DataFrame, variant: str, h: int) -> np.ndarray:
    return runs[(runs["model.variant"] == variant) & (runs["model.n_heads"] == h)
                ].sort_values("seed")["final_test_bpc"].to_numpy()


def test_a_claim_at_each_value_is_one_hypothesis_every_part_must_show():
    """Each part is the exact test of its own per-seed values (sign-flip: scipy's permutation
    test); the claim is reproduced when every part's p is at most the level (intersection-union:
    no correction), and its summary row's p is the largest."""
    runs = heads_runs()
    table = verdicts.verdict_table([claim(rows=TH, baseline=MH, at_each="model.n_heads",
                                     expect="less", test="sign-flip")], runs)
    assert list(table.columns[:7]) == ["claim", "about", "null", "effect", "ci_low", "ci_high",
                                       "p"]
    rows = by_claim(table)
    ps = []
    for h in (2, 4, 8):
        d = sel(runs, "talking-heads", h) - sel(runs, "fixed", h)
        ref = permutation_test((d,), np.mean, permutation_type="samples",
                               n_resamples=np.inf, alternative="less")
        r = rows[f"c [n_heads={h}]"]
        assert r["effect"] == pytest.approx(d.mean()) and r["about"] == "an effect"
        assert r["null"] == "no effect (exchangeable)"
        assert r["p"] == pytest.approx(ref.pvalue) and r["n"] == 6
        assert r["ci_low"] == -np.inf and r["ci_high"] < 0  # the bound matching the test
        ps.append(ref.pvalue)
    assert all(r["verdict"] == "reproduced" for r in rows.values())
    assert rows["c"]["reason"] == "3 of 3 parts shown at the level"
    assert np.isnan(rows["c"]["effect"]) and rows["c"]["p"] == pytest.approx(max(ps))
    assert rows["c"]["look"] == "1 of 1" and rows["c"]["test"] == "sign-flip"


def test_claims_are_a_fixed_sequence():
    """The claims are tested in the written order (no Holm across claims); the first claim not
    reproduced stops the sequence, and every later claim is not tested. At 6 seeds each
    contrary needs all 6 against it (1/64), and each claim 6 of 6 within what the contraries up
    to its own leave."""
    runs = heads_runs()
    trend = claim(id="trend", type="trend", rows=MH, along="model.n_heads", expect="greater")
    h2 = claim(id="h2", rows={**TH, "model.n_heads": 2}, baseline=MH, expect="less")
    never = claim(id="never", rows={**TH, "model.n_heads": 2}, baseline=MH, expect="greater")
    table = by_claim(verdicts.verdict_table([trend, never, trend.model_copy(
        update={"id": "after"})], runs))
    assert table["trend"]["p"] == pytest.approx(1 / 64)
    assert table["trend"]["about"] == "the median" and table["trend"]["rule"] == "6 of 6"
    assert table["trend"]["level"] == pytest.approx(1 / 64)
    assert table["trend"]["verdict"] == "reproduced"
    assert table["never"]["verdict"] == "contradicted"
    assert table["after"]["verdict"] == "not tested"
    assert table["after"]["reason"] == "sequence stopped at never"
    both = by_claim(verdicts.verdict_table([trend, h2], runs))
    assert both["trend"]["verdict"] == both["h2"]["verdict"] == "reproduced"
    # the same claims in another order: the one that fails first hides the others
    first = by_claim(verdicts.verdict_table([never, trend, h2], runs))
    assert first["never"]["verdict"] == "contradicted"
    assert first["trend"]["verdict"] == first["h2"]["verdict"] == "not tested"


def test_trend_is_the_per_seed_slope():
    runs = heads_runs()
    worse = claim(type="trend", rows=MH, along="model.n_heads", expect="greater")
    mean = claim(id="mean", type="trend", rows=MH, along="model.n_heads", expect="greater",
                 test="sign-flip")
    flat = claim(id="flat", type="trend", rows=TH, along="model.n_heads", expect="equivalent",
                 margin=0.02)
    table = by_claim(verdicts.verdict_table([worse, mean, flat], runs))
    slopes = np.array([np.polyfit(np.log2([2, 4, 8]), [sel(runs, "fixed", h)[s]
                                                       for h in (2, 4, 8)], 1)[0] for s in SEEDS])
    assert table["c"]["effect"] == pytest.approx(np.median(slopes))
    assert table["c"]["p"] == pytest.approx(quantile_test(slopes, alternative="greater").pvalue)
    assert table["mean"]["effect"] == pytest.approx(slopes.mean())
    assert table["c"]["verdict"] == table["mean"]["verdict"] == "reproduced"
    assert abs(table["flat"]["effect"]) < 0.02 and table["flat"]["verdict"] == "reproduced"
    # a trend in the difference: the talking-heads advantage grows with h
    gap = claim(id="gap", type="trend", rows=TH, baseline=MH, along="model.n_heads",
                expect="less", test="sign-flip")
    th = np.array([np.polyfit(np.log2([2, 4, 8]), [sel(runs, "talking-heads", h)[s]
                                                   for h in (2, 4, 8)], 1)[0] for s in SEEDS])
    assert by_claim(verdicts.verdict_table([gap], runs))["gap"]["effect"] == pytest.approx(
        np.mean(th - slopes))


def test_contradicted_when_the_data_say_the_opposite_and_inconclusive_when_they_cannot_say():
    """Shown the other way (each part at alpha / parts) is `contradicted`, and one such part
    contradicts a claim tested at each value; an interval that admits both is `inconclusive`,
    with what its seeds could detect and the seeds that would detect what they saw."""
    runs = heads_runs()
    wrong_way = claim(id="wrong_way", rows=TH, baseline=MH, at_each="model.n_heads",
                      expect="greater")
    two = runs[runs["model.n_heads"] < 8]  # 2 parts: 6 against in each fits alpha with the claim
    table = by_claim(verdicts.verdict_table([wrong_way], two))
    assert table["wrong_way"]["verdict"] == "contradicted"
    assert table["wrong_way [n_heads=2]"]["p"] == 1.0
    assert table["wrong_way [n_heads=2]"]["p_opposite"] == pytest.approx(1 / 64)
    assert table["wrong_way [n_heads=2]"]["level_opposite"] == pytest.approx(1 / 64)  # a / 2
    # at 3 parts, 6 against in each (3/64) leaves the claim no p it can reach: it cannot be
    # contradicted with 6 seeds, and is inconclusive
    assert by_claim(verdicts.verdict_table([wrong_way], runs))["wrong_way"]["verdict"] == \
        "inconclusive"
    too_tight = claim(id="too_tight", type="trend", rows=TH, along="model.n_heads",
                      expect="equivalent", margin=0.001)
    tight = by_claim(verdicts.verdict_table([too_tight], runs))["too_tight"]
    assert tight["verdict"] == "inconclusive" and tight["ci_low"] < -0.001 < 0.001 < \
        tight["ci_high"]  # the 90% interval straddles the margin: neither way
    assert 0.5 < tight["detectable"] < 1 and tight["seeds_needed"] is None or \
        tight["seeds_needed"] > 6
    # below 1.5 at h=2, clearly above it at h=8: one part contradicts the claim "at each h"
    mixed = pd.DataFrame([{"model.variant": "fixed", "model.n_heads": h, "seed": s,
                           "final_test_bpc": (1.0 if h == 2 else 2.0) + 0.01 * s}
                          for h in (2, 8) for s in SEEDS])
    table = by_claim(verdicts.verdict_table([claim(id="mixed", rows=MH, at_each="model.n_heads",
                                              expect="less", margin=1.5)], mixed))
    assert table["mixed [n_heads=2]"]["verdict"] == "inconclusive"  # shown alone, not the claim
    assert "shown at this value alone" in table["mixed [n_heads=2]"]["reason"]
    assert table["mixed [n_heads=8]"]["verdict"] == "contradicted"
    assert table["mixed"]["verdict"] == "contradicted"
    assert table["mixed"]["reason"] == "1 of 2 parts shown at the level, 1 contradicted"


def test_inconclusive_with_the_reason():
    runs = heads_runs()
    failed = (runs["seed"] == 2) & (runs["model.n_heads"] == 4) & (
        runs["model.variant"] == "fixed")
    missing = runs[failed].assign(**{"status": "FAILED",
                                     "tags.attnbench.failure": "Diverged: loss is nan"})
    each = claim(rows=TH, baseline=MH, at_each="model.n_heads", expect="less")
    trend = claim(id="trend", type="trend", rows=MH, along="model.n_heads", expect="greater")
    table = by_claim(verdicts.verdict_table([each], runs[~failed], missing))
    assert table["c [n_heads=4]"]["verdict"] == "inconclusive"
    assert "seed 2: failed (Diverged: loss is nan)" in table["c [n_heads=4]"]["reason"]
    assert table["c [n_heads=2]"]["verdict"] == "inconclusive"  # the claim is "at each h"
    assert table["c"]["verdict"] == "inconclusive"
    lone = by_claim(verdicts.verdict_table([trend], runs[~failed], missing))["trend"]
    assert lone["verdict"] == "inconclusive" and np.isnan(lone["p"])
    one_h = by_claim(verdicts.verdict_table([trend], runs[runs["model.n_heads"] == 4]))  # --set
    assert "at least 2 values of model.n_heads" in one_h["trend"]["reason"]
    # too few seeds: the numbers are shown, the verdict waits
    two = by_claim(verdicts.verdict_table([each], runs[runs["seed"] < 2]))
    assert two["c [n_heads=2]"]["verdict"] == "inconclusive"
    assert "2 paired seeds" in two["c [n_heads=2]"]["reason"]
    three = by_claim(verdicts.verdict_table([each], runs[runs["seed"] < 3]))["c [n_heads=2]"]
    assert "with 3 seeds no attainable p of its test is within this look's level" in three[
        "reason"]
    # a metric the runs lack (head spans of a run without result.json data)
    spread = claim(id="spread", rows=MH, at_each="model.n_heads", metric="head_span_spread",
                   expect="greater", margin=4)
    assert by_claim(verdicts.verdict_table([spread], runs))["spread"]["verdict"] == "inconclusive"
    counted = claim(id="counted", rows=TH, baseline=MH, at_each="model.n_heads",
                    metric="flops_counted", expect="less")  # a metric no run logged
    assert by_claim(verdicts.verdict_table([counted], runs))["counted"]["verdict"] == "inconclusive"


def test_a_value_the_log_or_a_division_cannot_take_is_named_never_dropped():
    """A per-seed value that is not finite (a derived metric's division by 0) or below a log
    offset's reach is not dropped silently (which left fewer seeds than planned): the part is
    inconclusive, naming the seeds and their values."""
    runs = heads_runs()
    gap = claim(rows=TH, baseline=MH, at_each="model.n_heads", expect="less", log_offset=0.1)
    runs.loc[(runs["seed"] == 4) & (runs["model.n_heads"] == 2), "final_test_bpc"] = -0.5
    part = by_claim(verdicts.verdict_table([gap], runs))["c [n_heads=2]"]
    assert part["verdict"] == "inconclusive"
    assert "log(final_test_bpc + 0.1) is undefined at seeds 4 (-0.5)" in part["reason"]
    runs = heads_runs()
    runs.loc[runs["seed"] == 1, "mean_span"] = np.inf
    share = claim(rows=TH, baseline=MH, at_each="model.n_heads", metric="span_fraction",
                  expect="less")
    part = by_claim(verdicts.verdict_table([share], runs))["c [n_heads=2]"]
    assert "span_fraction is not finite at seeds 1 (inf)" in part["reason"]


def test_head_span_and_span_fraction_metrics():
    runs = pd.DataFrame([{"model.variant": "adaptive", "seed": s, "model.span": 256,
                          "mean_span": 40.0 + s, "final_test_bpc": 1.5, "floor_bpc": 1.4,
                          "dataset.planted": "[16, 12, 128]",
                          "head_spans": [[10.0, 12.0 + s, 200.0], [11.0, 9.0, 13.0]]}
                         for s in SEEDS])
    d = derive(runs)
    assert d["covering_head_fraction"].tolist() == pytest.approx([1 / 6] * 6)  # 200 >= 128
    assert derive(runs.assign(**{"dataset.planted": "[]"}))["covering_head_fraction"].isna().all()
    assert d["head_span_spread"].tolist()[:3] == pytest.approx([200 / 11.5, 200 / 12, 200 / 12])
    assert d["long_head_fraction"].tolist() == pytest.approx([1 / 6] * 6)
    assert d["layer_span_ratio"].tolist() == pytest.approx([(222 + s) / 3 / 11 for s in SEEDS])
    assert d["max_head_span"].tolist() == [200.0] * 6
    assert d["span_fraction"].tolist() == pytest.approx([(40 + s) / 256 for s in SEEDS])
    assert d["gap_to_floor"].tolist() == pytest.approx([0.1] * 6)
    tested = [claim(rows={"model.variant": "adaptive"}, metric="head_span_spread",
                    expect="greater", margin=4),
              claim(id="few", rows={"model.variant": "adaptive"}, metric="long_head_fraction",
                    expect="less", margin=0.5)]
    table = by_claim(verdicts.verdict_table(tested, runs))
    assert table["c"]["verdict"] == "reproduced"
    few = table["few"]  # a count, the same in every seed: every seed satisfies the claim
    assert few["verdict"] == "reproduced" and few["p"] == pytest.approx(1 / 64)
    params = claim(id="p", rows={"model.variant": "adaptive"}, metric="params", expect="less",
                   margin=1e6)  # fixed by the config: exact
    exact = by_claim(verdicts.verdict_table([params], runs.assign(params=5e5)))["p"]
    assert exact["verdict"] == "reproduced" and exact["p"] == 0.0


def spans_runs() -> pd.DataFrame:
    """fixed and adaptive (R = 96) at S = 64 and 256, as the runs' layers describe them."""
    rows = []
    for S in (64, 256):
        for s in SEEDS:
            for v, learned in (("fixed", "false"), ("adaptive", "true")):
                flops = 1e5 * (S if v == "fixed" or S <= 96 else 100 + s)
                rows.append({"model.variant": v, "model.span": S, "seed": s,
                             "layer.learned_spans": learned, "layer.h": 4,
                             "layer.options.ramp": 96.0 if learned == "true" else np.nan,
                             "flops_mean": flops, "final_test_bpc": 1.5 + 0.01 * s,
                             "dataset.planted": "[16, 64, 128]",
                             "head_spans": [[100.0 + s, 150.0], [200.0, 250.0 + s]]})
    return pd.DataFrame(rows)


def test_tests_the_setup_decides_are_not_tested():
    """At S <= R every learned span is capped at S: fewer FLOPs cannot hold there and is not
    tested (the claim holds or not at the other values); a spread above S / R cannot hold
    anywhere."""
    runs = spans_runs()
    fewer = claim(id="fewer", rows={"model.variant": "adaptive"},
                  baseline={"model.variant": "fixed"}, at_each="model.span",
                  metric="flops_mean", expect="less")
    spread = claim(id="spread", rows={"model.variant": "adaptive", "model.span": 256},
                   metric="head_span_spread", expect="greater", margin=4)
    table = by_claim(verdicts.verdict_table([fewer, spread], runs))
    assert table["fewer [span=64]"]["verdict"] == "not tested"
    assert "cannot hold by construction" in table["fewer [span=64]"]["reason"]
    assert table["fewer [span=256]"]["verdict"] == "reproduced"
    assert table["fewer"]["verdict"] == "reproduced"
    assert "not tested at span=64" in table["fewer"]["reason"]
    assert table["spread"]["verdict"] == "not tested" and "[1, 2.67]" in \
        table["spread"]["reason"]


@pytest.mark.parametrize("R, decided", [(96, False), (128, True), (300, True)])
def test_few_long_heads_is_decided_where_every_span_reaches_half_of_S(R, decided):
    """Spans lie in [R, S]: with R >= S / 2 every head reaches half the longest one's, so
    "fewer than half of the heads are long" cannot hold; below, the data decides. A layer-order
    claim (first layer's mean span below the last's) is left to the data unless R >= S."""
    few = claim(id="few", rows={"model.variant": "adaptive"}, metric="long_head_fraction",
                expect="less", margin=0.5)
    why = bounds.decided(few, 0.5, bounds.Spans(256, R, 8), None)
    assert (why is not None) == decided
    if decided:
        assert why.startswith("cannot hold by construction: long_head_fraction lies in [1, 1]")
    order = claim(id="order", rows={"model.variant": "adaptive"}, metric="layer_span_ratio",
                  expect="less", margin=1.0)
    assert (bounds.decided(order, 1.0, bounds.Spans(256, R, 8), None) is not None) == (R >= 256)


def test_a_claim_about_planted_structure_on_real_text_is_inconclusive():
    runs = spans_runs()
    far = claim(id="far", rows={"model.variant": "adaptive", "model.span": 256},
                metric="max_head_span", expect="greater", margin="planted")
    table = by_claim(verdicts.verdict_table([far], runs))
    assert table["far"]["verdict"] == "reproduced"  # 256 > 128, the farthest planted distance
    real = by_claim(verdicts.verdict_table([far], runs.assign(**{"dataset.planted": "[]"})))["far"]
    assert real["verdict"] == "inconclusive" and "plants no structure" in real["reason"]


def test_a_precision_claim_whose_rows_ran_one_precision_is_inconclusive():
    """train.amp=true fell back to fp32 (no native bf16): the rows are the same computation."""
    rows = [{"model.variant": "fixed", "train.amp": amp, "seed": s, "precision": "fp32",
             "final_test_bpc": 1.5 + 0.01 * s} for amp in ("true", "false") for s in SEEDS]
    same = claim(id="same", rows={"train.amp": True}, baseline={"train.amp": False},
                 expect="equivalent", margin=0.02)
    table = by_claim(verdicts.verdict_table([same], pd.DataFrame(rows)))
    assert table["same"]["verdict"] == "inconclusive"
    assert "both ran fp32" in table["same"]["reason"]


# --- grid files: bad claims exit 2 naming the claim; the dry run lists the claims ------------

GRID = {"model.variant": ["fixed", "talking-heads", "gbma"], "model.n_heads": [2, 4]}
GOOD = {"id": "th_beats_mh", "text": "talking-heads beats multi-head at each h",
        "rows": TH, "baseline": MH, "at_each": "model.n_heads", "metric": "final_test_bpc",
        "expect": "less"}
BAD = {
    "unknown metric": {"metric": "dev_bcp"},
    "the split that chose the checkpoint": {"metric": "final_dev_bpc"},
    "a probe on the dev split": {"metric": "probe_bpc.recall"},
    "key not in the grid": {"rows": {"model.span": 32}},
    "value not in the grid": {"rows": {"model.variant": "logits-only"}},
    "varied key left loose": {"at_each": []},
    "at_each key also pinned": {"at_each": "model.variant"},
    "equivalent without margin": {"expect": "equivalent"},
    "unknown expectation": {"expect": "smaller"},
    "trend without along": {"type": "trend"},
    "along on a compare": {"along": "model.n_heads"},
    "baseline equal to rows": {"baseline": TH},
    "excluded trial": {"rows": {"model.variant": "gbma"}},
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_claim_exits_2_naming_it(case, tmp_path, capsys):
    exclude = [{"model.variant": "gbma", "model.n_heads": [4]}] if case == "excluded trial" \
        else []
    path = write_grid(tmp_path, "claimed", grid=GRID, exclude=exclude,
                      claims=[GOOD, {**GOOD, "id": "bad_one", **BAD[case]}])
    assert run.main([str(path), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "bad_one" in err and "th_beats_mh" not in err, err
    assert not (tmp_path / "r").exists()


def test_duplicate_claim_ids_are_refused(tmp_path, capsys):
    path = write_grid(tmp_path, "dup", grid=GRID, claims=[GOOD, GOOD])
    assert run.main([str(path), "--dry-run"]) == 2
    assert "duplicate claim id" in capsys.readouterr().err


def test_dry_run_prints_the_plan_the_claims_and_what_each_look_can_decide(tmp_path, capsys):
    trend = {"id": "mh_worse", "text": "multi-head gets worse as h grows", "type": "trend",
             "rows": MH, "along": "model.n_heads", "metric": "final_test_bpc",
             "expect": "greater"}
    path = write_grid(tmp_path, "claimed", grid=GRID, claims=[GOOD, trend],
                      seeds={"looks": [4, 8], "futility": 0.5}, design_seeds=[0, 1, 2])
    assert run.main([str(path), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "24 trials" in out and "2 claims" in out
    lines = {line.split("|")[1].strip(): line for line in out.splitlines()
             if line.startswith("| ") and ("th_beats" in line or "mh_worse" in line)
             and "variant=" in line}
    assert "variant=talking-heads vs variant=fixed at each n_heads" in lines["th_beats_mh"]
    assert "median difference < 0" in lines["th_beats_mh"]
    assert "median slope > 0" in lines["mh_worse"] and "along n_heads (log2)" in lines["mh_worse"]
    looks = [line for line in out.splitlines() if line.startswith("| mh_worse ")
             and " of 2 " in line]
    cells = [[c.strip() for c in line.split("|")[2:-1]] for line in looks]
    # the second of two claims: alpha less what the first's contrary spends (8 of 8 in each of
    # its 2 parts: 2/256) and its own (a tenth of alpha: 8 of 8, 1/256)
    assert cells[0] == ["1 of 2", "4", "0.0383", "none", "0", "0", "0.005", "none", "0",
                        "futility only"]
    assert cells[1] == ["2 of 2", "8", "0.0383", "7 of 8", "0.0352", "0.0352", "0.005",
                        "8 of 8", "0.00391", "reject"]
    rates = [[c.strip() for c in line.split("|")[2:-1]] for line in out.splitlines()
             if line.startswith("| mh_worse ") and " of 2 " not in line and "sign" in line]
    # worst errors exactly 9/256 and 1/256, power 0.50 and 0.81 at q = 0.8, 0.9, and 0.43
    # to contradict at q = 0.1 (every seed against it)
    assert rates == [["sign", "0.0352", "0.00391", "0.503", "0.813", "0.43", "-"]]
    assert "seeds 0-7: exploratory (seeds 0-2 are design data" in out
    assert run.main([str(path), "--dry-run", "--seed-start", "100"]) == 0
    assert "seeds 100-107: confirmatory" in capsys.readouterr().out


@pytest.mark.parametrize("seeds, n", [([0, 1, 2], 3), ({"looks": [2, 4]}, 4)])
def test_looks_that_can_never_reject_are_refused_naming_the_seeds_that_could(seeds, n,
                                                                            tmp_path, capsys):
    path = write_grid(tmp_path, "weak", grid=GRID, claims=[GOOD], seeds=seeds)
    assert run.main([str(path), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert (f"claims.0 (th_beats_mh): no look can reject: with at most {n} seeds" in err
            and "the smallest number of seeds that could is 5" in err), err
    exact = {**GOOD, "metric": "params"}  # fixed by the config: p is 0 or 1 at any n
    path = write_grid(tmp_path, "exact", grid=GRID, claims=[exact], seeds=seeds)
    assert run.main([str(path), "--dry-run"]) == 0


def test_a_look_that_never_decides_is_said_to_be(tmp_path, capsys):
    """Looks 3, 6 without futility: 3 seeds can neither reject nor stop, which the dry run
    says (its `can` and the rates' looks that never decide)."""
    path = write_grid(tmp_path, "idle", grid=GRID, claims=[GOOD],
                      seeds={"looks": [3, 6], "futility": None})
    assert run.main([str(path), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    look = [line for line in out.splitlines() if line.startswith("| th_beats_mh ")
            and "1 of 2" in line]
    assert look and look[0].rstrip(" |").endswith("nothing")
    rates = [line for line in out.splitlines() if line.startswith("| th_beats_mh ")
             and "sign" in line]
    assert rates and rates[0].split("|")[-2].strip() == "1"


@pytest.mark.parametrize("bad, says", [
    ({"test": "t"}, "test t is not offered"),
    ({"test": "sign-flip", "margin": 0.1}, "test sign-flip with margin 0.1"),
    ({"test": "sign-flip", "baseline": None, "margin": 0}, "test sign-flip without a baseline"),
    ({"type": "trend", "along": "model.n_heads", "at_each": [], "rows": MH, "baseline": None,
      "test": "sign-flip"}, "sign-flip on the trend of one row needs model.n_heads evenly "
                            "spaced on its log2 scale"),
    ({"metric": "long_head_fraction", "test": "t"}, "counts included")])
def test_a_test_that_cannot_be_valid_for_its_claim_is_refused(bad, says, tmp_path, capsys):
    grid = {**GRID, "model.n_heads": [2, 4, 16]}  # log2: 1, 2, 4, not evenly spaced
    path = write_grid(tmp_path, "invalid", grid=grid, claims=[{**GOOD, **bad}],
                      seeds=[0, 1, 2, 3, 4])
    assert run.main([str(path), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert says in err and "th_beats_mh" in err, err
    assert not (tmp_path / "r").exists()


def test_design_seeds_must_be_named_with_claims_and_be_seeds(tmp_path, capsys):
    path = write_grid(tmp_path, "unnamed", grid=GRID, claims=[GOOD], design_seeds=None)
    assert run.main([str(path), "--dry-run"]) == 2
    assert "design_seeds: required with claims" in capsys.readouterr().err
    path = write_grid(tmp_path, "words", grid=GRID, claims=[GOOD], design_seeds=["zero"])
    assert run.main([str(path), "--dry-run"]) == 2
    assert "design_seeds.0" in capsys.readouterr().err


# the shipped grids with claims, each ablations/NAME.yaml
SHIPPED = ["heads_grid", "span_limit", "adaptive_vs_dynamic", "projections",
           "span_enwik8_floor.span_enwik8", "span_enwik8_floor.span_enwik8_restated",
           "span_enwik8_floor.span_enwik8_adamw", "span_enwik8_floor"]


GRID_FILES = sorted(p.relative_to(Path(__file__).resolve().parents[1]).as_posix()
                    for folder in ("ablations", "examples")
                    for p in (Path(__file__).resolve().parents[1] / folder).glob("*.yaml")
                    if yaml.safe_load(p.read_text()).get("claims"))


@pytest.mark.parametrize("path", GRID_FILES)
def test_every_grid_with_claims_errs_at_most_alpha_read_either_way(path):
    """Every grid file with claims: the family's chance of any wrong verdict at its worst over
    every dependence, a false claim reproduced or a true one contradicted and, reading
    contradicted as the opposite effect, a claim at its boundary decided either way, at most
    0.05 (`sequential.worst`, exact for the sign test); the dry run's line says both."""
    from bench.experiment.grid import plan_of
    from bench.experiment.open import open_grid
    from bench.sweep import feasible

    grid = open_grid(ROOT / path, imports=False)  # a plugin registered here would outlive the test
    contraries, budgets = feasible.family(grid.claims, grid.grid, grid.seeds)
    bound = sequential.worst(budgets, contraries, plan_of(grid.seeds)[0])
    assert bound.defined <= bound.directional <= 0.05


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_grids_designs_hold_alpha_and_can_decide(name):
    """Every shipped grid with claims: each claim's last look can reject, its worst-case errors
    either way are at most alpha, and so is the whole family's, at its worst over every
    dependence between the claims."""
    from bench.experiment.open import open_grid
    from bench.sweep import feasible

    grid = open_grid(ROOT / "ablations" / f"{name}.yaml")
    assert len(grid.claims) >= 2 and grid.design_seeds is not None
    table = feasible.by_look(grid.claims, grid.grid, grid.seeds)
    feasible.check_looks(table)
    assert table.groupby("claim").tail(1)["can"].eq("reject").all()
    rates = feasible.rates(grid.claims, grid.grid, grid.seeds)
    errors = rates.filter(like="worst error").dropna()
    assert not errors.empty and (errors <= 0.05).all().all(), rates
    contraries, budgets = feasible.family(grid.claims, grid.grid, grid.seeds)
    bound = sequential.worst(budgets, contraries, tuple(grid.seeds.looks))
    line = feasible.worst_line(grid.claims, grid.grid, grid.seeds)
    assert f"at most {bound.defined:.4g}" in line and f"and {bound.directional:.4g}" in line
    raw = yaml.safe_load((ROOT / "ablations" / f"{name}.yaml").read_text())
    assert all(c["text"] for c in raw["claims"])


def test_claims_that_imply_one_another_are_named(capsys):
    """span_limit's fewer-FLOPs and mean-span claims read one quantity where they share rows
    (#FLOPS is affine in the mean span): the dry run says so."""

    assert run.main([str(ROOT / "ablations" / "span_limit.yaml"), "--dry-run"]) == 0
    assert ("warning: claims adaptive_fewer_flops and mean_span_well_below_S read one quantity"
            in capsys.readouterr().err)


def test_a_span_statistic_without_its_floor_is_refused(tmp_path, capsys):
    """The real-text grids before the floor was declared read raw spans (their files say so:
    superseded); running one as it ran exits 2, naming the claim and the floors it may
    declare."""

    raw = yaml.safe_load((ROOT / "ablations" / "span_enwik8_floor.span_enwik8_adamw.yaml")
                         .read_text())
    assert raw.pop("status") == "superseded" and raw.pop("superseded_by") and raw.pop("why")
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(raw))
    assert run.main([str(tmp_path / "g.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "claims.3 (layer_spans_flat): metric layer_span_ratio says which heads are long" in err
    assert "`floor: R`" in err and "`floor: 0`" in err


def test_pinning_an_axis_keeps_the_claims_valid(tmp_path, capsys):
    """--set on a grid key a claim takes values of narrows the sweep; the claim stays (and
    will be inconclusive), it does not make the grid invalid."""
    path = write_grid(tmp_path, "claimed", grid=GRID, claims=[GOOD])
    assert run.main([str(path), "--dry-run", "--set", "model.variant=fixed", "--seeds",
                     "0,1,2,3,4",
                     "--results-dir", str(tmp_path / "r")]) == 0
    assert "th_beats_mh" in capsys.readouterr().out


@pytest.mark.parametrize("metric", ["mean_span", "tokens_per_s", "peak_rss_mb"])
def test_final_summaries_are_claimable_by_their_names(metric):
    """A run logs these as final_<name>; the report reads them back as <name>, so a claim names
    them that way, and an unknown name is still refused."""
    raw = {"id": "c", "text": "t", "rows": {"model.variant": "adaptive"}, "metric": metric,
           "expect": "less", "margin": 1e9}
    axes = {"model.variant": ["fixed", "adaptive"]}
    claims.check(claims.parse([raw]), axes, lambda values: False)
    with pytest.raises(ValueError, match="unknown metric"):
        claims.check(claims.parse([{**raw, "metric": metric + "_typo"}]), axes, lambda v: False)


def test_dry_run_refuses_claims_the_setup_decides_or_the_corpus_does_not_score(tmp_path,
                                                                              capsys):
    """Before anything runs: a claim none of whose tests the data could decide (a span spread
    above S / R), and one naming a probe metric the grid's corpus does not score."""
    grid = {"model.variant": ["fixed", "adaptive"]}
    base = {"model": {"span": 256, "attn": {"ramp": 96}}}
    spread = {"id": "spread", "text": "spans differ by 4x", "rows": {"model.variant": "adaptive"},
              "metric": "head_span_spread", "expect": "greater", "margin": 4, "floor": 0}
    path = write_grid(tmp_path, "bound", grid=grid, base={**yaml.safe_load(
        write_grid(tmp_path, "x").read_text())["base"], **base}, claims=[spread])
    assert run.main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "claims.0 (spread): cannot hold by construction: head_span_spread lies in [1, 2.67]" \
        in err
    probe = {**GOOD, "metric": "test_probe_bpc.recall"}
    path = write_grid(tmp_path, "noprobe", grid=GRID, claims=[probe])
    assert run.main([str(path), "--dry-run"]) == 2
    assert "metric 'test_probe_bpc.recall': the runs' corpus scores no probe 'recall' (it " \
        "scores: copy, rest)" in capsys.readouterr().err
    recall = write_grid(tmp_path, "probed", grid=GRID, claims=[probe], base={
        "preset": "tiny", "model": {"d_model": 32, "n_layers": 1, "d_ff": 64, "span": 64},
        "data": {"n_chars": 60000, "p_copy": 0.0, "recall": {"rate": 0.5}},
        "train": {"block": 32, "batch_size": 4, "steps": 2}}, seeds=[0, 1, 2, 3, 4])
    assert run.main([str(recall), "--dry-run"]) == 0


def test_a_restated_claim_reusing_an_id_whose_seeds_ran_is_refused(tmp_path, capsys):
    """The main job's headline claim with another offset, under its id: its confirmation seeds
    ran (results/heads_grid/seeds100/, unverified), so the dry run exits 2 asking for a new id;
    under a new id the same grid is accepted."""

    raw = yaml.safe_load((ROOT / "ablations" / "heads_grid.yaml").read_text())
    raw["claims"][0]["log_offset"] = 0.01
    path = tmp_path / "restated.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert run.main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "claims.0 (th_beats_mh_at_8): a claim with this id, tested otherwise, has " \
        "run on confirmation seeds (results/heads_grid/seeds100)" in err
    raw["claims"][0]["id"] = "th_beats_mh_at_8_offset_0.01"
    path.write_text(yaml.safe_dump(raw))
    assert run.main([str(path), "--dry-run"]) == 0


def test_dry_run_reads_the_seeds_an_observed_effect_needs(capsys):
    """The layer grid registered from span_enwik8_floor's 6 of 8 seeds (q = 0.75): --power-at
    prints the power of its looks (14, 28) at that q, the walk of the exact design; a q outside
    (0, 1) exits 2 before anything runs."""
    from bench.experiment.open import open_grid
    from bench.findings.statistics import sequential

    path = ROOT / "ablations" / "span_enwik8_floor.span_enwik8_layers.yaml"
    assert run.main([str(path), "--dry-run", "--power-at", "0.75"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("| lower_layer_shorter_above_R | sign "))
    grid = open_grid(path)
    walk = sequential.operating(tuple(grid.seeds.looks), sequential.Contrary("sign"), 0.75,
                                grid.seeds.futility).ends["reproduced"]
    assert f"{walk:.3g}" in row.split("|")[5] and walk >= 0.8
    assert run.main([str(path), "--dry-run", "--power-at", "1.5"]) == 2
    assert "--power-at 1.5: a chance q in (0, 1) expected" in capsys.readouterr().err
