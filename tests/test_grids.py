"""Every grid says what it is (`status:`), and docs/grids.md, the table of every grid with its
experiment, status, results and verdicts, is generated from the grid files, never stale."""

from pathlib import Path

import pytest
import yaml

from bench import grids as command
from bench import run
from bench.config import ConfigError
from bench.experiment import catalogue
from bench.experiment.open import open_grid
from bench.findings import sequential
from bench.findings.stats import ALPHA
from bench.provenance import RESULTS
from bench.sweep import feasible

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "ablations" / "smoke.yaml"


def test_the_committed_table_is_what_the_grids_give(capsys):
    """docs/grids.md is generated: a grid file or a result added without rerunning
    `python -m bench.grids` fails here."""
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


def test_the_table_lists_results_folders_and_their_verdicts():
    text = (ROOT / "docs" / "grids.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| span_enwik8_floor | "
                                                                       "[`span_enwik8`]"))
    assert "superseded by `span_enwik8_floor`" in row
    assert "`results/enwik8-prefix/span_enwik8/`: 3 reproduced, 1 inconclusive" in row
    main = next(line for line in text.splitlines() if line.startswith("| heads_grid | "
                                                                        "[`heads_grid`]"))
    assert "`results/seeds600/heads_grid/`: 5 reproduced (confirmatory)" in main
    assert "`results/design/heads_grid/`: 5 holds (exploratory)<br>" in main  # said once


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
    assert run.main([str(ROOT / "ablations" / "heads_h8_long.yaml"), "--dry-run"]) == 0
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
