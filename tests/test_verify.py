"""A results folder that cannot be edited into "confirmatory", and one that cannot be read
refused: `bench.verify` on results built in scratch git repositories (as the review built its
edits), each edit coming out exploratory or unverified, or exit 2, naming its cause; and
committed results recomputed by the analysis code they were registered with (that every
committed result keeps its committed findings is CI's `bench.verify results`, .ci/run)."""

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench import report as report_cmd
from bench import verify as verify_cmd
from bench.config import ConfigError
from bench.experiment.open import GridText, open_grid
from bench.findings.presentation import render as report
from bench.findings.presentation.page import differs, regenerate
from bench.findings.provenance import plan
from bench.findings.provenance.verify import verify
from bench.findings.reading import perseed
from bench.findings.reading.records import PlanRecord
from bench.sweep import trials as sweep_trials
from tests.helpers import BEFORE, RAN, commit, git

ROOT = Path(__file__).resolve().parents[1]
A, B = "fixed", "talking-heads"  # real variants: bench.verify recomputes each row's trial
CLAIM = {"id": "lower", "text": "a is below b", "rows": {"model.variant": A},
         "baseline": {"model.variant": B}, "metric": "final_test_bpc", "expect": "less"}
GRID = {"name": "g", "base": {"preset": "smoke"}, "grid": {"model.variant": [A, B]},
        "seeds": {"looks": [4, 8], "start": 0}, "design_seeds": [], "claims": [CLAIM]}


@functools.cache
def trial(variant: str, seed: int) -> tuple[str, str]:
    """The trial hash and precision of GRID's trial (`variant`, `seed`), as the sweep's
    `resolve_trials` makes them (its corpus built once for every seed, as the sweep builds it
    once per data section: the seed is not the corpus's)."""
    grid = open_grid(GridText(yaml.safe_dump(GRID), "GRID", ROOT))
    base, preset = sweep_trials.base_of(grid)
    cfg, _ = sweep_trials.trial_config({"model.variant": variant}, seed, base, preset)
    precision = sweep_trials.resolved_precision(cfg)
    unseeded = cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": 0})})
    return sweep_trials.trial_hash(cfg, _corpus(unseeded.model_dump_json()), precision), precision


@functools.cache
def _corpus(config: str) -> dict:
    from bench.config import Config

    return Config.model_validate_json(config).corpus().identity()


PLANS: dict[str, PlanRecord] = {}  # every plan a test's trials recorded, as registered


def trials(repo: Path, seeds: range = range(8)) -> pd.DataFrame:
    """Row A below B in every seed, each trial recording the plan as a sweep's driver does
    from the repository as it is now (and the plan itself, PLANS: plan.json), started at RAN,
    under its trial hash and precision."""
    spec = open_grid(repo / "g.yaml")
    rec = plan.record(spec, repo / "g.yaml", {})
    PLANS[rec["plan_sha"]] = plan.registered(spec)
    return pd.DataFrame([{"model.variant": v, "seed": s, "trial": trial(v, s)[0],
                          "precision": trial(v, s)[1], "final_test_bpc": 1.0 if v == A else 2.0,
                          "start_time": RAN, **rec} for s in seeds for v in (A, B)])


def publish(repo: Path, runs: pd.DataFrame, folder: str = "results/g") -> Path:
    """The result folder as a sweep writes it (runs.csv, plan.json, grid.yaml, findings),
    committed."""
    out = repo / folder
    out.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out / "runs.csv", index=False)
    runs.attrs["plans"] = {sha: PLANS[sha] for sha in set(runs.get("plan_sha", ()))
                           if sha in PLANS}
    if runs.attrs["plans"]:
        (out / "plan.json").write_text(plan.plans_json(runs.attrs["plans"].values()))
    shutil.copy(repo / "g.yaml", out / "grid.yaml")
    report.write_findings(open_grid(out / "grid.yaml"), runs, pd.DataFrame(), out,
                          out / "grid.yaml")
    commit(repo, "2026-01-03T10:00:00+00:00", "results")
    return out


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose grid file was committed at BEFORE."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "g.yaml").write_text(yaml.safe_dump(GRID))
    commit(repo, BEFORE, "the plan")
    return repo


def edited(folder: Path, change) -> Path:
    """runs.csv changed by `change` (a function of the table), committed as an edit would be,
    with findings.csv recomputed by the same code (the edit at its most careful)."""
    runs = pd.read_csv(folder / "runs.csv")
    change(runs).to_csv(folder / "runs.csv", index=False)
    return folder


