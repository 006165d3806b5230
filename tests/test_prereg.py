"""Pre-registration checked by the machine (`bench.findings.provenance.prereg`), in a real git
repository in a temporary folder (no Ray, no training): trials record the plan they serve as a
sweep's driver records it (`plan.record`, and the plan itself: `plan.registered`); a plan
committed before they ran, and run clean from a commit that holds it, is confirmatory; the four
spoofs an outside review passed through the old check (a backdated commit, claims reverted after
the trials, looks changed after the data, the start times dropped) come out exploratory or
unverified."""

import shutil
import subprocess

import pandas as pd
import pytest
import yaml

from bench.experiment.open import open_grid
from bench.findings.presentation import render as report
from bench.findings.provenance import plan, prereg

CLAIM = {"id": "lower", "text": "a is below b", "rows": {"model.variant": "a"},
         "baseline": {"model.variant": "b"}, "metric": "final_test_bpc", "expect": "less"}
GRID = {"name": "g", "grid": {"model.variant": ["a", "b"]},
        "seeds": {"looks": [6], "start": 0, "replications": [100]},
        "design_seeds": [], "claims": [CLAIM]}
BEFORE, RAN = "2026-01-02T10:00:00+00:00", "2026-01-02 11:00:00+00:00"


def git(repo, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def commit(repo, grid: dict, when: str, path: str = "g.yaml") -> None:
    """Write `grid` to `path` and commit it with committer and author time `when`."""
    (repo / path).write_text(yaml.safe_dump(grid))
    git(repo, "add", path)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m",
                    f"{path} at {when}"], cwd=repo, check=True,
                   env={"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when,
                        "PATH": "/usr/bin:/bin"})


@pytest.fixture
def repo(tmp_path):
    """A repository with the grid file committed at BEFORE."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commit(repo, GRID, BEFORE)
    return repo


def trials(repo, start: int = 0, path: str = "g.yaml") -> pd.DataFrame:
    """Six seeds on which row a is below b in every one, each trial recording the plan as the
    sweep's driver would from the repository as it is now, started at RAN."""
    spec = open_grid(repo / path)
    if start != spec.seeds.start:
        spec = spec.model_copy(update={"seeds": spec.seeds.model_copy(update={"start": start})})
    data = pd.DataFrame([{"model.variant": v, "seed": start + s, "trial": f"{v}{start + s}",
                          "final_test_bpc": 1.0 if v == "a" else 2.0, "start_time": RAN}
                         for s in range(6) for v in "ab"])
    return served(data, spec, repo / path)


def served(data: pd.DataFrame, spec, path, overrides: dict | None = None) -> pd.DataFrame:
    """`data` with what each trial records of the plan it serves (`plan.record`), and the plan
    itself as registered (`plan.registered`, plan.json: `attrs["plans"]`)."""
    rec = plan.record(spec, path, overrides or {})
    data = data.assign(**rec)
    data.attrs["plans"] = {rec["plan_sha"]: plan.registered(spec, overrides)}
    return data


def findings(repo, data: pd.DataFrame, out, path: str = "g.yaml") -> tuple[str, pd.DataFrame]:
    spec = open_grid(repo / path)
    _, table, _ = report.write_findings(spec, data, pd.DataFrame(), out, repo / path)
    return (out / "findings.md").read_text(), table


def test_a_plan_committed_before_its_trials_is_confirmatory(repo, tmp_path):
    md, table = findings(repo, trials(repo), tmp_path)
    assert "Pre-registration: confirmatory" in md and "before the first confirmation" in md
    assert table["verdict"].iloc[0] == "reproduced" and table["evidence"].iloc[0] == "confirmatory"


def test_a_backdated_commit_of_a_plan_run_uncommitted_is_exploratory(repo, tmp_path):
    """The trials ran from an edited grid file; its commit, made after them, is backdated."""
    edited = {**GRID, "claims": [{**CLAIM, "margin": 0.5}]}
    (repo / "g.yaml").write_text(yaml.safe_dump(edited))
    data = trials(repo)
    commit(repo, edited, "2026-01-02T10:30:00+00:00")  # before RAN, but made after the trials
    md, table = findings(repo, data, tmp_path)
    assert "exploratory" in md and "working tree that differed from its commit" in md
    assert table["verdict"].iloc[0] == "holds (exploratory)"
    assert table["evidence"].iloc[0] == "exploratory"


