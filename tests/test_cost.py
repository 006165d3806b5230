"""What a variant costs beside what it buys (issue 81): the cost table is a pure function of
cost.csv (exact ratios from a given file, never a timing taken here), each kind of cost claim is
decided by its stated rule (a time from its repetitions, a fixed cost by construction, learned
FLOPs per seed), the family's error bound stays within alpha with cost claims in it, a running
sweep passes a measured claim without adding seeds for it, the table is shown in findings.md,
the sweep's page and the experiment's README, and the measurement interleaves both arms (its
shape only: no test reads a ratio this machine measured)."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from bench import new, run
from bench.config import ConfigError, resolve
from bench.experiment import claims as claims_mod
from bench.experiment.grid import Looks
from bench.experiment.open import open_grid
from bench.findings.decision import verdicts
from bench.findings.presentation import costs, folders, page, render, runpage, tables
from bench.findings.provenance import verify
from bench.findings.reading import measurement
from bench.findings.statistics import sequential
from bench.measure import cost as measured
from bench.model import create_model
from bench.model.cost import analytic_flops, kept_flops
from bench.sweep.trials import resolve_trials
from tests.helpers import ROOT

ROWS, BASE = {"model.variant": "window"}, {"model.variant": "fixed"}
EXAMPLE = ROOT / "examples" / "add_a_claim.yaml"


def cost_csv(step: tuple[list[float], list[float]], **arms) -> pd.DataFrame:
    """cost.csv of one comparison (window against fixed): each arm's step seconds per
    repetition (`step`), and its static costs (`arms`: column -> (rows, baseline); defaults
    below); eval time per token is a tenth of the step's per 1000 tokens."""
    static = {"flops_kept": (50.0, 100.0), "flops_computed": (100.0, 100.0),
              "params": (1000, 1000), "peak_mb": (30.0, 20.0), "learned": (False, False),
              "alone_step_s": (2.0, 1.0), **arms}
    out, order = [], 0
    for rep in range(len(step[0])):
        for i in (0, 1) if rep % 2 == 0 else (1, 0):
            out.append({"rows": json.dumps(ROWS), "baseline": json.dumps(BASE),
                        "arm": ("rows", "baseline")[i], "setting": ("window", "fixed")[i],
                        "rep": rep, "order": order, "steps": 4, "step_s": step[i][rep],
                        "eval_s_per_token": step[i][rep] / 1e4,
                        **{k: v[i] for k, v in static.items()}, "device": "CPU X",
                        "kernels": "AVX2", "precision": "fp32", "threads": 1, "torch": "2.x"})
            order += 1
    return pd.DataFrame(out)


def read_back(df: pd.DataFrame, tmp_path: Path) -> pd.DataFrame:
    """The frame as measurement.read gives it back from a written cost.csv."""
    df.to_csv(tmp_path / measurement.FILE, index=False)
    return measurement.read(tmp_path / measurement.FILE)


def runs_of(seeds: int = 8, learned: bool = False, ratio: float = 0.5) -> pd.DataFrame:
    """Finished runs of both arms: flops_mean / flops_max per seed (the rows' `ratio` times
    the baseline's, which varies by seed), and what their layer said of their spans."""
    out = []
    for s in range(seeds):
        base = 100.0 + 10 * s
        for variant, f in (("window", ratio * base), ("fixed", base)):
            out.append({"model.variant": variant, "seed": s, "flops_mean": f, "flops_max": f,
                        "layer.learned_spans": learned, "final_test_bpc": 1.0})
    return pd.DataFrame(out)


def claim(metric: str, margin: float, expect: str = "less", **more) -> claims_mod.Claim:
    return claims_mod.parse([{"id": f"c_{metric}", "text": "t", "type": "cost", "rows": ROWS,
                              "baseline": BASE, "metric": metric, "expect": expect,
                              "margin": margin, **more}])[0]


def decided(c: claims_mod.Claim, cost: pd.DataFrame | None, runs: pd.DataFrame) -> pd.Series:
    table = verdicts.judge_sequence([c], runs, None, reading=verdicts.Reading(cost=cost)).table
    return table.set_index("claim").loc[c.id]


# --- the table: a pure function of cost.csv ---------------------------------------------------

