"""Every row recomputed, the code the trials imported, the registered code decides the looks
(issue 78, items 3-5): `bench.verify` holds each row of a result against the trial its grid,
setting, seed, precision and corpus make (`bench.sweep.recompute`); trials record the code
their process imported (`bench.codehash`), and a result whose looks ran different code is
exploratory, naming the file; whether the sweep stopped before a look a claim waits for is the
registered analysis code's decision, as its verdicts are. Each case is built as the review
built it: an edited copy of a committed result, or a scratch repository."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench import codehash
from bench import verify as verify_cmd
from bench.experiment.open import GridText, open_grid
from bench.findings.presentation import render as report
from bench.findings.provenance import plan
from bench.findings.provenance.verify import verify
from bench.findings.reading import perseed
from bench.findings.reading.records import PlanRecord
from bench.sweep import recompute
from bench.sweep.trials import resolve_trials
from tests.helpers import BEFORE, RAN, commit, git

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted(p.parent for p in (ROOT / "results").rglob("findings.csv"))
ENWIK8 = ROOT.parent / "shared" / "data" / "enwik8.head"


@pytest.mark.parametrize("folder", COMMITTED, ids=[f"{p.parent.name}/{p.name}"
                                                   for p in COMMITTED])
def test_every_committed_row_is_its_trial(clean, folder):
    """Each committed row's trial hash is what today's trial_hash gives its grid, setting, seed,
    precision and regenerated corpus; the one result whose grid.yaml is not what its rows ran
    (the adaptive_vs_dynamic pilot on enwik8, run with --data enwik8: its grid.yaml says the
    synthetic corpus) has each row named by its corpus."""
    runs = pd.read_csv(folder / "runs.csv")
    if (runs.get("dataset.name") == "enwik8").any() and not ENWIK8.is_file():
        pytest.skip(f"../shared/data absent: no {ENWIK8}")
    found = recompute.rows(folder, runs)
    assert found.unchecked == ""
    if folder.name == "pilot-seeds0-enwik8":
        assert found.wrong[0] == ("line 2 (fixed, seed 0) records corpus enwik8 (sha256 "
                                  "cc0c927c52a9), the grid's is synthetic (sha256 ff522da43d8a)")
        assert found.wrong[-1] == "6 rows more"
    else:
        assert found.wrong == []


def _in_runs(name: str) -> Path:
    """A scratch folder under the repository's ignored runs/ (git holds the plan and the
    registered code of a copy made there)."""
    (ROOT / "runs").mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(dir=ROOT / "runs", prefix=f"{name}-"))


def test_a_seed_and_its_train_seed_swapped_together_are_named(clean):
    """The review's double swap: data7's multi-head h = 8 rows of seeds 905 and 906 exchange
    both `seed` and `train.seed` (every row still agrees with itself and every seed is the
    plan's). Each row's trial hash is recomputed from the grid and its seed: both rows are
    named, the result is not confirmatory."""
    scratch = _in_runs("swapped")
    try:
        folder = scratch / "seeds900-data7"
        shutil.copytree(ROOT / "results" / "heads_grid" / "seeds900-data7", folder)
        runs = pd.read_csv(folder / "runs.csv")
        h8 = (runs["model.variant"] == "fixed") & (runs["model.n_heads"] == 8)
        one, two = h8 & (runs["seed"] == 905), h8 & (runs["seed"] == 906)
        for column in ("seed", "train.seed"):
            runs.loc[one, column], runs.loc[two, column] = 906, 905
        runs.to_csv(folder / "runs.csv", index=False)
        checked = verify(folder, recompute.rows)
    finally:
        shutil.rmtree(scratch)
    lines = [i + 2 for i in runs.index[one | two]]
    assert checked.evidence == "exploratory"
    assert not any("confirmatory" in line for line in checked.lines), checked.lines
    for line, labelled, other in zip(lines, (906, 905), (905, 906), strict=True):
        said = (f"line {line} (fixed n_heads=8, seed {labelled}): its trial hash is that of "
                f"seed {other}")
        assert said in checked.lines[0], checked.lines[0]


def test_alpha_changed_after_the_trials_keeps_data7_confirmatory(tmp_path):
    """ALPHA 0.05 -> 0.01 committed after data7's trials (a clone of this repository). Data7
    was decided at look 2 of 3 by its registered code; today's code would wait for look 3.
    Which looks had to run is the registered code's decision, as its verdicts are: data7 stays
    confirmatory (exit 0), and what today's code would decide is said."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True)
    stats = clone / "bench" / "findings" / "statistics" / "stats.py"
    stats.write_text(stats.read_text().replace("ALPHA = 0.05", "ALPHA = 0.01", 1))
    commit(clone, "2030-01-05T10:00:00+00:00", "alpha 0.01")
    folder = Path("results") / "heads_grid" / "seeds900-data7"
    ran = subprocess.run([sys.executable, "-m", "bench.verify", str(folder)], cwd=clone,
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(clone)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"{folder}: th_beats_mh_at_8: reproduced, confirmatory" in ran.stdout
    assert "waits for look 3 of 3, which the sweep did not run (the registered code, whose " \
        "decision stands, decides every claim at the looks that ran)" in ran.stdout, ran.stdout


# --- a plugin edited between looks, in a scratch repository ---------------------------------

PLUGIN = (ROOT / "ablations" / "window.py").read_text()
EDITS = {"the mask": ("(dist < self.keep)", "(dist <= self.keep)"),
         "a docstring": ('the README\'s worked example.', "the README's example.")}
CLAIM = {"id": "lower", "text": "window below fixed", "rows": {"model.variant": "window"},
         "baseline": {"model.variant": "fixed"}, "metric": "final_test_bpc", "expect": "less"}
GRID = {"name": "g", "base": {"preset": "smoke", "model": {"attn": {"keep": 8}}},
        "grid": {"model.variant": ["fixed", "window"]}, "seeds": {"looks": [4, 8], "start": 0},
        "design_seeds": [], "claims": [CLAIM], "plugins": ["plugins/window_plugin.py"]}


PLANS: dict[str, PlanRecord] = {}  # every plan a test's trials recorded, as registered


def _trials(repo: Path, seeds: range, records: dict[str, str] | None = None) -> pd.DataFrame:
    """Window below fixed in every seed, each trial recording the plan from the repository as
    it is now (and the plan itself, PLANS: plan.json), and `records`' code_sha where given
    (what a trial's process records)."""
    spec = open_grid(repo / "g.yaml")
    rec = plan.record(spec, repo / "g.yaml", {})
    PLANS[rec["plan_sha"]] = plan.registered(spec)
    code = {"code_sha": codehash.code_sha(records)} if records is not None else {}
    return pd.DataFrame([{"model.variant": v, "seed": s, "trial": f"{v}{s}", "start_time": RAN,
                          "final_test_bpc": 1.0 if v == "window" else 2.0, **rec, **code}
                         for s in seeds for v in ("window", "fixed")])


@pytest.fixture
def plugged(tmp_path: Path, clean) -> Path:
    """A repository with the window plugin and a grid that imports it, committed at BEFORE."""
    repo = tmp_path / "repo"
    (repo / "plugins").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "plugins" / "window_plugin.py").write_text(PLUGIN)
    (repo / "g.yaml").write_text(yaml.safe_dump(GRID))
    commit(repo, BEFORE, "the plan")
    return repo


def _edit(repo: Path, edit: str) -> str:
    """The plugin edited (`EDITS`) and committed between the looks; its new source."""
    path = repo / "plugins" / "window_plugin.py"
    before, after = EDITS[edit]
    assert before in path.read_text()
    path.write_text(path.read_text().replace(before, after))
    commit(repo, "2026-01-02T10:30:00+00:00", f"{edit} changed")
    return path.read_text()


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_plugin_edited_between_looks_is_named_from_the_run_commits(plugged, edit):
    """The review's case: look 1 of a plugin grid from one commit, the plugin's mask changed
    (`dist < keep` -> `dist <= keep`), look 2 from the next, the trials recording no code
    (as every committed result): the run commits differ in the grid's plugin file, so the
    result is exploratory, naming it; a docstring edited between the looks changes nothing."""
    look1 = _trials(plugged, range(4))
    _edit(plugged, edit)
    checked = verify(_published(plugged, pd.concat([look1, _trials(plugged, range(4, 8))])))
    if edit == "the mask":
        assert checked.evidence == "exploratory"
        assert "which differ in code that trains (plugins/window_plugin.py)" in checked.lines[0]
    else:
        assert checked.evidence == "confirmatory", checked.lines


def _published(repo: Path, runs: pd.DataFrame, records: list[dict[str, str]] = ()) -> Path:
    """The result as a sweep writes it (runs.csv, plan.json and code.json beside it where
    `records`, each by its code_sha, grid.yaml, the findings from runs.csv read back),
    committed."""
    folder = repo / "results" / "g"
    folder.mkdir(parents=True, exist_ok=True)
    runs.to_csv(folder / "runs.csv", index=False)
    (folder / "plan.json").write_text(plan.plans_json(PLANS[s] for s in set(runs["plan_sha"])))
    if records:
        (folder / "code.json").write_text(json.dumps({codehash.code_sha(r): r
                                                      for r in records}))
    shutil.copy(repo / "g.yaml", folder / "grid.yaml")
    grid = open_grid(folder / "grid.yaml", imports=False)
    report.write_findings(grid, perseed.read(folder / "runs.csv", grid), pd.DataFrame(),
                          folder, folder / "grid.yaml")
    commit(repo, "2026-01-03T10:00:00+00:00", "results")
    return folder


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_plugin_edited_between_looks_is_named_from_the_code_records(plugged, edit):
    """The same edit, the trials recording the code their process imported (code_sha, and
    code.json beside runs.csv): the two looks' records give the plugin file two digests, so
    the result is exploratory, naming the file and each look's code_sha; a docstring edit
    hashes alike (each file as code)."""
    training = {"bench/training/loop.py": codehash.digest(
        (ROOT / "bench" / "training" / "loop.py").read_bytes())}
    first = training | {"plugins/window_plugin.py": codehash.digest(PLUGIN.encode())}
    look1 = _trials(plugged, range(4), first)
    second = training | {"plugins/window_plugin.py": codehash.digest(
        _edit(plugged, edit).encode())}
    runs = pd.concat([look1, _trials(plugged, range(4, 8), second)])
    checked = verify(_published(plugged, runs, [first, second]))
    if edit == "the mask":
        assert checked.evidence == "exploratory"
        assert ("the trials imported different code that trains: plugins/window_plugin.py "
                "differs between their code records (code_sha ") in checked.lines[0]
        for record in (first, second):
            assert f"{codehash.code_sha(record)} (8 trials)" in checked.lines[0]
    else:
        assert codehash.code_sha(first) == codehash.code_sha(second)
        assert checked.evidence == "confirmatory", checked.lines


def test_code_records_that_differ_only_in_what_was_imported_are_one_version(plugged):
    """One look's processes imported a module the other's did not (a lazy import): the
    records share every file they both hold, so the code is one version: confirmatory."""
    first = {"plugins/window_plugin.py": codehash.digest(PLUGIN.encode())}
    second = first | {"bench/model/cost.py": "0123456789abcdef"}
    runs = pd.concat([_trials(plugged, range(4), first), _trials(plugged, range(4, 8), second)])
    checked = verify(_published(plugged, runs, [first, second]))
    assert checked.evidence == "confirmatory", checked.lines


def test_a_code_sha_without_its_code_json_exits_2_naming_it(plugged, capsys):
    """runs.csv records code_sha and code.json beside it is gone, or lacks one: exit 2, one
    line naming code.json and what was expected, before any verdict."""
    first = {"plugins/window_plugin.py": codehash.digest(PLUGIN.encode())}
    folder = _published(plugged, _trials(plugged, range(8), first), [first])
    (folder / "code.json").write_text("{}")
    assert verify_cmd.main([str(folder)]) == 2
    assert (f"code.json: no code_sha {codehash.code_sha(first)}, which runs.csv line 2 "
            "records") in capsys.readouterr().err
    (folder / "code.json").unlink()
    assert verify_cmd.main([str(folder)]) == 2
    assert "code.json: not there: runs.csv records code_sha" in capsys.readouterr().err


# --- what a trial records, and what enters its identity ---------------------------------------

def test_a_plugin_file_enters_the_trial_identity_as_code(tmp_path, clean, monkeypatch):
    """A plugin grid's trials are identified with the plugin's code: its mask changed makes
    other trials (a sweep never reuses the finished ones), a docstring does not; a grid
    without plugins keeps its trials' hashes (every committed row recomputes: above), a
    plugin of the environment's ($ATTNBENCH_PLUGINS: not the grid's) too."""
    from variants import registry

    def hashes(source: str) -> set[str]:
        plugin = tmp_path / f"p{len(list(tmp_path.iterdir()))}" / "window_plugin.py"
        plugin.parent.mkdir()
        plugin.write_text(source)
        registry._VARIANTS.pop("window", None)  # each copy registers it anew
        text = yaml.safe_dump(GRID | {"plugins": [str(plugin)], "seeds": [0]})
        return {t.hash for t in resolve_trials(open_grid(GridText(text, "g", tmp_path)), True)}

    before = hashes(PLUGIN)
    assert hashes(PLUGIN.replace(*EDITS["a docstring"])) == before
    assert hashes(PLUGIN.replace(*EDITS["the mask"])).isdisjoint(before)
    plain = yaml.safe_dump({"name": "g", "base": {"preset": "smoke"},
                            "grid": {"model.variant": ["fixed"]}, "seeds": [0]})
    alone = {t.hash for t in resolve_trials(open_grid(GridText(plain, "g", tmp_path)), True)}
    (tmp_path / "tooling.py").write_text("X = 1\n")
    monkeypatch.setenv("ATTNBENCH_PLUGINS", str(tmp_path / "tooling.py"))
    assert {t.hash for t in resolve_trials(open_grid(GridText(plain, "g", tmp_path)),
                                           True)} == alone


def test_a_code_record_holds_the_project_and_plugin_files_imported(tmp_path):
    """`codehash.imported`: every imported file of bench/ and variants/ and the plugin files,
    by their path in the repository, each hashed as code (a comment or docstring aside)."""
    plugin = tmp_path / "mine.py"
    plugin.write_text('"""A plugin."""\nX = 1  # one\n')
    record = codehash.imported([str(plugin)])
    assert record["bench/codehash.py"] == codehash.digest(
        (ROOT / "bench" / "codehash.py").read_bytes())
    assert "variants/registry.py" in record and "bench/findings/provenance/prereg.py" in record
    assert record[plugin.as_posix()] == codehash.digest(b"X = 1\n")
    assert not any(p.startswith((".venv", "tests/")) for p in record)
