"""Pre-registration checked by the machine (`bench.findings.prereg`): a grid file committed with
its claims before the first confirmation trial started is confirmatory; committed after it, or
never with these claims, exploratory (its verdicts `holds (exploratory)`); runs without start
times, or a grid file outside git, are said not to be checked. A real git repository in a
temporary folder; no Ray, no training."""

import subprocess

import pandas as pd
import pytest
import yaml

from bench.experiment import grid as grids
from bench.experiment.open import open_grid
from bench.findings import prereg, report

CLAIM = {"id": "lower", "text": "a is below b", "rows": {"model.variant": "a"},
         "baseline": {"model.variant": "b"}, "metric": "final_test_bpc", "expect": "less"}
GRID = {"name": "g", "grid": {"model.variant": ["a", "b"]}, "seeds": [0, 1, 2, 3, 4, 5],
        "design_seeds": [], "claims": [CLAIM]}


def git(repo, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path):
    """A repository with the grid file committed at a known time (2026-01-02 10:00 UTC)."""
    git(tmp_path, "init", "-q")
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(GRID))
    git(tmp_path, "add", "g.yaml")
    env = "2026-01-02T10:00:00+00:00"
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m",
                    "grid"], cwd=tmp_path, check=True,
                   env={"GIT_COMMITTER_DATE": env, "GIT_AUTHOR_DATE": env, "PATH": "/usr/bin:/bin"})
    return tmp_path


def runs() -> pd.DataFrame:
    """Six seeds on which row a is below b in every one."""
    return pd.DataFrame([{"model.variant": v, "seed": s, "final_test_bpc": 1.0 if v == "a"
                          else 2.0} for s in range(6) for v in "ab"])


def findings(repo, start: str | None, tmp_path) -> tuple[str, pd.DataFrame]:
    spec = open_grid(repo / "g.yaml")
    data = runs() if start is None else runs().assign(
        start_time=start, claims_sha=prereg.claims_sha(spec.claims))
    _, table, _ = report.write_findings("g", spec, data, pd.DataFrame(), tmp_path,
                                        repo / "g.yaml")
    return (tmp_path / "findings.md").read_text(), table


def test_committed_before_the_first_trial_is_confirmatory(repo, tmp_path):
    md, table = findings(repo, "2026-01-02 11:00:00+00:00", tmp_path)
    assert "Pre-registration: g.yaml with these claims" in md and "before the first" in md
    assert table["verdict"].iloc[0] == "reproduced" and table["evidence"].iloc[0] == "confirmatory"


def test_committed_after_the_first_trial_is_exploratory(repo, tmp_path):
    md, table = findings(repo, "2026-01-02 09:59:00+00:00", tmp_path)
    assert "Pre-registration: exploratory" in md and "after the first confirmation trial" in md
    assert table["verdict"].iloc[0] == "holds (exploratory)"
    assert "after the first confirmation trial" in table["reason"].iloc[0]


def test_claims_edited_since_the_commit_are_exploratory(repo, tmp_path):
    (repo / "g.yaml").write_text(yaml.safe_dump({**GRID, "claims": [{**CLAIM, "margin": 0.5}]}))
    md, table = findings(repo, "2026-01-02 11:00:00+00:00", tmp_path)
    assert "no commit of g.yaml holds these claims" in md
    assert table["evidence"].iloc[0] == "exploratory"


def test_runs_without_start_times_are_not_checked(repo, tmp_path):
    md, table = findings(repo, None, tmp_path)
    assert "Pre-registration: not checked (the runs record no start times" in md
    assert table["verdict"].iloc[0] == "reproduced"


def test_a_grid_file_outside_git_is_not_checked(tmp_path):
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(GRID))
    spec = open_grid(tmp_path / "g.yaml")
    got = prereg.check(tmp_path / "g.yaml", spec,
                       runs().assign(start_time="2026-01-02 11:00:00+00:00"))
    assert got.late is None and "not in a git checkout" in got.line


def test_runs_made_for_other_claims_are_counted():
    spec = grids.Grid.model_validate(GRID)
    data = runs().assign(start_time="2026-01-02 11:00:00+00:00", claims_sha="0" * 16)
    got = prereg.check(None, spec, data)
    assert "12 of the runs were run for other claims" in got.line


def test_a_results_copy_is_registered_by_the_grid_file_it_was_run_from(repo, tmp_path):
    """A result's grid.yaml is committed with the results, after its runs; the grid file it
    was run from, ablations/<name>.yaml, was committed before them, and that registers them."""
    (repo / "ablations").mkdir()
    (repo / "ablations" / "g.yaml").write_text((repo / "g.yaml").read_text())
    copy = repo / "results" / "g" / "grid.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text((repo / "g.yaml").read_text())
    for path, when in (("ablations/g.yaml", "2026-01-02T10:00:00+00:00"),
                       ("results/g/grid.yaml", "2026-01-03T10:00:00+00:00")):
        git(repo, "add", path)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "-m", path], cwd=repo, check=True,
                       env={"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when,
                            "PATH": "/usr/bin:/bin"})
    got = prereg.check(copy, open_grid(copy), runs().assign(
        start_time="2026-01-02 11:00:00+00:00"))
    assert got.late is None and "ablations/g.yaml with these claims" in got.line