def test_the_cost_table_and_closing_line_are_exact_ratios_of_cost_csv(tmp_path):
    """Step time: the median of the per-repetition ratios (0.5, 0.6, 0.9 -> 0.6) and their
    range; FLOPs kept and computed, params and peak memory: one ratio each, by construction;
    the dry run's method (each arm alone: 2.0 / 1.0) said to lie outside the interleaved
    range; the closing line names the machine."""
    cost = read_back(cost_csv(([0.5, 1.2, 0.9], [1.0, 2.0, 1.0])), tmp_path)
    (row,) = costs.table(cost, runs_of()).to_dict("records")
    assert row["rows"] == "window" and row["baseline"] == "fixed"
    assert row["step time"] == "0.6x (0.5-0.9)"
    assert row["eval time/token"] == "0.6x (0.5-0.9)"
    assert (row["FLOPs kept (mask)"], row["FLOPs computed (layer)"]) == ("0.5x", "1x")
    assert (row["params"], row["peak memory"]) == ("1x", "1.5x")
    assert row["dry run's method"] == "2x (outside the interleaved range)"
    assert costs.lines(cost, runs_of()) == [
        "window vs fixed: step time 0.6x (0.5-0.9, interleaved, CPU X), FLOPs kept 0.5x, "
        "computed 1x, params 1x, peak memory 1.5x"]
    block = costs.block(cost, runs_of())
    assert block.startswith(costs.START) and block.endswith(costs.END)
    assert "CPU X, AVX2 kernels, fp32, 1 torch thread" in block and "3 repetitions" in block


def test_learned_spans_take_their_flops_from_the_runs_per_seed(tmp_path):
    """Where an arm's spans are learned, FLOPs kept and computed are its runs' flops_mean and
    flops_max, a ratio per seed (their median and range over the seeds), not cost.csv's."""
    cost = read_back(cost_csv(([1.0, 1.0], [1.0, 1.0]), learned=(True, False)), tmp_path)
    (row,) = costs.table(cost, runs_of(learned=True, ratio=0.7)).to_dict("records")
    assert row["FLOPs kept (mask)"] == "0.7x (0.7-0.7, 8 seeds)"
    runs = runs_of(learned=True, ratio=0.7)  # a look stopped the rows after 6 of the 8 seeds
    runs = runs[~((runs["model.variant"] == "window") & (runs["seed"] >= 6))]
    (row,) = costs.table(cost, runs).to_dict("records")
    assert row["FLOPs kept (mask)"] == "0.7x (0.7-0.7, 6 seeds)"  # the seeds both arms ran


BAD = {"a word in a number column": ("step_s", "fast", "line 2, column step_s"),
       "a negative time": ("eval_s_per_token", -1.0, "line 2, column eval_s_per_token"),
       "no parameters": ("params", 0, "column params")}


@pytest.mark.parametrize("case", list(BAD))
def test_a_cost_csv_that_cannot_be_the_measurement_is_refused_by_line_and_column(case, tmp_path):
    col, value, said = BAD[case]
    df = cost_csv(([1.0, 1.0], [1.0, 1.0]))
    df[col] = df[col].astype(object)
    df.loc[0, col] = value
    df.to_csv(tmp_path / measurement.FILE, index=False)
    with pytest.raises(ConfigError, match=said):
        measurement.read(tmp_path / measurement.FILE)
    unpaired = cost_csv(([1.0, 1.0], [1.0, 1.0])).drop(index=3)
    unpaired.to_csv(tmp_path / measurement.FILE, index=False)
    with pytest.raises(ConfigError, match="repetitions differ"):
        measurement.read(tmp_path / measurement.FILE)
    assert measurement.read(tmp_path / "none.csv") is None


# --- cost claims: each kind by its rule -------------------------------------------------------

STEP = {"every repetition within": (([0.8, 0.9, 0.7], [1.0, 1.0, 1.0]), "reproduced"),
        "none within": (([1.2, 1.1, 1.3], [1.0, 1.0, 1.0]), "contradicted"),
        "some within": (([0.9, 1.1, 0.8], [1.0, 1.0, 1.0]), "inconclusive")}


@pytest.mark.parametrize("case", list(STEP))
def test_a_measured_time_is_decided_from_its_repetitions_for_this_machine(case, tmp_path):
    """step time below 1x: reproduced where every repetition's ratio is below it, contradicted
    where none is, inconclusive otherwise; the reason says it holds for this machine."""
    step, want = STEP[case]
    row = decided(claim("step_time", 1.0), read_back(cost_csv(step), tmp_path), runs_of())
    assert row["verdict"] == want
    assert "measured interleaved on CPU X" in row["reason"] and "for this machine" in \
        row["reason"]
    assert (row["ci_low"], row["ci_high"]) == (min(np.divide(*step)), max(np.divide(*step)))


