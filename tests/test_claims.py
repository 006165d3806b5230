"""Claims as data: verdicts computed from synthetic run tables (reproduced, contradicted,
inconclusive with what it could detect or why, not tested by construction; each claim type, both
Holm corrections, derived metrics), and grid files whose claims the schema or the dry run
refuses (exit 2, naming the claim) or prints in the plan. Fast: no Ray, no training, no MLflow."""

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import linregress, ttest_1samp, ttest_rel

from bench import run
from bench.findings import bounds, claims, stats, verdicts
from tests.test_grid import write_grid

SEEDS = (0, 1, 2)
# final dev bpc per (variant, h) and seed: talking-heads better by about 0.1 everywhere;
# multi-head worse as h doubles (+0.05 per doubling), talking-heads flat
NOISE = np.array([0.01, -0.02, 0.015])


def heads_runs() -> pd.DataFrame:
    rows = []
    for h in (2, 4, 8):
        for s in SEEDS:
            mh = 2.0 + 0.05 * np.log2(h) + NOISE[s] + 0.003 * h * s
            rows.append({"model.variant": "fixed", "model.n_heads": h, "seed": s,
                         "final_test_bpc": mh, "mean_span": 30.0, "model.span": 64})
            rows.append({"model.variant": "talking-heads", "model.n_heads": h, "seed": s,
                         "final_test_bpc": 1.95 + NOISE[s] + 0.004 * (s - 1) * np.log2(h),
                         "mean_span": 30.0, "model.span": 64})
    return pd.DataFrame(rows)


def claim(**kw) -> claims.Claim:
    return claims.parse([{"id": "c", "text": "a claim", "metric": "final_test_bpc", **kw}])[0]


TH = {"model.variant": "talking-heads"}
MH = {"model.variant": "fixed"}


def by_claim(table: pd.DataFrame) -> dict[str, pd.Series]:
    return {r["claim"]: r for _, r in table.iterrows()}


def test_compare_at_each_value_matches_a_paired_test():
    runs = heads_runs()
    table = verdicts.evaluate([claim(rows=TH, baseline=MH, at_each="model.n_heads",
                                   expect="less")], runs)
    assert list(table.columns[:6]) == ["claim", "effect", "ci_low", "ci_high", "p", "p_adj"]
    rows = by_claim(table)
    ps = []

    def sel(variant: str, h: int) -> np.ndarray:
        return runs[(runs["model.variant"] == variant) & (runs["model.n_heads"] == h)
                    ].sort_values("seed")["final_test_bpc"].to_numpy()

    for h in (2, 4, 8):
        ref = ttest_rel(sel("talking-heads", h), sel("fixed", h), alternative="less")
        r = rows[f"c [n_heads={h}]"]
        assert r["effect"] == pytest.approx(np.mean(sel("talking-heads", h) - sel("fixed", h)))
        assert r["p"] == pytest.approx(ref.pvalue) and r["n"] == 3
        bound = ref.confidence_interval(0.95)  # the one-sided bound a one-sided test matches
        assert r["ci_low"] == -np.inf and r["ci_high"] == pytest.approx(bound.high)
        ps.append(ref.pvalue)
    # one claim's tests are Holm-corrected within it, and each test's label carries that
    assert [rows[f"c [n_heads={h}]"]["p_adj"] for h in (2, 4, 8)] == pytest.approx(
        list(stats.holm(ps)))
    assert all(r["verdict"] == "reproduced" for r in rows.values())
    assert rows["c"]["reason"] == "3 of 3 tests reproduced" and np.isnan(rows["c"]["effect"])
    assert rows["c"]["p"] == pytest.approx(max(ps))
    assert rows["c"]["p_adj"] == pytest.approx(max(stats.holm(ps)))
    assert rows["c"]["look"] == "1 of 1" and rows["c"]["test"] == "t"