def regenerated(folder: Path) -> Path:
    """The folder's findings written again from its runs.csv, as an edit that regenerates
    them would."""
    grid = open_grid(folder / "grid.yaml")
    report.write_findings(grid, perseed.read(folder / "runs.csv", grid), pd.DataFrame(),
                          folder, folder / "grid.yaml")
    return folder


def test_a_plan_committed_before_its_trials_is_confirmatory(repo):
    checked = verify(publish(repo, trials(repo)))
    assert checked.evidence == "confirmatory" and checked.differ == []
    assert checked.lines == ["lower: reproduced, confirmatory"]


@pytest.mark.parametrize("change", [
    lambda r: r.assign(seed=r["seed"].replace(3, 8)),  # seed 3 relabelled 8
    lambda r: pd.concat([r[r["seed"] != 3], r[r["seed"] == 3].assign(
        seed=8, trial=lambda t: t["model.variant"] + "8")])])  # replaced by a seed 8
def test_a_seed_outside_the_registered_range_is_exploratory(repo, change):
    """The review's edit: one seed's rows relabelled, or replaced by rows of a seed the plan
    never runs: the findings use the registered seeds 0-7 only, and the result is exploratory,
    naming the seed."""
    folder = edited(publish(repo, trials(repo)), change)
    checked = verify(folder)
    assert checked.evidence == "exploratory"
    assert "rows on seeds the plan never runs (seeds from 0): variant=fixed seeds 8" in \
        checked.lines[0]


LATER = "2026-01-02 11:30:00+00:00"  # look 2's trials (seeds 4-7) start after look 1's


def _looks(runs: pd.DataFrame) -> pd.DataFrame:
    """The trials as a sweep of two looks records them: train.seed beside the seed label, and
    look 2's seeds started after look 1's."""
    return runs.assign(**{"train.seed": runs["seed"],
                          "start_time": runs["start_time"].where(runs["seed"] < 4, LATER)})


@pytest.mark.parametrize("columns, said", [
    (["seed"], "trial {} is labelled seed 1 but trained seed 5 (train.seed)"),
    (["seed", "train.seed"], "(seed 5, look 2) started at 2026-01-02 11:00:00 UTC, before "
                             "trial {} (seed 1, look 1) at 2026-01-02 11:30:00 UTC")])
def test_a_seed_label_moved_within_the_range_is_exploratory_naming_the_row(repo, columns,
                                                                            said):
    """The review's swap: seed labels 1 and 5 exchanged in runs.csv (with train.seed, or with
    it too), the findings recomputed: every seed is still one the plan runs, but the rows
    contradict themselves (the label is not the trial's seed; a look-2 trial started before a
    look-1 trial ended the look), so the result is exploratory, the row named."""
    folder = publish(repo, _looks(trials(repo)))
    assert verify(folder).evidence == "confirmatory"

    def swap(r: pd.DataFrame) -> pd.DataFrame:
        one, five = (r["model.variant"] == A) & (r["seed"] == 1), \
            (r["model.variant"] == A) & (r["seed"] == 5)
        for c in columns:
            r.loc[one, c], r.loc[five, c] = 5, 1
        return r

    checked = verify(edited(folder, swap))
    assert checked.evidence == "exploratory"
    said = said.format(trial(A, 5)[0])
    assert "rows that contradict themselves: " in checked.lines[0] and said in checked.lines[0]