def test_claims_reverted_after_the_trials_are_exploratory(repo, tmp_path):
    """Claims A committed, then B; the trials run under B; then the file reverted to A."""
    commit(repo, {**GRID, "claims": [{**CLAIM, "margin": 0.5}]}, "2026-01-02T10:10:00+00:00")
    data = trials(repo)
    commit(repo, GRID, "2026-01-02T12:00:00+00:00")
    md, table = findings(repo, data, tmp_path)
    assert "ran under another plan" in md and "trial a0" in md
    assert table["evidence"].iloc[0] == "exploratory"


@pytest.mark.parametrize("change", [{"seeds": {"looks": [3, 6], "start": 0}},
                                    {"seeds": {"looks": [6], "start": 0, "futility": 0.2}},
                                    {"design_seeds": [50]}])
def test_looks_futility_or_design_seeds_changed_after_the_data_are_exploratory(
        repo, tmp_path, change):
    data = trials(repo)
    commit(repo, {**GRID, **change}, "2026-01-02T12:00:00+00:00")
    md, table = findings(repo, data, tmp_path)
    assert "ran under another plan" in md
    assert table["evidence"].iloc[0] == "exploratory"


def test_a_withdrawal_written_after_the_trials_is_not_another_plan(repo, tmp_path):
    """`seeds.withdrawn` is publication metadata, not the plan: the grid file given states a
    registered start withdrawn after the trials ran (committed after them), and they stay
    confirmatory; their plan's first commit is still the one before them."""
    data = trials(repo)
    seeds = GRID["seeds"] | {"withdrawn": {100: "its machine was lent elsewhere"}}
    commit(repo, {**GRID, "seeds": seeds}, "2026-01-02T12:00:00+00:00")
    md, table = findings(repo, data, tmp_path)
    assert "Pre-registration: confirmatory" in md, md
    assert table["evidence"].iloc[0] == "confirmatory"


def test_runs_without_start_times_or_records_are_unverified(repo, tmp_path):
    for data in (trials(repo).drop(columns="start_time"), trials(repo)[["model.variant",
                                                                        "seed", "final_test_bpc"]]):
        md, table = findings(repo, data, tmp_path)
        assert "Pre-registration: unverified" in md and "predate the plan records" in md
        assert table["evidence"].iloc[0] == "unverified"
        assert table["verdict"].iloc[0] == "reproduced"  # the numbers stand; the label does not


def test_a_grid_file_outside_git_is_unverified(tmp_path):
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(GRID))
    spec = open_grid(tmp_path / "g.yaml")
    got = prereg.check(tmp_path / "g.yaml", spec, trials(tmp_path))
    assert got.evidence == "unverified" and "not in a git checkout" in got.why


def test_a_registered_replication_start_is_confirmatory_and_another_is_not(repo, tmp_path):
    md, table = findings(repo, trials(repo, start=100), tmp_path)
    assert "Pre-registration: confirmatory" in md and "seeds from 100" in md
    md, table = findings(repo, trials(repo, start=300), tmp_path)
    assert "seed start 300 is not registered" in md
    assert table["evidence"].iloc[0] == "exploratory"


def test_a_command_line_override_is_another_plan(repo, tmp_path):
    spec = open_grid(repo / "g.yaml")
    data = served(trials(repo), spec, repo / "g.yaml", {"sets": {"train": {"steps": 10}}})
    md, table = findings(repo, data, tmp_path)
    assert "ran under another plan" in md and table["evidence"].iloc[0] == "exploratory"


def test_a_results_copy_is_registered_by_the_grid_file_it_was_run_from(repo, tmp_path):
    """A result's grid.yaml is committed with the results, after its runs; the trials record
    the grid file they were run from, ablations/g.yaml, committed before them."""
    (repo / "ablations").mkdir()
    commit(repo, GRID, BEFORE, "ablations/g.yaml")
    data = trials(repo, path="ablations/g.yaml")
    (repo / "results" / "g").mkdir(parents=True)
    commit(repo, GRID, "2026-01-03T10:00:00+00:00", "results/g/grid.yaml")
    got = prereg.check(repo / "results/g/grid.yaml", open_grid(repo / "results/g/grid.yaml"),
                       data)
    assert got.evidence == "confirmatory" and "ablations/g.yaml" not in got.why