def test_claims_are_a_fixed_sequence_at_the_full_alpha():
    """Each claim is tested at alpha in the written order (no Holm across claims); the first
    claim not reproduced stops the sequence, and every later claim is not tested."""
    runs = heads_runs()
    trend = claim(id="trend", type="trend", rows=MH, along="model.n_heads", expect="greater")
    h2 = claim(id="h2", rows={**TH, "model.n_heads": 2}, baseline=MH, expect="less")
    never = claim(id="never", rows={**TH, "model.n_heads": 2}, baseline=MH, expect="greater")
    table = by_claim(verdicts.evaluate([trend, h2, never, trend.model_copy(
        update={"id": "after"})], runs))
    for cid in ("trend", "h2"):
        assert table[cid]["p_adj"] == pytest.approx(table[cid]["p"])  # alone in its claim
        assert table[cid]["level"] == 0.05 and table[cid]["verdict"] == "reproduced"
    assert table["never"]["verdict"] == "contradicted"
    assert table["after"]["verdict"] == "not tested"
    assert table["after"]["reason"] == "sequence stopped at never"
    # the same claims in another order: the one that fails first hides the others
    first = by_claim(verdicts.evaluate([never, trend, h2], runs))
    assert first["trend"]["verdict"] == first["h2"]["verdict"] == "not tested"


def test_trend_is_the_mean_per_seed_slope():
    runs = heads_runs()
    worse = claim(type="trend", rows=MH, along="model.n_heads", expect="greater")
    flat = claim(id="flat", type="trend", rows=TH, along="model.n_heads", expect="equivalent",
                 margin=0.02)
    table = by_claim(verdicts.evaluate([worse, flat], runs))
    mh = runs[runs["model.variant"] == "fixed"]
    slopes = [linregress(np.log2(g["model.n_heads"]), g["final_test_bpc"]).slope
              for _, g in mh.groupby("seed")]
    assert table["c"]["effect"] == pytest.approx(np.mean(slopes))
    assert table["c"]["p"] == pytest.approx(
        ttest_1samp(slopes, 0, alternative="greater").pvalue)
    assert table["c"]["verdict"] == "reproduced"
    assert abs(table["flat"]["effect"]) < 0.01 and table["flat"]["verdict"] == "reproduced"
    # a trend in the difference: the talking-heads advantage grows with h
    gap = claim(id="gap", type="trend", rows=TH, baseline=MH, along="model.n_heads",
                expect="less")
    assert by_claim(verdicts.evaluate([gap], runs))["gap"]["effect"] == pytest.approx(
        table["flat"]["effect"] - table["c"]["effect"])


def test_contradicted_when_the_data_say_the_opposite_and_inconclusive_when_they_cannot_say():
    """Significant the other way (Holm within the claim) is `contradicted`, and one such test
    contradicts a claim tested at each value; an interval that admits both is `inconclusive`,
    with the effect its seeds could detect and the seeds that would detect the observed one."""
    runs = heads_runs()
    wrong_way = claim(id="wrong_way", rows=TH, baseline=MH, at_each="model.n_heads",
                      expect="greater")
    table = by_claim(verdicts.evaluate([wrong_way], runs))
    assert table["wrong_way"]["verdict"] == "contradicted"
    assert table["wrong_way [n_heads=2]"]["p"] > 0.9
    assert table["wrong_way [n_heads=2]"]["p_opposite"] == pytest.approx(ttest_rel(
        runs[(runs["model.variant"] == "talking-heads") & (runs["model.n_heads"] == 2)][
            "final_test_bpc"], runs[(runs["model.variant"] == "fixed") & (runs["model.n_heads"]
                                                                          == 2)]
        ["final_test_bpc"], alternative="less").pvalue)
    too_tight = claim(id="too_tight", type="trend", rows=TH, along="model.n_heads",
                      expect="equivalent", margin=0.001)
    tight = by_claim(verdicts.evaluate([too_tight], runs))["too_tight"]
    assert tight["verdict"] == "inconclusive" and tight["ci_low"] < -0.001 < 0.001 < \
        tight["ci_high"]  # the 90% interval straddles the margin: neither way
    assert tight["detectable"] > 0.001 and tight["seeds_needed"] > 3
    # below 1.5 at h=2, clearly above it at h=8: one test contradicts the claim "at each h"
    mixed = pd.DataFrame([{"model.variant": "fixed", "model.n_heads": h, "seed": s,
                           "final_test_bpc": (1.0 if h == 2 else 2.0) + 0.01 * s}
                          for h in (2, 8) for s in SEEDS])
    table = by_claim(verdicts.evaluate([claim(id="mixed", rows=MH, at_each="model.n_heads",
                                              expect="less", margin=1.5)], mixed))
    assert table["mixed [n_heads=2]"]["verdict"] == "reproduced"
    assert table["mixed [n_heads=8]"]["verdict"] == "contradicted"
    assert table["mixed"]["verdict"] == "contradicted"
    assert table["mixed"]["reason"] == "1 of 2 tests reproduced, 1 contradicted"