@pytest.mark.parametrize(("metric", "margin", "expect", "want"), [
    ("flops_kept", 0.8, "less", "reproduced"), ("peak_memory", 1.1, "less", "contradicted"),
    ("params", 0.9, "greater", "reproduced"), ("flops_computed", 0.9, "less", "contradicted")])
def test_a_cost_the_configuration_fixes_is_decided_by_construction(metric, margin, expect, want,
                                                                     tmp_path):
    row = decided(claim(metric, margin, expect), read_back(cost_csv(([1.0] * 2, [1.0] * 2)),
                                                           tmp_path), runs_of())
    assert row["verdict"] == want and row["reason"].startswith("decided by construction")


@pytest.mark.parametrize(("ratio", "want"), [(0.7, "reproduced"), (1.3, "contradicted")])
def test_learned_flops_are_a_per_seed_claim(ratio, want, tmp_path):
    """Learned spans: each seed's ratio (8 of 8 on one side) by the sign test: p 1/256."""
    cost = read_back(cost_csv(([1.0] * 2, [1.0] * 2), learned=(True, False)), tmp_path)
    row = decided(claim("flops_kept", 1.0), cost, runs_of(learned=True, ratio=ratio))
    assert row["verdict"] == want and row["n"] == 8
    assert min(row["p"], row["p_opposite"]) == pytest.approx(1 / 256)
    assert row["reason"].startswith("per seed")
    again = decided(claim("flops_kept", 1.0), None, runs_of(learned=True, ratio=ratio))
    assert again["verdict"] == want  # the runs alone decide it: no measurement needed


def test_without_the_measurement_a_cost_claim_is_inconclusive_and_says_why():
    row = decided(claim("step_time", 1.0), None, runs_of())
    assert row["verdict"] == "inconclusive" and "cost.csv: not measured" in row["reason"]


def test_cost_claims_are_refused_without_a_baseline_a_cost_or_a_margin():
    base = {"id": "c", "text": "t", "type": "cost", "rows": ROWS, "baseline": BASE,
            "metric": "step_time", "expect": "less", "margin": 1.0}
    for change, said in (({"baseline": None}, "needs a baseline"),
                         ({"metric": "tokens_per_s"}, "not a cost"),
                         ({"margin": 0}, "margin > 0"), ({"expect": "equivalent"}, "expect less"),
                         ({"test": "sign-flip"}, "no test or log_offset")):
        with pytest.raises(ValueError, match=said):
            claims_mod.parse([{**base, **change}])


# --- the family's bound -----------------------------------------------------------------------

def test_a_measured_cost_spends_no_alpha_and_a_flops_claim_keeps_its_share():
    """A quality claim first: a time or memory claim after it leaves its budget as it was and
    is reproduced at all that is left (it cannot err: p is 0 or 1); a FLOPs claim keeps the
    share a per-seed claim would (its arms' spans may be learned). Either way the family errs
    at most alpha read both ways, and the chance all come out reproduced is the quality
    claim's alone where the rest cannot vary by seed."""
    quality = claims_mod.parse([{"id": "q", "text": "t", "rows": ROWS, "baseline": BASE,
                                 "metric": "final_test_bpc", "expect": "less",
                                 "margin": 0.1}])[0]
    looks = (4, 8)
    alone = sequential.family([verdicts.contrary(quality, 1)], looks)
    for extra, spends in ((claim("step_time", 1.0), False), (claim("peak_memory", 1.0), False),
                          (claim("flops_kept", 1.0), True)):
        contraries = [verdicts.contrary(c, 1) for c in (quality, extra)]
        budgets = sequential.family(contraries, looks)
        assert budgets[0] == alone[0]
        assert (budgets[1].claim < alone[0].claim) == spends
        bound = sequential.worst(budgets, contraries, looks)
        assert max(bound.defined, bound.directional) <= 0.05
        every = sequential.p_all_reproduced(looks, contraries, budgets, [0.9, 0.9], None)
        first = sequential.p_all_reproduced(looks, contraries[:1], budgets[:1], [0.9], None)
        assert (every == pytest.approx(first)) != spends