def test_the_analysis_code_is_part_of_the_plan(repo, tmp_path, monkeypatch):
    """With the analysis modules in the repository: a plan whose code changed after the grid
    file's last commit is registered by that later commit (confirmatory); a change to their
    docstrings and comments alone registers no new plan; the code changed after the trials
    ran leaves them confirmatory (the registered analysis is the code of the plan's first
    commit) and says that today's code differs from it."""
    monkeypatch.setattr(plan, "ROOT", repo)

    def code(body: str, when: str) -> str:
        for path in plan.ANALYSIS:
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            (repo / path).write_text(body)
        git(repo, "add", "bench")
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "-m", when], cwd=repo, check=True,
                       env={"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when,
                            "PATH": "/usr/bin:/bin"})
        return git(repo, "rev-parse", "HEAD").strip()

    code('"""v1"""\nX = 1\n', "2026-01-02T10:10:00+00:00")
    v2 = code('"""v2"""\nX = 2\n', "2026-01-02T10:20:00+00:00")  # grid file as at BEFORE
    code('"""v2, reworded"""\nX = 2  # a comment\n', "2026-01-02T10:30:00+00:00")
    data = trials(repo)
    got = prereg.check(repo / "g.yaml", open_grid(repo / "g.yaml"), data)
    assert got.evidence == "confirmatory" and f"first committed in {v2[:10]}" in got.line
    assert got.commit == v2 and not got.code_moved
    code('"""v3"""\nX = 3\n', "2026-01-02T12:00:00+00:00")  # after the trials (RAN, 11:00)
    got = prereg.check(repo / "g.yaml", open_grid(repo / "g.yaml"), data)
    assert got.evidence == "confirmatory" and got.commit == v2 and got.code_moved


def test_the_analysis_version_is_the_code_not_its_words():
    """The analysis version hashes code (`bench.codehash.code`), which drops docstrings and
    comments and keeps what is computed: every analysis module's version is unchanged with its
    docstrings reworded and a comment added, and changed by one constant."""
    files = plan.here()
    here = plan.version(files)
    reworded = {p: text.replace(b'"""', b'"""Reworded. ', 1) + b"\n# a comment\n"
                for p, text in files.items()}
    assert reworded != files and plan.version(reworded) == here
    moved = dict(files)
    path = "bench/findings/statistics/sequential.py"
    moved[path] = files[path].replace(b"REPS = 4000", b"REPS = 4001")
    assert moved[path] != files[path] and plan.version(moved) != here


def test_only_what_can_change_a_run_makes_it_exploratory(repo, tmp_path):
    """An untracked notes file or scratch grid beside the grid file leaves the trials clean and
    confirmatory; an untracked plugin the grid loads, an untracked module under the packages or
    a tracked file changed is named by path (`plan.uncommitted`) and makes them exploratory."""
    (repo / "NOTES.txt").write_text("what I tried\n")
    (repo / "scratch.yaml").write_text("name: scratch\n")
    assert plan.uncommitted(repo / "g.yaml") == []
    (tmp_path / "notes").mkdir()
    text, table = findings(repo, trials(repo), tmp_path / "notes")
    assert (table["evidence"] == "confirmatory").all(), text
    (repo / "mine.py").write_text("x = 1\n")
    assert plan.uncommitted(repo / "g.yaml", ["mine.py"]) == ["mine.py"]
    (repo / "bench").mkdir()
    (repo / "bench" / "new.py").write_text("x = 1\n")
    (repo / "g.yaml").write_text((repo / "g.yaml").read_text() + "# edited\n")
    assert sorted(plan.uncommitted(repo / "g.yaml")) == ["bench/new.py", "g.yaml"]
    (tmp_path / "changed").mkdir()
    text, table = findings(repo, trials(repo), tmp_path / "changed")
    assert (table["evidence"] == "exploratory").all(), text