def test_inconclusive_with_the_reason():
    runs = heads_runs()
    failed = (runs["seed"] == 2) & (runs["model.n_heads"] == 4) & (
        runs["model.variant"] == "fixed")
    missing = runs[failed].assign(**{"status": "FAILED",
                                     "tags.attnbench.failure": "Diverged: loss is nan"})
    each = claim(rows=TH, baseline=MH, at_each="model.n_heads", expect="less")
    trend = claim(id="trend", type="trend", rows=MH, along="model.n_heads", expect="greater")
    table = by_claim(verdicts.evaluate([each], runs[~failed], missing))
    assert table["c [n_heads=4]"]["verdict"] == "inconclusive"
    assert "seed 2: failed (Diverged: loss is nan)" in table["c [n_heads=4]"]["reason"]
    assert table["c [n_heads=2]"]["verdict"] == "reproduced"
    assert table["c"]["verdict"] == "inconclusive"  # the claim is "at each h"
    lone = by_claim(verdicts.evaluate([trend], runs[~failed], missing))["trend"]
    assert lone["verdict"] == "inconclusive" and np.isnan(lone["p"])
    one_h = by_claim(verdicts.evaluate([trend], runs[runs["model.n_heads"] == 4]))  # --set
    assert "at least 2 values of model.n_heads" in one_h["trend"]["reason"]
    # too few seeds: the numbers are shown, the verdict waits
    two = by_claim(verdicts.evaluate([each], runs[runs["seed"] < 2]))
    assert two["c [n_heads=2]"]["verdict"] == "inconclusive"
    assert "2 paired seeds" in two["c [n_heads=2]"]["reason"]
    assert np.isfinite(two["c [n_heads=2]"]["ci_high"])
    # a metric the runs lack (head spans of a run without result.json data)
    spread = claim(id="spread", rows=MH, at_each="model.n_heads", metric="head_span_spread",
                   expect="greater", margin=4)
    assert by_claim(verdicts.evaluate([spread], runs))["spread"]["verdict"] == "inconclusive"
    counted = claim(id="counted", rows=TH, baseline=MH, at_each="model.n_heads",
                    metric="flops_counted", expect="less")  # a metric no run logged
    assert by_claim(verdicts.evaluate([counted], runs))["counted"]["verdict"] == "inconclusive"


