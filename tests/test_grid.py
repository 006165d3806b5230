"""bench.grid: what a grid file means. Schema errors exit 2 before anything starts; the dry-run
plan; presets against grid axes. Fast: no Ray, no training."""

import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml

from bench import run
from bench.config import resolve
from bench.experiment.open import Overrides, apply, open_grid
from bench.sweep.trials import resolve_trials, trial_hash
from bench.training import precision
from tests.helpers import ROOT, SMOKE, write_grid

# --- schema errors: exit 2, the key path named, nothing started --------------------------------

BAD = {
    "unknown top-level key": ({"colour": "red"}, [], "colour"),
    "wrong type": ({"resources": {"cpu": "lots"}}, [], "resources.cpu"),
    "unknown variant": ({"grid": {"model.variant": ["fixed", "nope"]}}, [], "model.variant"),
    "unknown dataset": ({"base": {"data": {"name": "enwik9"}}}, [], "enwik9"),
    "empty grid": ({"grid": {}}, [], "grid"),
    "grid key not in the config": ({"grid": {"model.n_head": [2, 4]}}, [], "model.n_head"),
    "grid values not a list": ({"grid": {"model.n_heads": 4}}, [], "grid.model.n_heads"),
    "unknown base key": ({"base": {"model": {"d_modle": 8}}}, [], "model.d_modle"),
    "bad --set value": ({}, ["--set", "train.lr=-1"], "train.lr"),
    "bad synthetic option": ({"base": {"data": {"n_char": 5}}}, [], "n_char"),
    "exclude on a non-grid key": ({"exclude": [{"model.n_heads": 4}]}, [], "exclude.0"),
    "unknown scheduler": ({"scheduler": "hyperband"}, [], "scheduler.type"),
    "looks not increasing": ({"seeds": {"looks": [3, 3, 6]}}, [], "strictly increasing"),
    "a look below 2 seeds": ({"seeds": {"looks": [1, 4]}}, [], "seeds.looks.looks"),
    "futility outside (0, 1)": ({"seeds": {"looks": [3, 6], "futility": 1.5}}, [],
                                "seeds.looks.futility"),
    "a seed twice": ({"seeds": [0, 0, 1]}, [], "each once"),
    "--seeds with looks": ({"seeds": {"looks": [3, 6]}}, ["--seeds", "0,1,2"],
                           "--seed-start"),
    "a negative GPU share": ({"resources": {"gpu": -0.5}}, [], "resources.gpu"),
    "more than one GPU, not whole": ({"resources": {"gpu": 1.5}}, [], "a share of one GPU"),
    "superseded without its replacement": ({"status": "superseded", "why": "old"}, [],
                                           "status superseded: needs superseded_by"),
    "a primary grid naming `of`": ({"of": "heads_grid"}, [], "of: not a key of a grid with "
                                   "status primary"),
    "an unknown status": ({"status": "retired"}, [], "status"),
    "a superseded grid": ({"status": "superseded", "superseded_by": "heads_grid",
                           "why": "a test"}, [], "grid smoke is replaced by heads_grid (a test)"),
    "a value twice": ({"grid": {"model.variant": ["fixed", "fixed"]}}, [], "lists a value twice"),
    "an unknown name": ({"grid": {"model.variant": ["dynamic"]}}, [], "unknown name 'dynamic'"),
    "a span no training stream holds": ({}, ["--set", "model.span=14000"],
                                        "model.span=14000: the synthetic train split's 4 streams"),
    "a prefix too short for its splits": (
        {"base": {"preset": "tiny", "data": {"name": "file", "path": str(SMOKE)}}}, [],
        "train split has"),
    **({} if torch.cuda.is_available() else {
        "GPUs on a machine without": ({"resources": {"gpu": 0.25}}, [],
                                      "resources.gpu=0.25: this machine has no CUDA device")}),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_grid_exits_2_and_starts_nothing(case, tmp_path, monkeypatch, capsys):
    changes, cli, path = BAD[case]
    grid = {**yaml.safe_load(SMOKE.read_text()), **changes}
    file = tmp_path / "bad.yaml"
    file.write_text(yaml.safe_dump(grid))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    assert run.main([str(file), *cli, "--results-dir", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert path in err and "error:" in err, err
    assert not (tmp_path / "results").exists() and not (tmp_path / "tmp").exists()
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def test_unreadable_grid_and_bad_seeds_exit_2(tmp_path, capsys):
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    assert run.main([str(tmp_path / "broken.yaml")]) == 2
    assert "broken.yaml" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        run.main([str(SMOKE), "--seeds", "0,x"])
    assert exit_.value.code == 2


def test_dry_run_prints_trials_and_cost(tmp_path, capsys):
    grid = write_grid(tmp_path, "dry", grid={"model.variant": ["fixed", "gbma"],
                                             "model.n_heads": [2, 4]},
                      exclude=[{"model.variant": "gbma", "model.n_heads": [4]}])
    assert run.main([str(grid), "--dry-run", "--seeds", "0,1",
                     "--results-dir", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert "6 trials" in out and "estimated cost" in out  # (2 x 2 - 1) x 2 seeds
    trials = out.split("The layer options")[0]
    rows = [line for line in trials.splitlines() if line.startswith("| ") and "gbma" in line]
    assert len(rows) == 2 and all(" 2 " in r for r in rows)
    assert not (tmp_path / "results").exists()


def test_cli_preset_wins_over_base_sizes_but_not_grid_axes():
    grid = open_grid(ROOT / "ablations" / "heads_grid.yaml")
    applied = apply(grid, Overrides(preset="small", data="enwik8"))
    cfg = resolve(applied.base.model_dump(exclude={"preset"}), applied.base.preset)
    assert (cfg.model.d_model, cfg.model.n_layers, cfg.data.name) == (512, 12, "enwik8")
    assert cfg.data.options == {} and applied.grid["model.n_heads"] == [2, 4, 8]
    assert grid.base.preset == "tiny" and grid.base.data != applied.base.data  # as read


def test_an_option_some_variants_take_is_ignored_by_the_others(tmp_path, capsys):
    """span_limit sets the ramp for fixed and adaptive alike: the fixed trials drop it and say
    so; a grid whose variants all refuse an option is refused, naming it."""
    trials = resolve_trials(open_grid(ROOT / "ablations" / "span_limit.yaml"), dry_run=True)
    for t in trials:
        fixed = t.cfg.model.variant == "fixed"
        assert t.ignored == (("model.attn.ramp",) if fixed else ())
        assert ("ramp" in t.cfg.model.attn) is not fixed
    grid = write_grid(tmp_path, "noramp", base={"model": {"attn": {"ramp": 8}}})
    assert run.main([str(grid), "--dry-run"]) == 2
    assert "model.attn.ramp=8: unknown option of variant 'fixed'" in capsys.readouterr().err


def test_committed_trials_keep_their_hashes(monkeypatch):
    """A committed grid's trials resolve to the hashes its runs.csv recorded (its variants at
    today's names), in
    the precision the records name (bf16 autocast), on any machine: one identity per trial."""
    folder = ROOT / "results" / "adaptive_vs_dynamic" / "pilot-seeds0-r32"
    logged = pd.read_csv(folder / "runs.csv")
    assert set(logged["precision"]) == {"bf16-autocast"}
    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: None)
    grid = open_grid(folder / "grid.yaml")
    trials = resolve_trials(grid, False)
    assert grid.grid["model.variant"] == ["fixed", "adaptive", "dynamic-span"]
    assert {t.hash for t in trials} == set(logged["trial"])
    # train.schedule came after these runs: at its old behaviour it is no part of their hashes
    # (checked above against the logged ones); set otherwise, it makes other trials
    cosine = {trial_hash(t.cfg.model_copy(update={"train": t.cfg.train.model_copy(
        update={"schedule": "cosine"})}), None, "fp32") for t in trials}
    assert not cosine & {trial_hash(t.cfg, None, "fp32") for t in trials}


@pytest.mark.parametrize(("earlier", "now"), [("design", "pilot"), ("replication", "repeat")])
def test_an_earlier_status_word_is_read_as_the_word_it_became(earlier, now):
    """A grid file as committed before the status words were renamed (the check of the code
    that trains reads the grid file at each run commit again) opens, its status the new word,
    its plan and trials the same as the file's today; the new word, printed, names no folder
    under results/."""
    from bench.experiment.open import GridText, load_grid
    from bench.findings.provenance.plan import plan_sha

    text = (ROOT / "ablations" / "span_limit.span_pilot.yaml").read_text()
    assert "\nstatus: pilot\n" in text
    old = load_grid(GridText(text.replace("\nstatus: pilot\n", f"\nstatus: {earlier}\n"), "old",
                        ROOT / "ablations"))
    new = load_grid(GridText(text.replace("\nstatus: pilot\n", f"\nstatus: {now}\n"), "new",
                        ROOT / "ablations"))
    assert old.status == now and old == new
    assert plan_sha(old, None, "code") == plan_sha(new, None, "code")
    assert [t.hash for t in resolve_trials(old, True)] == [
        t.hash for t in resolve_trials(new, True)]
    assert not (ROOT / "results" / now).exists()


def test_bench_run_reads_its_grid_file_once(tmp_path, monkeypatch):
    """The grid file is read once: checked, opened, its plan recorded and handed to the sweep
    (which logs its sha256 and copies it beside the report) as that one text."""
    grid = write_grid(tmp_path, "read_once")
    reads = []
    for method in ("read_bytes", "read_text"):
        real = getattr(Path, method)

        def counted(self, *a, _real=real, _method=method, **kw):
            if self.resolve() == grid.resolve():
                reads.append(_method)
            return _real(self, *a, **kw)

        monkeypatch.setattr(Path, method, counted)
    handed = []
    monkeypatch.setattr(run, "sweep", lambda g, trials, options: handed.append(options) or 0)
    assert run.main([str(grid), "--results-dir", str(tmp_path / "r")]) == 0
    assert len(reads) == 1, reads
    [options] = handed
    assert options.source.path == grid and options.source.text == grid.read_text()
