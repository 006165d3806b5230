"""The dry run sizes an experiment: its wall time here (bench.sweep.estimate) and, for a claim
under power 0.8, the fewest stretched looks that reach it (bench.sweep.sizing). What is
tested is what the estimate is made of (the packing, the tokens read, the power found), not
how fast this machine is."""

import numpy as np
import pytest

from bench import run
from bench.experiment.open import open_grid
from bench.findings.statistics import sequential
from bench.sweep import estimate, feasible, sizing
from bench.sweep.trials import resolve_trials
from bench.training import loop, summary
from tests.helpers import write_grid

LOW = {"id": "th_not_worse", "text": "talking-heads not worse than multi-head by a factor 2",
       "rows": {"model.variant": "talking-heads"}, "baseline": {"model.variant": "fixed"},
       "metric": "final_test_bpc", "expect": "less", "margin": 0.693, "test": "sign"}


def test_trials_are_packed_on_the_slot_free_first():
    """Ray starts each queued trial on the first worker to come free: 5, 4, 3, 3 on two slots
    end at 8 (5 + 3) and 7 (4 + 3); one slot takes the sum; more slots than trials, the
    longest."""
    assert estimate.makespan([5, 4, 3, 3], 2) == 8
    assert estimate.makespan([5, 4, 3, 3], 1) == 15
    assert estimate.makespan([5, 4, 3], 8) == 5


def test_later_looks_run_only_the_settings_a_claim_reads():
    """Look 1 runs every setting; look 2 adds its new seeds to the settings in `later` only."""
    seconds = {"a": 10.0, "b": 20.0, "c": 40.0}
    first, second = estimate.look_seconds(seconds, {"c"}, (2, 3), 1)
    assert first == pytest.approx(2 * 70 + estimate.SWEEP_S + estimate.REPORT_S)
    assert second == pytest.approx(40 + estimate.REPORT_S)


def test_stretched_looks_keep_their_proportions_and_rise():
    assert sizing.stretched((4, 8, 12), 24) == (8, 16, 24)
    assert sizing.stretched((4, 8, 12), 13) == (4, 9, 13)
    assert sizing.stretched((2, 3), 4) == (3, 4)
    assert sizing.stretched((1, 2, 3), 3) == (1, 2, 3)


def test_the_looks_proposed_are_the_fewest_that_reach_the_power(tmp_path):
    """A sign claim on looks of 3 and 6 has power under 0.8 at q 0.8; the looks proposed reach
    0.8 (recomputed here through sequential.operating at the family's budget) and one seed
    fewer, stretched alike, does not."""
    grid = open_grid(write_grid(tmp_path, "low", claims=[LOW],
                                seeds={"looks": [3, 6], "start": 0, "futility": 0.5}))
    rates = feasible.rates(grid.claims, grid.grid, grid.seeds, (0.8,))
    assert rates["power q 0.8"][0] < 0.8
    (row,) = sizing.needed(grid.claims, grid.grid, (3, 6), 0.5, rates, (0.8,))
    assert row["claim"] == "th_not_worse" and row["basis"] == "exact"

    def power(looks: tuple[int, ...]) -> float:
        c = sequential.Contrary("sign")
        (b,) = sequential.family([c], looks)
        return sequential.operating(looks, c, 0.8, 0.5, b).ends["reproduced"]

    assert power(row["looks"]) == pytest.approx(row["power"]) and row["power"] >= 0.8
    assert power(sizing.stretched((3, 6), row["looks"][-1] - 1)) < 0.8


def test_the_tokens_a_trial_reads_are_those_the_trainer_reads(tmp_path, monkeypatch):
    """read_tokens counts every dev reading (eval_tokens each, every eval_every steps and after
    the last) and the final whole dev and test splits: the tokens train() hands evaluate."""
    grid = open_grid(write_grid(tmp_path, "reads", base={
        "preset": "smoke", "data": {"n_chars": 30000},
        "train": {"steps": 25, "eval_every": 10, "eval_tokens": 700}}))
    trial = resolve_trials(grid, dry_run=False)[0]
    read: list[int] = []
    real = loop.evaluate

    def counted(model, split, how, max_tokens=None, targets=None):
        read.append(len(split) if max_tokens is None else min(len(split), max_tokens))
        return real(model, split, how, max_tokens, targets)

    monkeypatch.setattr(loop, "evaluate", counted)
    monkeypatch.setattr(summary, "evaluate", counted)
    loop.train(trial.cfg, tmp_path / "run", progress=False)
    sizes = trial.identity["split_sizes"]
    assert read == [700, 700, 700, sizes["dev"], sizes["test"]]
    assert sum(read) == estimate.read_tokens(trial)


def test_the_dry_run_says_the_time_here_and_the_seeds_that_reach_the_power(tmp_path, capsys):
    """The dry run of an underpowered grid times each setting here and names, beside the
    claim, the looks that reach power 0.8 and the grid's minutes at those looks."""
    path = write_grid(tmp_path, "low", claims=[LOW],
                      seeds={"looks": [3, 6], "start": 0, "futility": 0.5})
    assert run.main([str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    table = out.split("Time here")[1].split("Cost here")[0]  # the cost table: its own test
    steps = [line for line in table.splitlines() if line.startswith("| fixed ")
             or line.startswith("| talking-heads ")]
    assert len(steps) == 2 and all(float(line.split("|")[2]) > 0 for line in steps)
    assert "look 1: " in table and "the whole grid at most" in table
    row = next(line for line in table.splitlines() if line.startswith("| th_not_worse "))
    looks = [int(n) for n in row.split("[")[1].split("]")[0].split(",")]
    assert looks[-1] > 6 and np.isfinite(float(row.split("|")[-2]))