def test_the_dry_run_says_which_flops_claims_its_trials_decide_by_construction(tmp_path):
    """A FLOPs claim keeps a per-seed share of alpha; the dry run's rates say that no seed
    decides it where no arm's spans are learned (talking-heads against multi-head), and leave
    it a per-seed claim where one is (adaptive)."""
    from bench.sweep import feasible
    from tests.helpers import write_grid

    for rows, seedless in (("talking-heads", True), ("adaptive", False)):
        flops = {"id": "f", "text": "t", "type": "cost", "rows": {"model.variant": rows},
                 "baseline": {"model.variant": "fixed"}, "metric": "flops_kept",
                 "expect": "less", "margin": 1.0}
        grid = open_grid(write_grid(tmp_path, f"g_{rows}", grid={"model.variant": [
            "fixed", rows]}, seeds={"looks": [4, 8]}, claims=[flops]))
        trials = resolve_trials(grid, True)
        assert feasible.seedless(grid.claims[0], trials) == seedless
        rates = feasible.rates(grid.claims, grid.grid, grid.seeds)
        shown = feasible.by_construction(rates, grid.claims, trials)
        assert rates.loc[0, "test"] == "sign"
        assert shown.loc[0, "test"].startswith("none: by construction") == seedless


def test_a_running_sweep_passes_a_measured_claim_and_waits_only_for_seeds():
    """Looks 4, 8 at seeds 0-3: the time claim first is measured after the trials, so it
    passes; the quality claim after it (4 seeds: its rule at look 1 is none) waits for seeds,
    and only it (the runner adds seeds for the settings it reads)."""
    quality = claims_mod.parse([{"id": "q", "text": "t", "rows": ROWS, "baseline": BASE,
                                 "metric": "final_test_bpc", "expect": "less",
                                 "margin": 0.1}])[0]
    runs = runs_of(seeds=4)
    looks = Looks(looks=[4, 8], start=0)
    assert verdicts.undecided([claim("step_time", 1.0), quality], runs, None, looks,
                              None) == [quality]
    assert verdicts.undecided([claim("step_time", 1.0)], runs, None, looks, None) == []


# --- where it is shown ------------------------------------------------------------------------

def test_findings_md_ends_with_the_cost_block_its_page_and_readme_show_it(tmp_path):
    """findings.md from a runs.csv with cost.csv beside it: its cost claim decided, the cost
    block at its end, which the page check leaves aside (a hand edit of the verdict table is
    still named); the sweep's MLflow page shows the block's table as a part; the experiment's
    README shows the table in the run's section and links cost.csv."""
    folder = tmp_path / "window" / "seeds100"
    shutil.copytree(ROOT / "results" / "window" / "seeds100", folder)
    grid_text = yaml.safe_load((folder / "grid.yaml").read_text())
    grid_text["claims"].append({"id": "window_faster", "text": "t", "type": "cost", "rows": ROWS,
                                "baseline": BASE, "metric": "step_time", "expect": "less",
                                "margin": 1.0})
    (folder / "grid.yaml").write_text(yaml.safe_dump(grid_text))
    cost_csv(([0.5, 0.6, 0.7], [1.0, 1.0, 1.0])).to_csv(folder / measurement.FILE, index=False)
    render.findings_from_runs_csv(folder / "runs.csv", folder / "grid.yaml", folder)
    text = (folder / "findings.md").read_text()
    shown = re.compile(r"\| window +\| fixed +\| 0.6x \(0.5-0.7\) +\|")
    assert text.rstrip().endswith(costs.END) and shown.search(text)
    found = pd.read_csv(folder / "findings.csv").set_index("claim")
    assert found.loc["window_faster", "verdict"] in ("reproduced", "not tested")
    regenerated = page.regenerate(verify.verify(folder))
    assert page.differs(folder / "findings.md", regenerated) == []
    (folder / "findings.md").write_text(text.replace("| reproduced |", "| contradicted |", 1))
    assert page.differs(folder / "findings.md", regenerated)
    (folder / "findings.md").write_text(text.replace(costs.END, "", 1))  # the block edited
    assert page.differs(folder / "findings.md", regenerated)
    shown = runpage.sweep_page(pd.read_csv(folder / "runs.csv"), [folder / "findings.md"],
                               found.reset_index(), folder)
    part = next(p for p in shown.parts if p.what == "the cost table")
    assert part.markdown.startswith("### Cost") and "| window | fixed | 0.6x (0.5-0.7) |" in \
        part.markdown  # compacted for the store
    section = folders._run_section(folder, tmp_path)
    assert "[cost.csv](seeds100/cost.csv)" in section and "0.6x (0.5-0.7)" in section


