"""Every grid says what it is (`status:`); every committed run lies in its experiment's folder
(results/<experiment>/<run>/); each experiment's README and their index, docs/grids.md, are
generated from the grid files and the findings, never stale."""

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench import grids as command
from bench import run
from bench.config import ConfigError
from bench.experiment import catalogue
from bench.experiment.open import open_grid
from bench.findings.presentation import folders
from bench.findings.statistics import sequential
from bench.findings.statistics.stats import ALPHA
from bench.provenance import RESULTS
from bench.sweep import feasible
from bench.sweep.trials import resolve_trials

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "examples" / "smoke.yaml"


def test_the_committed_pages_are_what_the_grids_give(capsys):
    """docs/grids.md and every results/<experiment>/README.md are generated: a grid file or a
    result added without rerunning `python -m bench.grids` fails here."""
    assert command.main(["--check"]) == 0, capsys.readouterr().out


def test_every_grid_declares_its_status_and_each_experiment_has_one_primary():
    found = catalogue.entries(ROOT / "ablations", RESULTS)
    assert len(found) == len(list((ROOT / "ablations").glob("*.yaml")))
    assert not [e.file.name for e in found if "status" not in e.grid.model_fields_set]
    experiments = catalogue.experiments(found)
    for name in set(experiments.values()):
        primary = [e.grid.name for e in found
                   if experiments[e.grid.name] == name and e.grid.status == "primary"]
        assert primary == [name]
    refused = {e.grid.name: e.grid.superseded_by for e in found if e.grid.status == "superseded"}
    assert refused == dict.fromkeys(["span_enwik8", "span_enwik8_restated",
                                     "span_enwik8_adamw"], "span_enwik8_floor")


def test_every_committed_run_lies_in_its_experiments_folder():
    """results/<experiment>/<run>/: every folder holding a runs.csv or findings.csv (results/speed
    and results/baselines aside, no grid's runs) is a run folder two levels down, in the folder
    of its grid's experiment, named as catalogue.RUN_NAMES says: `pilot-` exactly where its
    findings are exploratory (or its grid is a pilot), its first seed, the grid where not the
    primary's."""
    found = catalogue.entries(ROOT / "ablations", RESULTS)
    experiment = catalogue.experiments(found)
    owner = {f: e.grid for e in found for f in e.folders}
    held = {p.parent for n in ("runs.csv", "findings.csv") for p in RESULTS.rglob(n)}
    assert held <= set(owner), sorted(held - set(owner))
    for folder, grid in owner.items():
        assert folder.parent.parent == RESULTS and folder.parent.name == experiment[grid.name]
        m = re.fullmatch(r"(pilot-)?seeds(\d+)(-[\w.-]+)?", folder.name)
        assert m, folder
        if (folder / "runs.csv").is_file():
            seeds = pd.read_csv(folder / "runs.csv")["seed"]
            assert int(m[2]) == seeds.min(), folder
        tag = grid.name.removeprefix(f"{experiment[grid.name]}_")
        assert grid.name == experiment[grid.name] or (m[3] or "").startswith(f"-{tag}"), folder
        if (folder / "findings.csv").is_file() or grid.status == "pilot":
            exploratory = grid.status == "pilot" or set(
                pd.read_csv(folder / "findings.csv")["evidence"].dropna()) == {"exploratory"}
            assert bool(m[1]) == exploratory, folder


def test_the_main_jobs_readme_shows_every_run_its_verdicts_and_figures():
    """One click from the top README: results/heads_grid/README.md names the main job's grids,
    its claims in their tested order, a row per run with the verdicts its findings.csv gives
    (catalogue.verdicts), and links to files that exist."""
    top = (ROOT / "README.md").read_text()
    assert "(results/heads_grid/README.md)" in top
    folder = RESULTS / "heads_grid"
    text = (folder / "README.md").read_text()
    grid = open_grid(ROOT / "ablations" / "heads_grid.yaml", imports=False)
    ids = [c.id for c in grid.claims]
    assert [text.index(f"{i}. `{c}`:") for i, c in enumerate(ids, 1)] == sorted(
        text.index(f"{i}. `{c}`:") for i, c in enumerate(ids, 1))
    runs = sorted(p for p in folder.iterdir() if p.is_dir())
    listed = re.findall(r"^\| \[`([^`]+)/`\]", text, re.M)  # the README's run rows
    assert sorted(listed) == [p.name for p in runs] and len(runs) >= 9
    for one in runs:
        row = next(line for line in text.splitlines() if line.startswith(f"| [`{one.name}/`]"))
        said = catalogue.verdicts(one) or "no findings: descriptive"
        assert row.endswith(f"| {said} |"), row
    assert "| [`seeds600/`](seeds600/) | `heads_grid` | 600-611 (12) | synthetic, 2,000,000 " \
        "bytes, sha256 afdc5f65 | 5 reproduced (confirmatory) |" in text
    assert "Design, prediction and log, by hand: [NOTES.md](NOTES.md)." in text
    assert "Headline figures ([`seeds600/`](seeds600/))" in text
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert [link for link in links if not (folder / link).exists()] == []
    index = (ROOT / "docs" / "grids.md").read_text()
    assert "| [heads_grid](../results/heads_grid/README.md) | [`heads_grid`]" in index