def test_the_run_names_an_uncommitted_plugin_before_any_compute(tmp_path, capsys):
    """`bench.run --dry-run` of a grid with claims, committed, whose plugin file is not: the
    warning names the plugin and the fix before anything runs; committed, nothing is said (a
    notes file beside it changes nothing)."""
    from bench import run
    from tests.helpers import write_grid

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    claim = {"id": "low", "text": "multi-head is below 9 bpc", "rows": {"model.variant": "fixed"},
             "metric": "final_test_bpc", "expect": "less", "margin": 9}
    grid = write_grid(repo, "mine", claims=[claim], plugins=["mine.py"], seeds={"looks": [5]})
    (repo / "mine.py").write_text('"""A plugin that registers nothing."""\n')
    (repo / "NOTES.txt").write_text("what I tried\n")
    git(repo, "add", grid.name)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m",
                    "grid"], cwd=repo, check=True)
    assert run.main([str(grid), "--dry-run"]) == 0
    said = capsys.readouterr().err
    assert "not committed, and able to change a run: mine.py;" in said
    assert "commit them first (git add mine.py ... && git commit)" in said
    git(repo, "add", "mine.py")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m",
                    "plugin"], cwd=repo, check=True)
    assert run.main([str(grid), "--dry-run"]) == 0
    assert "not committed" not in capsys.readouterr().err


def test_the_plan_is_checked_from_its_record_and_git_alone(monkeypatch):
    """The committed window result (registered in a17cfcd15a under code since moved), checked
    with every subprocess the check starts recorded: git reads files, logs and dates, and
    nothing runs the code of the commit that registered the plan (no `git archive`, no Python):
    plan.json holds what that code computed."""
    from bench.findings.reading import perseed

    ran, real = [], subprocess.run

    def spy(args, *rest, **kw):
        ran.append([str(a) for a in args])
        return real(args, *rest, **kw)

    monkeypatch.setattr(subprocess, "run", spy)
    folder = plan.ROOT / "results" / "window" / "seeds100"
    spec = open_grid(folder / "grid.yaml", imports=False)
    got = prereg.check(folder / "grid.yaml", spec, perseed.read(folder / "runs.csv", spec))
    assert got.evidence == "confirmatory" and got.commit.startswith("a17cfcd15a"), got.line
    assert ran and all(a[0] == "git" and a[1] != "archive" for a in ran), [
        a for a in ran if a[0] != "git" or a[1] == "archive"]


def test_a_plan_edited_in_its_record_is_not_the_plan_its_hash_names(repo, tmp_path):
    """plan.json is authenticated by its hash: the plan edited there after the trials (alpha
    0.05 made 0.1) is not the plan the rows record, and the findings are unverified, naming
    both hashes; a plan the rows record that no record holds is unverified too."""
    data = trials(repo)
    (want,) = set(data["plan_sha"])
    record = data.attrs["plans"][want]
    edited = record.model_copy(update={"plan": record.plan | {"alpha": 0.1}})
    data.attrs["plans"] = {want: edited}
    md, table = findings(repo, data, tmp_path)
    assert (f"plan.json's record of plan {want} is not that plan (its hash is "
            f"{plan.digest(edited.plan)})") in md
    assert table["evidence"].iloc[0] == "unverified" and table["verdict"].iloc[0] == "reproduced"
    data.attrs["plans"] = {}
    got = prereg.check(repo / "g.yaml", open_grid(repo / "g.yaml"), data)
    assert got.evidence == "unverified" and f"record plan {want}, which no plan record" in got.why


def test_trials_recorded_before_plans_were_recorded_whole_are_read_and_unverified(tmp_path):
    """Trials that record a plan_sha but whose plan no plan.json holds (a store's trials run
    before the plan was logged whole with them) are read, not refused: the findings come out
    unverified, naming the plan (a verdict is never confirmatory on a plan nobody can read)."""
    from bench.findings.reading import perseed

    folder = plan.ROOT / "results" / "window" / "seeds100"
    shutil.copy(folder / "runs.csv", tmp_path / "runs.csv")
    spec = open_grid(folder / "grid.yaml", imports=False)
    runs = perseed.read(tmp_path / "runs.csv", spec)
    got = prereg.check(folder / "grid.yaml", spec, runs)
    (want,) = set(runs["plan_sha"])
    assert got.evidence == "unverified" and f"record plan {want}, which no plan record" in got.why