def test_the_tokens_per_s_column_says_where_it_comes_from():
    said = tables.note(["Model", "test", "tokens/s"])
    assert "beside the trials that ran with it" in said and "cost table" in said


def test_a_dilated_mask_keeps_half_its_distances_and_computes_them_all():
    """FLOPs kept (the distances the mask keeps) and computed (the window the layer computes)
    are both named: a mask keeping every other distance keeps half the attention's distances
    and computes the whole window; a fixed window keeps what it computes; learned spans are
    the runs' to say (None)."""
    import variants
    from variants.span import SpanPolicy

    class Dilated(SpanPolicy):
        def mask(self, dist: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            return (dist % 2 == 0).to(dist.dtype)

    model = dict(span=32, d_model=32, n_layers=1, n_heads=2)
    variants.register("test_dilated", span_policy=Dilated)
    try:
        built = {v: create_model(resolve({"model": {**model, "variant": v}}, "tiny").model, 256)
                 for v in ("test_dilated", "fixed", "adaptive")}
    finally:
        from variants import registry
        registry._VARIANTS.pop("test_dilated", None)
    dilated, fixed = built["test_dilated"], built["fixed"]
    assert dilated.blocks[0].attn.window == 31  # distances 0, 2, ..., 30: 1 + the farthest
    assert kept_flops(dilated) == analytic_flops(dilated, spans=[16.0])  # 16 of them kept
    assert analytic_flops(dilated, "max") == analytic_flops(dilated, spans=[31.0])
    assert kept_flops(fixed) == analytic_flops(fixed, "max")
    assert kept_flops(built["adaptive"]) is None


# --- the measurement: both arms, interleaved (shape only) -------------------------------------

def test_the_measurement_interleaves_both_arms_and_records_the_machine(tmp_path):
    """The example grid's one comparison (talking-heads against multi-head), 3 repetitions:
    a row per arm and repetition, the arms alternated and the order reversed every
    repetition, every time positive, the static costs one per arm, the dry run's method
    recorded as given; cost.csv reads back. No ratio is asserted: it is this machine's."""
    grid = open_grid(EXAMPLE)
    pairs = measured.comparisons(grid, resolve_trials(grid, True))
    assert [(a.setting, b.setting) for a, b in pairs] == [("talking-heads", "fixed")]
    df = measured.measure(pairs, reps=3, alone=lambda t: 0.25)
    assert list(zip(df["arm"], df["rep"], df["order"], strict=True)) == [
        ("rows", 0, 0), ("baseline", 0, 1), ("baseline", 1, 2), ("rows", 1, 3),
        ("rows", 2, 4), ("baseline", 2, 5)]
    assert (df[["step_s", "eval_s_per_token", "params", "peak_mb", "flops_computed"]] > 0).all(
        axis=None)
    assert (df.groupby("arm")[["params", "flops_kept", "peak_mb"]].nunique() == 1).all(axis=None)
    assert (df["alone_step_s"] == 0.25).all() and df["device"].str.len().min() > 0
    assert df["threads"].eq(grid.resources.cpu).all()
    measured.write(df, tmp_path)
    assert len(measurement.read(tmp_path / measurement.FILE)) == 6


@pytest.mark.slow
def test_bench_new_cheaper_writes_one_family_and_its_dry_run_shows_both(clean, tmp_path,
                                                                        capsys):
    """`bench.new --expect not-worse --cheaper time`: the quality claim, then the cost claim,
    one family; the grid loads, and its dry run prints both claims, the cost table measured
    here and what the cost claim would be on this machine."""
    shutil.copy(ROOT / "ablations" / "window.py", tmp_path / "window_plugin.py")
    out = tmp_path / "window.yaml"
    assert new.main(["window", "--plugin", str(tmp_path / "window_plugin.py"), "--expect",
                     "not-worse", "--cheaper", "time", "--set", "model.span=40", "--set",
                     "model.attn.keep=36", "--out", str(out)]) == 0
    grid = open_grid(out)
    assert [(c.type, c.metric) for c in grid.claims] == [
        ("compare", "test_probe_bpc.recall"), ("cost", "step_time")]
    capsys.readouterr()
    assert run.main([str(out), "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert all(c.id in said for c in grid.claims)
    assert "Cost here, the claims' rows against their baselines" in said
    assert f"cost claim {grid.claims[1].id} (ratio of step_time < 1 (rows / baseline)): here " \
        in said and "each arm timed alone (the time table)" in said