def test_a_findings_change_makes_the_readme_stale(tmp_path):
    """The pages are regenerated from the findings: a verdict changed in a run's findings.csv
    changes its experiment's README row (what `bench.grids --check` compares), and a run folder
    added appears in the index's count."""
    (tmp_path / "ablations").mkdir()
    shutil.copy(ROOT / "ablations" / "window.yaml", tmp_path / "ablations")
    shutil.copytree(RESULTS / "window", tmp_path / "results" / "window")
    found = catalogue.entries(tmp_path / "ablations", tmp_path / "results")
    before = folders.pages(found, tmp_path)
    readme = tmp_path / "results" / "window" / "README.md"
    assert before[readme] == (RESULTS / "window" / "README.md").read_text()
    path = tmp_path / "results" / "window" / "seeds100" / "findings.csv"
    table = pd.read_csv(path)
    table["verdict"] = "inconclusive"
    table.to_csv(path, index=False)
    (tmp_path / "results" / "window" / "seeds200").mkdir()
    (tmp_path / "results" / "window" / "seeds200" / "NOTES.md").write_text("planned\n")
    found = catalogue.entries(tmp_path / "ablations", tmp_path / "results")
    after = folders.pages(found, tmp_path)
    assert "| 1 inconclusive (confirmatory) |" in after[readme] != before[readme]
    assert "| [`seeds200/`](seeds200/) | `window` |  |  | no findings: descriptive |" in \
        after[readme]
    assert "| [window](../results/window/README.md) | [`window`](../ablations/window.yaml) " \
        "primary | 2 |" in after[tmp_path / "docs" / "grids.md"]


def test_an_experiments_files_are_found_by_its_name():
    """ablations/E.yaml and ablations/E.<variation>.yaml (catalogue.FILES): `ls ablations/E*`
    lists every grid of experiment E and the plugin they load; its README links them and its
    notes, and says each run's data (the two adaptive_vs_dynamic pilots share one grid.yaml
    text, on enwik8 and on the synthetic corpus)."""
    found = catalogue.entries(ROOT / "ablations", RESULTS)
    experiment = catalogue.experiments(found)
    catalogue.check_names(found)
    for e in found:
        assert e.file.name.split(".")[0] == experiment[e.grid.name], e.file
    window = (RESULTS / "window" / "README.md").read_text()
    assert "[`ablations/window.py`](../../ablations/window.py)" in window
    assert {p.name for p in (ROOT / "ablations").glob("window.*")} == {"window.yaml", "window.py"}
    rows = [line for line in (RESULTS / "adaptive_vs_dynamic" / "README.md").read_text()
            .splitlines() if line.startswith("| [`pilot-seeds0-")]
    assert [row.split(" | ")[3].split(",")[0] for row in rows] == ["enwik8 prefix", "synthetic"]


def test_a_grid_file_not_named_after_its_experiment_exits_2_naming_the_name_it_needs(
        tmp_path, monkeypatch, capsys):
    (tmp_path / "ablations").mkdir()
    grid_file(tmp_path / "ablations", "main")
    grid_file(tmp_path / "ablations", "main_data7", status="repeat", of="main")
    found = catalogue.entries(tmp_path / "ablations", tmp_path / "results")
    with pytest.raises(ConfigError, match=r"main_data7.yaml holds grid main_data7 of experiment "
                       r"main: expected .*/ablations/main.data7.yaml"):
        catalogue.check_names(found)
    monkeypatch.setattr(command, "ROOT", tmp_path)
    monkeypatch.setattr(command, "RESULTS", tmp_path / "results")
    assert command.main(["--check"]) == 2
    assert "expected" in capsys.readouterr().err
    (tmp_path / "ablations" / "main_data7.yaml").rename(tmp_path / "ablations" / "main.data7.yaml")
    catalogue.check_names(catalogue.entries(tmp_path / "ablations", tmp_path / "results"))


