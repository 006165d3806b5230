"""The pilot (python -m bench.pilot) says, before any confirmation seed runs, whether each arm
learns each probe: trained on design seeds outside the grid's, tracked nowhere, and exit 3
naming a claim every pilot seed of which is vacuous (the findings' rule: tests/test_vacuity.py
holds the pilot and the findings to each other)."""

from types import SimpleNamespace

import pandas as pd
import pytest

from bench import pilot
from tests.helpers import write_grid

RECALL = {"n_chars": 40000, "p_copy": 0,
          "recall": {"rate": 0.9, "keys": 36, "stored": 8, "values": 2, "queries": 12}}
CLAIM = {"id": "th_beats_mh", "text": "talking-heads answers with fewer bits",
         "rows": {"model.variant": "talking-heads"}, "baseline": {"model.variant": "fixed"},
         "metric": "test_probe_bpc.recall", "expect": "less", "test": "sign",
         "log_offset": 0.005}


def test_pilot_seeds_are_design_seeds_then_seeds_after_the_grids():
    assert pilot.pilot_seeds([5, 6, 7], 611, 2) == [5, 6]
    assert pilot.pilot_seeds([5], 611, 3) == [5, 612, 613]
    assert pilot.pilot_seeds([], 11, 1) == [12]


def test_the_step_a_probe_was_learned_is_the_first_reading_below_the_bar():
    history = [{"step": s, "probe_bpc": {"recall": b}} for s, b in
               [(10, 0.5), (20, 0.03), (30, 0.01)]]
    result = SimpleNamespace(history=history)
    assert pilot.learned_at(result, "recall", 0.04) == 20
    assert pilot.learned_at(result, "recall", 0.001) is None


def test_a_pilot_whose_arms_never_learn_the_probe_names_the_claim(tmp_path, capsys):
    """Twenty steps learn no recall: exit 3 naming the claim, every pilot seed vacuous (both
    arms at the no-recall floor within the noise of this small test split: the findings' own
    rule); the table leaves out recall_repeat, whose floor is 0, saying so; the trials train on
    design seed 3 in <results>/<grid>/pilot/, beside the table (pilot.csv) and the per-trial
    values (runs.csv) to commit, and nothing is tracked (no MLflow store)."""
    path = write_grid(tmp_path, "pilot", base={"preset": "smoke", "data": RECALL,
                                               "train": {"steps": 20, "eval_every": 10}},
                      claims=[CLAIM], design_seeds=[3], seeds={"looks": [4, 8], "start": 600})
    assert pilot.main([str(path), "--seeds", "1", "--results-dir", str(tmp_path / "r")]) == 3
    out = capsys.readouterr().out
    assert "seeds [3]" in out and "cannot answer th_beats_mh: unanswerable: every seed is " \
        "vacuous: every arm at the no-recall floor 0.423 within noise" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and " recall " in line]
    assert {r.split("|")[1].strip() for r in rows} == {"fixed", "talking-heads"}
    assert all(r.split("|")[6].strip() == "0/1" for r in rows)
    assert "not shown: recall_repeat, whose no-recall floor is 0" in out
    assert not any(" recall_repeat " in line for line in out.splitlines()
                   if line.startswith("| "))
    folder = tmp_path / "r" / "pilot" / "pilot"
    assert len([d for d in folder.iterdir() if d.is_dir()]) == 2
    table, runs = pd.read_csv(folder / "pilot.csv"), pd.read_csv(folder / "runs.csv")
    assert set(table["setting"]) == {"fixed", "talking-heads"} and set(table["learned"]) == {"0/1"}
    assert sorted(runs["model.variant"]) == ["fixed", "talking-heads"] and set(runs["seed"]) == {3}
    assert (runs["test_probe_bpc.recall"] > 0.3).all()  # what the table's mean is made of
    assert set(runs["dataset.name"]) == {"synthetic"} and runs["dataset.sha256"].nunique() == 1
    assert not list((tmp_path / "r").rglob("mlflow.db"))


@pytest.mark.parametrize("bad", [["--seeds", "0"], ["--set", "train.stepz=3"]])
def test_bad_input_exits_2(bad, tmp_path, capsys):
    path = write_grid(tmp_path, "pilot", claims=[CLAIM], design_seeds=[3])
    with pytest.raises(SystemExit) as exit_:
        code = pilot.main([str(path), *bad])
        raise SystemExit(code)
    assert exit_.value.code == 2