def test_each_status_has_its_exit_code(repo, capsys):
    """bench.verify exits 0 for confirmatory, 3 for exploratory and 4 for unverified (0 for
    either with --allow-unverified), the worst of several results; its --help says so."""
    folder = publish(repo, trials(repo))
    assert verify_cmd.main([str(folder)]) == 0
    shutil.copytree(folder, repo / "results" / "x")
    lacking = regenerated(edited(repo / "results" / "x", lambda r: r[r["seed"] != 3]))
    relabelled = regenerated(edited(folder, lambda r: r.assign(seed=r["seed"].replace(3, 8))))
    assert verify_cmd.main([str(relabelled)]) == 3
    assert verify_cmd.main([str(lacking)]) == 4
    assert verify_cmd.main([str(relabelled), str(lacking)]) == 4
    assert verify_cmd.main([str(lacking), "--allow-unverified"]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        verify_cmd.main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "0 confirmatory" in said and "3 exploratory; 4 unverified" in said


@pytest.mark.parametrize("column, value", [("verdict", "reproduced"), ("interval", "≤ -9"),
                                           ("rule", "p ≤ 1/2"), ("reason", "")])
def test_a_hand_edit_of_the_findings_page_is_named(repo, capsys, column, value):
    """findings.md edited by hand over a findings.csv that says otherwise (the review's
    "reproduced" over an inconclusive claim; an edited interval, rule or reason): exit 1,
    naming the line, the claim and the column."""
    folder = publish(repo, trials(repo).assign(final_test_bpc=lambda r: (
        r["seed"] % 2 * 2.0).where(r["model.variant"] == A, 1.0)))  # half: inconclusive
    assert verify_cmd.main([str(folder)]) == 0
    page = (folder / "findings.md").read_text().splitlines()
    header = next(line for line in page if line.startswith("| claim"))
    cells = header.split("|")
    at = next(i for i, c in enumerate(cells) if c.strip() == column)
    row = next(i for i, line in enumerate(page) if line.startswith("| lower"))
    was = page[row].split("|")
    old = was[at].strip()
    was[at] = f" {value} "
    page[row] = "|".join(was)
    (folder / "findings.md").write_text("\n".join(page) + "\n")
    assert verify_cmd.main([str(folder)]) == 1
    assert f"findings.md: line {row + 1} (lower), {column}: {value!r} on the page, {old!r} " \
        "regenerated" in capsys.readouterr().err


def test_a_registered_replication_without_a_results_folder_is_named(tmp_path, capsys):
    """seeds.replications [100, 200] registered, the results of 0-7 and 200-207 published and
    100's not: bench.verify names start 100 as registered and unpublished and exits 5, with
    --allow-unverified too; once the grid file withdraws it with a reason (after the trials:
    not part of the plan), the reason is printed and the result exits 0, still confirmatory;
    once a result of the grid holds its seeds, neither is said."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    seeds = {"looks": [4, 8], "start": 0, "replications": [100, 200]}
    (repo / "g.yaml").write_text(yaml.safe_dump(GRID | {"seeds": seeds}))
    commit(repo, BEFORE, "the plan")
    folder = publish(repo, trials(repo))
    publish(repo, trials(repo, range(200, 208)), "results/g-200")
    assert verify_cmd.main([str(folder)]) == 5
    assert verify_cmd.main([str(folder), "--allow-unverified"]) == 5
    out = capsys.readouterr().out
    assert "Unpublished: seed start 100 is registered by g" in out and "200" not in out
    why = "its machine was lent to another project"
    (repo / "g.yaml").write_text(yaml.safe_dump(GRID | {"seeds": seeds | {
        "withdrawn": {100: why}}}))
    commit(repo, "2026-01-04T10:00:00+00:00", "start 100 withdrawn")
    assert verify_cmd.main([str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"Withdrawn: seed start 100: {why}" in out and "Unpublished" not in out
    assert "lower: reproduced, confirmatory" in out
    publish(repo, trials(repo, range(100, 108)), "results/g-100")
    verify_cmd.main([str(folder)])
    out = capsys.readouterr().out
    assert "Unpublished" not in out and "Withdrawn" not in out


def test_a_withdrawal_is_not_part_of_any_committed_plan():
    """`seeds.withdrawn` is publication metadata: every committed grid's plan (`plan_sha`) is
    the same with a start withdrawn; a start the grid does not register, or no reason, is
    refused."""
    grids = [*(ROOT / "ablations").glob("*.yaml"), *(ROOT / "results").rglob("grid.yaml")]
    looked = 0
    for path in grids:
        grid = open_grid(path, imports=False)
        if grid.looks is None:
            continue
        marked = grid.model_copy(update={"seeds": grid.looks.model_copy(update={
            "withdrawn": {grid.looks.start: "a reason"}})})
        assert plan.plan_sha(marked, grid.looks.start, "v") == \
            plan.plan_sha(grid, grid.looks.start, "v"), path
        looked += 1
    assert looked >= 10
    for withdrawn, said in [({7: "why"}, "7 is not a registered seed start"),
                            ({0: " "}, "start 0 has no reason")]:
        with pytest.raises(ValueError, match=said):
            open_grid(GridText(yaml.safe_dump(GRID | {"seeds": {
                "looks": [4, 8], "start": 0, "withdrawn": withdrawn}}), "g.yaml", ROOT))


@pytest.mark.parametrize("path, training", [("bench/training/loop.py", True),
                                            ("variants/named.py", True),
                                            ("docs/notes.md", False)])
def test_looks_run_from_commits_that_differ_in_code_that_trains_are_flagged(repo, path,
                                                                             training):
    """Look 1 from one commit, look 2 from a later one: where the two differ in code that
    trains (bench/training, variants, ...) the result is exploratory, naming both commits and
    the file; a documentation change between the looks leaves it confirmatory."""
    first = git(repo, "rev-parse", "HEAD").strip()
    look1 = trials(repo, range(4))
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text("changed = True\n")
    second = commit(repo, "2026-01-02T10:30:00+00:00", "between the looks")
    checked = verify(publish(repo, pd.concat([look1, trials(repo, range(4, 8))])))
    if training:
        assert checked.evidence == "exploratory"
        assert (f"the trials ran from commits {min(first, second)[:10]} and "
                f"{max(first, second)[:10]}, which differ in code that trains ({path})") in \
            checked.lines[0]
    else:
        assert checked.evidence == "confirmatory", checked.lines


def test_a_pilot_promoted_to_primary_after_its_data_is_exploratory(tmp_path):
    """A grid registered and run as a pilot, its status changed to primary afterwards (in the
    grid file and the result's grid.yaml): the status is in the plan, so the trials ran under
    another plan than the file now gives, and the result is exploratory, not "reproduced"."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "g.yaml").write_text(yaml.safe_dump(GRID | {"status": "pilot", "of": "main"}))
    commit(repo, BEFORE, "the pilot")
    folder = publish(repo, trials(repo))
    assert verify(folder).lines == ["lower: holds (exploratory), exploratory (g is registered as "
                                    "a pilot grid of main: its findings are exploratory "
                                    "whatever its seeds)"]
    for grid_file in (repo / "g.yaml", folder / "grid.yaml"):
        grid_file.write_text(yaml.safe_dump(GRID))
    commit(repo, "2026-01-04T10:00:00+00:00", "promoted")
    checked = verify(regenerated(folder))
    assert checked.evidence == "exploratory" and "ran under another plan" in checked.lines[0]


CLAIM_NOTE = ("bench/experiment/claims.py", "    text: str\n",
              "    text: str\n    note: str | None = None\n")
# a new config option, at its default, is left out of a trial's identity (sweep.trials.ADDED),
# as the project adds one, so every trial recorded before it keeps its hash
NEW_OPTION = [("bench/config.py", "    seed: int = 0", "    seed: int = 0\n    unrelated: int = 0"),
              ("bench/sweep/trials.py", 'ADDED = {("train", "schedule"): "constant"',
               'ADDED = {("train", "schedule"): "constant", ("train", "unrelated"): 0')]


@pytest.mark.parametrize("changes, moved", [
    ([CLAIM_NOTE], False),  # an optional field of Claim
    (NEW_OPTION, False),  # a new config option at its default
    ([("bench/findings/statistics/stats.py", "ALPHA = 0.05", "ALPHA = 0.01")],
     True)])  # the analysis
def test_a_schema_or_analysis_change_after_the_trials_keeps_the_registered_plan(
        tmp_path, changes, moved):
    """A clone of this repository with a grid registered and run (7 of 8 seeds for the claim:
    reproduced at alpha 0.05 by the sign test's "7 of 8"), then a harmless change committed
    (an optional field of Claim, a new config option) or alpha changed to 0.01. The plan is
    computed with the code of the commit that registered it, so bench.verify, run with the
    changed code, keeps the result confirmatory (exit 0); a change of alpha is named as a
    change of the analysis, claim by claim, never as trials that ran under another plan."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True)
    (clone / "g.yaml").write_text(yaml.safe_dump(GRID))
    commit(clone, "2030-01-02T10:00:00+00:00", "the plan")
    runs = trials(clone)
    runs.loc[(runs["seed"] == 5) & (runs["model.variant"] == A), "final_test_bpc"] = 3.0
    runs["start_time"] = "2030-01-02 11:00:00+00:00"
    folder = publish(clone, runs)
    for path, before, after in changes:
        code = clone / path
        assert before in code.read_text()
        code.write_text(code.read_text().replace(before, after, 1))
    commit(clone, "2030-01-05T10:00:00+00:00", "a change after the trials")
    ran = subprocess.run([sys.executable, "-m", "bench.verify", str(folder)], cwd=clone,
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(clone)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"{folder}: lower: reproduced, confirmatory" in ran.stdout
    assert "another plan" not in ran.stdout + ran.stderr
    assert ("today's analysis code: lower: inconclusive, confirmatory (the registered code, "
            "whose verdict stands: reproduced, confirmatory)" in ran.stdout) == moved


def test_a_missing_seed_is_unverified_and_named(repo):
    folder = edited(publish(repo, trials(repo)), lambda r: r[r["seed"] != 3])
    checked = verify(folder)
    assert checked.evidence == "unverified"
    assert ("the runs lack trials of the plan: variant=fixed seeds 3; variant=talking-heads "
            "seeds 3") in checked.lines[0]
    assert "inconclusive" in checked.lines[0]  # seed 3 of look 1 not there: no verdict


def test_a_start_time_blank_in_one_row_is_named_as_a_record_lost(repo):
    """One trial's start_time emptied (the others record theirs): unverified, and the message
    says what is true (that trial lacks a record the others have), not that every trial
    predates the records."""
    def blank(r: pd.DataFrame) -> pd.DataFrame:
        r.loc[3, "start_time"] = None
        return r

    checked = verify(edited(publish(repo, trials(repo)), blank))
    assert checked.evidence == "unverified"
    assert (f"1 of 16 confirmation trials record no start_time ({trial(B, 1)[0]}), which the "
            "others record: a record lost or removed") in checked.lines[0]


def test_a_one_row_runs_csv_says_the_runs_lack_the_first_looks_trials(repo):
    """One row of a two-look plan: unverified, naming the first look's missing trials, and not
    said to wait for a later look (the first is not complete)."""
    checked = verify(edited(publish(repo, trials(repo)), lambda r: r.iloc[:1]))
    assert checked.evidence == "unverified"
    assert "the runs lack trials of the plan: variant=fixed seeds 1, 2, 3; " \
        "variant=talking-heads seeds 0, 1, " \
        "2, 3" in checked.lines[0]
    assert "the sweep stopped before the look" not in checked.lines[0]


def test_two_rows_for_one_setting_and_seed_exit_2_naming_them(repo, capsys):
    """A second row for one setting and seed, under another trial hash: the last row no
    longer wins silently; exit 2 naming the setting, the seed and both lines."""
    folder = edited(publish(repo, trials(repo)), lambda r: pd.concat(
        [r, r[(r["seed"] == 3) & (r["model.variant"] == B)].assign(trial="b3x",
                                                                      final_test_bpc=0.5)]))
    assert verify_cmd.main([str(folder)]) == 2
    assert ("setting model.variant=talking-heads at seed 3 appears 2 times (lines 9 and 18; "
            f"trial {trial(B, 3)[0]!r} and 'b3x')") in capsys.readouterr().err


def test_a_run_commit_older_than_its_parent_is_exploratory(repo):
    """The trials ran from a commit backdated to before its parent: a date that cannot be
    true."""
    (repo / "note.txt").write_text("x")
    backdated = commit(repo, "2026-01-02T09:00:00+00:00")  # its parent: 10:00
    checked = verify(publish(repo, trials(repo)))
    assert checked.evidence == "exploratory"
    assert f"commit {backdated[:10]} is dated 2026-01-02 09:00:00 UTC, before its parent" in \
        checked.lines[0]


def test_a_run_commit_made_after_its_trials_started_is_exploratory(repo):
    (repo / "note.txt").write_text("x")
    late = commit(repo, "2026-01-02T12:00:00+00:00")  # the trials record RAN, 11:00
    checked = verify(publish(repo, trials(repo)))
    assert checked.evidence == "exploratory"
    assert (f"run commit {late[:10]} is dated 2026-01-02 12:00:00 UTC, after trial "
            f"{trial(A, 0)[0]}") in \
        checked.lines[0]


def test_a_folder_copied_under_another_parent_is_recognised_by_its_trials(repo):
    folder = publish(repo, trials(repo))
    copy = repo / "elsewhere" / "deeper" / "g"
    shutil.copytree(folder, copy)
    commit(repo, "2026-01-04T10:00:00+00:00", "a copy")
    checked = verify(copy)
    said = "Shared runs: of these 16 trials, all are trials of {} too"
    assert said.format("results/g") in checked.shared
    assert said.format("elsewhere/deeper/g") in verify(folder).shared


def test_every_module_that_can_move_a_verdict_is_part_of_the_plan():
    """The registered analysis (`plan.ANALYSIS`) holds every module of bench that the
    verdict's code imports, save those that only parse the grid file (whose output the plan
    holds as data: the claims, looks, seeds), name an error or say which other results share
    the trials: reading runs.csv, the claims, the statistics, the sequence, the registration
    check and the verification among them."""
    import ast

    parse_only = {"bench/config.py", "bench/experiment/grid.py", "bench/experiment/open.py",
                  "bench/experiment/catalogue.py", "bench/findings/provenance/shared.py"}
    seen, todo = set(), list(plan.ANALYSIS)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith(
                    ("bench", "variants"))):
                base = Path(path).parent
                for _ in range(node.level - 1):
                    base = base.parent
                module = (base.as_posix().replace("/", ".") + "." + (node.module or "")
                          if node.level else node.module).strip(".")
                names = [f"{module}.{a.name}" for a in node.names] + [module]
                for name in names:
                    file = name.replace(".", "/") + ".py"
                    if (ROOT / file).is_file() and file not in parse_only:
                        todo.append(file)
    assert seen <= set(plan.ANALYSIS), sorted(seen - set(plan.ANALYSIS))
    assert "bench/findings/reading/perseed.py" in seen and "bench/experiment/claims.py" in seen


BAD = {
    "an empty runs.csv": (lambda f: (f / "runs.csv").write_text(""), "runs.csv: empty"),
    "a header only": (lambda f: (f / "runs.csv").write_text(
        (f / "runs.csv").read_text().splitlines()[0] + "\n"), "a header and no rows"),
    "text in model.n_heads": (lambda f: _cell(f, "model.n_heads", "four"),
                              "line 2, column model.n_heads: 'four' is not one of the grid's "
                              "values (2, 4, 8)"),
    "no seed column": (lambda f: _drop(f, "seed", "train.seed"),
                       "no seed column (seed or train.seed)"),
    "text in every start_time": (lambda f: _cell(f, "start_time", "soon", every=True),
                                 "line 2, column start_time: 'soon' is not a time"),
    "no claim metric": (lambda f: _drop(f, "test_probe_bpc.recall"),
                        "no column test_probe_bpc.recall, which claims.0 (th_beats_mh_at_8)"),
    "no model.variant": (lambda f: _drop(f, "model.variant"),
                         "no column model.variant, an axis of grid heads_grid"),
    "NA for a number": (lambda f: _cell(f, "test_probe_bpc.recall", "NA"),
                        "line 2, column test_probe_bpc.recall: 'NA' is not a number"),
    "inf bits": (lambda f: _cell(f, "test_probe_bpc.recall", "inf"),
                 "line 2, column test_probe_bpc.recall: inf is not a finite number"),
    "1e999 bits": (lambda f: _cell(f, "test_probe_bpc.recall", "1e999"),
                   "line 2, column test_probe_bpc.recall: inf is not a finite number"),
    "nan bits": (lambda f: _cell(f, "final_test_bpc", "nan"),
                 "line 2, column final_test_bpc: 'nan' is not a number"),
    "negative bits": (lambda f: _cell(f, "test_probe_bpc.recall", "-0.5"),
                      "line 2, column test_probe_bpc.recall: -0.5 is below 0, the least "
                      "test_probe_bpc.recall can be"),
    "1e308 bits per answer": (lambda f: _cell(f, "test_probe_bpc.recall", "1e308"),
                              "line 2, column test_probe_bpc.recall: 1e+308 is above 7.2, the "
                              "most test_probe_bpc.recall can be: log2 of the corpus's 147 "
                              "symbols, what a uniform guess pays"),
    "test bpc above a uniform guess": (lambda f: _cell(f, "final_test_bpc", "7.25"),
                                       "line 2, column final_test_bpc: 7.25 is above 7.2, the "
                                       "most final_test_bpc can be"),
    "a fractional seed": (lambda f: _cell(f, "seed", "300.5"),
                          "line 2, column seed: 300.5 is not a seed (a whole number"),
    "a seed past int64": (lambda f: _cell(f, "train.seed", "1e20"),
                          "line 2, column train.seed: 1e+20 is not a seed (a whole number"),
    "an empty grid.yaml": (lambda f: (f / "grid.yaml").write_text(""),
                           "grid.yaml: empty: a grid file is a YAML mapping"),
    "a grid.yaml not YAML": (lambda f: (f / "grid.yaml").write_text("name: [\n"),
                             "grid.yaml: not YAML: expected the node content, but found "
                             "'<stream end>' at line 2, column 1"),
    "a grid.yaml of a list": (lambda f: (f / "grid.yaml").write_text("- 1\n"),
                              "grid.yaml: a list, not a mapping"),
    "an empty findings.csv": (lambda f: (f / "findings.csv").write_text(""),
                              "findings.csv: empty"),
    "a plan.json that is not JSON": (lambda f: (f / "plan.json").write_text("{plan"),
                                     "plan.json: not JSON"),
    "a plan.json that is not a mapping": (lambda f: (f / "plan.json").write_text("[]"),
                                          "plan.json: not a plan record"),
    "a plan record without its files": (
        lambda f: (f / "plan.json").write_text('{"735f81f182349228": {"plan": {}}}'),
        "plan.json: 735f81f182349228.files: Field required"),
    "a no-recall floor edited to 0": (
        lambda f: _cell(f, "dataset.no_recall.recall", "0"),
        "line 2, column dataset.no_recall.recall: 0.0 recorded, expected 0.4225554806839766 "
        "from the grid's data"),
    "a no-recall floor edited up": (
        lambda f: _cell(f, "dataset.no_recall.recall", "5"),
        "line 2, column dataset.no_recall.recall: 5.0 recorded, expected 0.4225554806839766"),
}


def _cell(folder: Path, column: str, value: str, every: bool = False) -> None:
    runs = pd.read_csv(folder / "runs.csv").astype({column: object})
    runs.loc[slice(None) if every else 0, column] = value
    runs.to_csv(folder / "runs.csv", index=False)


def _drop(folder: Path, *columns: str) -> None:
    pd.read_csv(folder / "runs.csv").drop(columns=list(columns)).to_csv(folder / "runs.csv",
                                                                        index=False)


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exits_2_naming_the_file_and_what_was_expected(tmp_path, capsys, case):
    """Each bad runs.csv or findings.csv of the review, on a copy of the committed
    confirmation: bench.verify and bench.report --runs exit 2 with one line naming the file
    and the line or column, never a traceback or a silent verdict."""
    folder = tmp_path / "heads_grid"
    shutil.copytree(ROOT / "results" / "heads_grid" / "seeds300", folder)
    make, said = BAD[case]
    make(folder)
    commands = [lambda: verify_cmd.main([str(folder)])]
    if "findings" not in case:
        commands.append(lambda: report_cmd.main([str(folder / "grid.yaml"), "--runs",
                                                 str(folder / "runs.csv"), "--out",
                                                 str(tmp_path / "out")]))
    for main in commands:
        assert main() == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bits_are_bounded_by_the_vocabulary_of_the_corpus_the_runs_trained_on(tmp_path):
    """The enwik8 pilot of adaptive_vs_dynamic ran the synthetic grid (72 symbols: log2 72 =
    6.17 bits) with `--data enwik8` (256 symbols, as runs.csv's dataset.name says): 6.5 test
    bpc is a number an enwik8 model can pay; 8.5, more than a uniform guess over bytes, is
    refused."""
    folder = ROOT / "results" / "adaptive_vs_dynamic" / "pilot-seeds0-enwik8"
    grid = open_grid(folder / "grid.yaml", imports=False)
    assert perseed.vocabulary(grid) == 72 and perseed.vocabulary(grid, ["enwik8"]) == 256
    shutil.copytree(folder, tmp_path / "pilot")
    _cell(tmp_path / "pilot", "final_test_bpc", "6.5")
    assert perseed.read(tmp_path / "pilot" / "runs.csv", grid).at[0, "final_test_bpc"] == 6.5
    _cell(tmp_path / "pilot", "final_test_bpc", "8.5")
    with pytest.raises(ConfigError, match="8.5 is above 8, the most final_test_bpc can be: "
                                          "log2 of the corpus's 256 symbols"):
        perseed.read(tmp_path / "pilot" / "runs.csv", grid)


def test_every_committed_plan_is_recorded_whole_beside_its_runs():
    """Each committed result whose rows record a plan_sha holds that plan in plan.json (written
    once from the code of its run commit for the results that predate the record): its hash is
    the plan_sha, and the files it names, read from git at the run commit and hashed as it says,
    give its analysis version."""
    found = 0
    for runs_csv in sorted((ROOT / "results").rglob("runs.csv")):
        rows = pd.read_csv(runs_csv, dtype=str)
        if "plan_sha" not in rows or rows["plan_sha"].isna().all():
            continue
        records = perseed.read(runs_csv).attrs["plans"]
        for sha, ran_at in set(zip(rows["plan_sha"], rows["run_commit"], strict=True)):
            record = records[sha]
            assert plan.digest(record.plan) == sha, runs_csv
            files = {p: git(ROOT, "show", f"{ran_at}:{p}").encode() for p in record.files}
            assert plan.version(files, record.files, record.hashed) == record.plan["analysis"]
            found += 1
    assert found >= 7  # the six that predate the record, and window_cost/seeds200


def test_todays_checks_apply_to_a_result_registered_under_older_code():
    """The review's seeds300 relabel: seed 303 relabelled 308 (outside the registered 300-307)
    in a copy of the committed confirmation (in this repository, under the ignored runs/, so
    git holds its plan and registered code). The registered code (76e72e11b4) decides the
    statistics, but today's checks of what counts as a valid result decide the evidence:
    exploratory, the seed named, never the registered code's "confirmatory"."""
    (ROOT / "runs").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT / "runs", prefix="relabelled-") as scratch:
        folder = Path(scratch) / "heads_grid"
        shutil.copytree(ROOT / "results" / "heads_grid" / "seeds300", folder)
        runs = pd.read_csv(folder / "runs.csv")
        runs.loc[runs["seed"] == 303, "seed"] = 308
        runs.to_csv(folder / "runs.csv", index=False)
        checked = verify(folder)
        named = differs(folder / "findings.md", regenerate(checked))
    assert checked.evidence == "exploratory"
    assert all("exploratory" in line and "seeds 308" in line for line in checked.lines), \
        checked.lines
    assert not any("reproduced, confirmatory" in line for line in checked.lines)
    # the registered code's page, its table relabelled by today's checks: the copied page's
    # "confirmatory" cells and pre-registration line are named
    assert any("(th_beats_mh_at_8), evidence: 'confirmatory' on the page, 'exploratory' "
               "regenerated" in d for d in named), named
    assert any("'Pre-registration: confirmatory" in d and "'Pre-registration: exploratory" in d
               for d in named), named


def test_a_change_that_moves_a_verdict_is_caught(monkeypatch):
    """Today's analysis changed so that a verdict moves (the earlier family rule, each claim's
    own contrary not counted): bench.verify on a committed result it recomputes with today's
    code names the claim whose verdict differs from its committed findings.csv."""
    from bench.findings.statistics import sequential
    from tests.helpers import old_rule

    folder = ROOT / "results" / "span_limit" / "seeds400"
    assert verify(folder).differ == []
    monkeypatch.setattr(sequential, "family", old_rule)
    assert "adaptive_matches_fixed: verdict 'inconclusive' committed, 'reproduced' recomputed" \
        in verify(folder).differ


def test_a_result_whose_grid_and_plugin_moved_keeps_its_registered_verdict():
    """results/window/seeds100 ran ablations/window.yaml with its plugin at
    examples/window_plugin.py, which now lies beside the grid (ablations/window.py,
    catalogue.MOVED): the registered code, taken from git, reads today's grid file where it
    holds the grid that ran, its plugin found, and the verdict stays confirmatory."""
    from bench.findings.provenance.verify import _grid_read

    checked = verify(ROOT / "results" / "window" / "seeds100")
    assert checked.differ == [] and checked.evidence == "confirmatory"
    assert checked.lines == ["window_not_worse_than_fixed: reproduced, confirmatory"]
    moved = ROOT / "results" / "heads_grid" / "seeds900-data7"  # plan_file heads_grid_data7.yaml
    assert _grid_read(moved, ROOT) == ROOT / "ablations" / "heads_grid.data7.yaml"
    assert _grid_read(ROOT / "results" / "heads_grid" / "seeds300", ROOT) == \
        ROOT / "results" / "heads_grid" / "seeds300" / "grid.yaml"  # the grid changed since