def test_a_committed_run_goes_where_out_names(tmp_path):
    """bench.run --out DIR: the run's folder (its trials, then its report) is DIR, not
    <results-dir>/<grid>/; without it, <results-dir>/<grid>/."""
    grid = open_grid(SMOKE, imports=False)
    out = tmp_path / "results" / "smoke" / "seeds0"
    trials = resolve_trials(grid, True, results_dir=tmp_path / "runs", out=out)
    assert {t.out_dir.parent for t in trials} == {out / "trials"}
    trials = resolve_trials(grid, True, results_dir=tmp_path / "runs")
    assert {t.out_dir.parent for t in trials} == {tmp_path / "runs" / "smoke" / "trials"}


def grid_file(folder: Path, name: str, **status) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(SMOKE.read_text()), "name": name,
                                    **status}))
    return path


def test_a_grid_that_leads_to_no_primary_is_named(tmp_path):
    grid_file(tmp_path, "pilot", status="design", of="missing")
    with pytest.raises(ConfigError, match=r"pilot.yaml: status 'pilot of missing' leads to "
                       r"pilot -> missing, not to a primary grid"):
        catalogue.experiments(catalogue.entries(tmp_path, tmp_path / "results"))
    grid_file(tmp_path, "missing", status="superseded", superseded_by="pilot", why="loop")
    with pytest.raises(ConfigError, match="not to a primary grid"):
        catalogue.experiments(catalogue.entries(tmp_path, tmp_path / "results"))


def test_a_superseded_grid_is_refused_naming_its_replacement(tmp_path, capsys):
    """Exit 2 before anything is built, naming the grid that replaces it and the command that
    runs it (its file lies beside)."""
    grid_file(tmp_path, "new")
    old = grid_file(tmp_path, "old", status="superseded", superseded_by="new",
                    why="its claims read raw spans")
    assert run.main([str(old), "--dry-run", "--results-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: {old}: status superseded: grid old is replaced by new (its claims "
                   f"read raw spans); run python -m bench.run {tmp_path / 'new.yaml'}")
    assert not (tmp_path / "r").exists()


def test_the_dry_run_prints_the_status(capsys):
    assert run.main([str(ROOT / "ablations" / "heads_grid.heads_h8_long.yaml"), "--dry-run"]) == 0
    assert "grid heads_h8_long: pilot of heads_grid (docs/grids.md)" in capsys.readouterr().out


# --- every primary grid designed to decide its claims (docs/claims.md) ---------------------

def primary_with_claims() -> list[str]:
    return sorted(e.grid.name for e in catalogue.entries(ROOT / "ablations", RESULTS)
                  if e.grid.status == "primary" and e.grid.claims)


@pytest.mark.parametrize("name", primary_with_claims())
def test_every_primary_grid_is_designed_to_decide_its_claims(name):
    """The standard, through the code the dry run runs: power of at least 0.8 at q 0.9 for
    every claim a test decides (`feasible.rates`, exact for the sign test), and the family's
    chance of any wrong verdict at most alpha in both readings (`sequential.worst`). A grid
    whose deciding design is out of reach is a pilot, not a primary."""
    grid = open_grid(ROOT / "ablations" / f"{name}.yaml", imports=False)
    rates = feasible.rates(grid.claims, grid.grid, grid.seeds, (0.9,))
    tested = rates[rates["test"].isin(["sign", "sign-flip"])]
    weak = tested[tested["power q 0.9"] < 0.8]
    assert weak.empty, f"{name}: power at q 0.9 below 0.8: {weak[['claim', 'power q 0.9']]}"
    contraries, budgets = feasible.family(grid.claims, grid.grid, grid.seeds)
    bound = sequential.worst(budgets, contraries, feasible.plan_of(grid.seeds)[0])
    assert max(bound.defined, bound.directional) <= ALPHA * (1 + sequential.SLACK), bound
