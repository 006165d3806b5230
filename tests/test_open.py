"""One way to open an experiment (`bench.experiment.open`): a grid file, or its text from git or
the MLflow store, read, validated, its plugins found beside it, the overrides applied; written
back (`to_text`) it opens as the same grid. Fast: no Ray, no training."""

import ast
from pathlib import Path

import pytest

from bench.config import ConfigError, parse_sets
from bench.experiment.open import GridText, Overrides, load_grid, open_grid, to_text

ROOT = Path(__file__).resolve().parents[1]
GRIDS = sorted([*(ROOT / "ablations").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml"),
                *(ROOT / "results").rglob("grid.yaml")])


@pytest.mark.parametrize("path", GRIDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_grid_written_back_opens_as_the_same_grid(path):
    grid = load_grid(path)
    assert load_grid(GridText(to_text(grid), "written", path.parent)) == grid


def test_the_plan_under_overrides_is_written_whole():
    """--set, --seed-start and the plugin's resolved path are in the text a sweep logs."""
    plan = open_grid(ROOT / "ablations" / "heads_grid.yaml",
                     Overrides(parse_sets(["train.steps=7", "model.n_heads=4"]), seed_start=50))
    again = load_grid(GridText(to_text(plan), "logged", Path("/nowhere")))
    assert again == plan and again.base.train["steps"] == 7
    assert again.grid["model.n_heads"] == [4] and again.seeds.start == 50


def test_only_the_open_function_parses_a_grid_files_yaml():
    """No module of bench/ but bench/experiment/open.py calls yaml.safe_load, except the
    --set parser (a value, not a grid file)."""
    calls = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in ("safe_load", "load")
                    and isinstance(node.value, ast.Name) and node.value.id == "yaml"):
                calls.append(str(path.relative_to(ROOT)))
    assert sorted(set(calls)) == ["bench/config.py", "bench/experiment/open.py"]


def test_a_grid_that_cannot_be_read_is_named(tmp_path):
    with pytest.raises(ConfigError, match=f"grid file {tmp_path / 'absent.yaml'}: cannot be read"):
        open_grid(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match=f"grid file {tmp_path / 'bad.yaml'}: not YAML"):
        open_grid(tmp_path / "bad.yaml")