def test_head_span_and_span_fraction_metrics():
    runs = pd.DataFrame([{"model.variant": "adaptive", "seed": s, "model.span": 256,
                          "mean_span": 40.0 + s, "final_test_bpc": 1.5, "floor_bpc": 1.4,
                          "head_spans": [[10.0, 12.0 + s, 200.0], [11.0, 9.0, 13.0]]}
                         for s in SEEDS])
    d = verdicts.derive(runs)
    assert d["head_span_spread"].tolist() == pytest.approx([200 / 11.5, 200 / 12, 200 / 12])
    assert d["long_head_fraction"].tolist() == pytest.approx([1 / 6] * 3)
    assert d["layer_span_ratio"].tolist() == pytest.approx([(222 + s) / 3 / 11 for s in SEEDS])
    assert d["max_head_span"].tolist() == [200.0] * 3
    assert d["span_fraction"].tolist() == pytest.approx([40 / 256, 41 / 256, 42 / 256])
    assert d["gap_to_floor"].tolist() == pytest.approx([0.1] * 3)
    tested = [claim(rows={"model.variant": "adaptive"}, metric="head_span_spread",
                    expect="greater", margin=4),
              claim(id="few", rows={"model.variant": "adaptive"}, metric="long_head_fraction",
                    expect="less", margin=0.5)]
    table = by_claim(verdicts.evaluate(tested, runs))
    assert table["c"]["verdict"] == "reproduced"
    few = table["few"]  # identical in every seed: a capped metric with no spread to test
    assert few["verdict"] == "inconclusive" and "the seeds tie at 0.1667" in few["reason"]
    params = claim(id="p", rows={"model.variant": "adaptive"}, metric="params", expect="less",
                   margin=1e6)  # fixed by the config: exact
    exact = by_claim(verdicts.evaluate([params], runs.assign(params=5e5)))["p"]
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
    table = by_claim(verdicts.evaluate([fewer, spread], runs))
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
    table = by_claim(verdicts.evaluate([far], runs))
    assert table["far"]["verdict"] == "reproduced"  # 256 > 128, the farthest planted distance
    real = by_claim(verdicts.evaluate([far], runs.assign(**{"dataset.planted": "[]"})))["far"]
    assert real["verdict"] == "inconclusive" and "plants no structure" in real["reason"]


def test_a_precision_claim_whose_rows_ran_one_precision_is_inconclusive():
    """train.amp=true fell back to fp32 (no native bf16): the rows are the same computation."""
    rows = [{"model.variant": "fixed", "train.amp": amp, "seed": s, "precision": "fp32",
             "final_test_bpc": 1.5 + 0.01 * s} for amp in ("true", "false") for s in SEEDS]
    same = claim(id="same", rows={"train.amp": True}, baseline={"train.amp": False},
                 expect="equivalent", margin=0.02)
    table = by_claim(verdicts.evaluate([same], pd.DataFrame(rows)))
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


def test_dry_run_prints_the_plan_and_the_claims(tmp_path, capsys):
    trend = {"id": "mh_worse", "text": "multi-head gets worse as h grows", "type": "trend",
             "rows": MH, "along": "model.n_heads", "metric": "final_test_bpc",
             "expect": "greater"}
    path = write_grid(tmp_path, "claimed", grid=GRID, claims=[GOOD, trend])
    assert run.main([str(path), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "6 trials" in out and "2 claims" in out
    lines = {line.split("|")[1].strip(): line for line in out.splitlines()
             if line.startswith("| ") and ("th_beats" in line or "mh_worse" in line)}
    assert "variant=talking-heads vs variant=fixed at each n_heads" in lines["th_beats_mh"]
    assert "difference < 0" in lines["th_beats_mh"] and "slope > 0" in lines["mh_worse"]
    assert "along n_heads (log2)" in lines["mh_worse"]


@pytest.mark.parametrize("name", ["heads_grid", "span_limit", "adaptive_vs_dynamic",
                                  "projections"])
def test_shipped_paper_grids_declare_valid_claims_with_three_seeds(name):
    from bench.sweep.grid import load_grid
    from tests.test_grid import ROOT

    grid = load_grid(ROOT / "ablations" / f"{name}.yaml")
    first = grid.seeds.looks[0] if hasattr(grid.seeds, "looks") else len(grid.seeds)
    assert first >= 3 and len(grid.claims) >= 2
    raw = yaml.safe_load((ROOT / "ablations" / f"{name}.yaml").read_text())
    assert all(c["text"] for c in raw["claims"])


def test_pinning_an_axis_keeps_the_claims_valid(tmp_path, capsys):
    """--set on a grid key a claim takes values of narrows the sweep; the claim stays (and
    will be inconclusive), it does not make the grid invalid."""
    path = write_grid(tmp_path, "claimed", grid=GRID, claims=[GOOD])
    assert run.main([str(path), "--dry-run", "--set", "model.variant=fixed", "--seeds", "0,1",
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
              "metric": "head_span_spread", "expect": "greater", "margin": 4}
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
        "train": {"block": 32, "batch_size": 4, "steps": 2}})
    assert run.main([str(recall), "--dry-run"]) == 0
