"""One way to open an experiment (`bench.experiment.open`): a grid file, or its text from git or
the MLflow store, read, validated, its plugins found beside it, the overrides applied; written
back (`to_text`) it opens as the same grid; retagging rewrites a result's grid through the
schema, in any YAML style. Fast: no Ray, no training."""

import ast
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bench.config import ConfigError, parse_sets
from bench.experiment.open import GridText, Overrides, open_grid, read, to_text
from bench.sweep.migration import migrate_folder

ROOT = Path(__file__).resolve().parents[1]
GRIDS = sorted([*(ROOT / "ablations").glob("*.yaml"), *(ROOT / "examples").glob("*.yaml"),
                *(ROOT / "results").rglob("grid.yaml")])


@pytest.mark.parametrize("path", GRIDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_grid_written_back_opens_as_the_same_grid(path):
    grid = read(path)
    assert read(GridText(to_text(grid), "written", path.parent)) == grid


def test_the_plan_under_overrides_is_written_whole():
    """--set, --seed-start and the plugin's resolved path are in the text a sweep logs."""
    plan = open_grid(ROOT / "ablations" / "heads_grid.yaml",
                     Overrides(parse_sets(["train.steps=7", "model.n_heads=4"]), seed_start=50))
    again = read(GridText(to_text(plan), "logged", Path("/nowhere")))
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
    assert sorted(calls) == ["bench/config.py", "bench/experiment/open.py"]


def test_a_grid_that_cannot_be_read_is_named(tmp_path):
    with pytest.raises(ConfigError, match=f"grid file {tmp_path / 'absent.yaml'}: cannot be read"):
        open_grid(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match=f"grid file {tmp_path / 'bad.yaml'}: not YAML"):
        open_grid(tmp_path / "bad.yaml")


def test_retag_renames_through_the_schema_in_any_style(tmp_path):
    """A result's grid.yaml in block style naming the earlier `dynamic` everywhere a variant
    stands (an axis, the base, a claim's rows, the report's baseline) is rewritten at today's
    name, and opens as the grid it was with only that name changed."""
    smoke = yaml.safe_load((ROOT / "ablations" / "smoke.yaml").read_text())
    raw = {**smoke, "grid": {"model.variant": ["fixed", "dynamic"]},
           "base": {**smoke["base"], "model": {"variant": "dynamic"}},
           "report": {"baseline": {"model.variant": "dynamic"}}, "design_seeds": [],
           "claims": [{"id": "c", "text": "t", "rows": {"model.variant": "dynamic"},
                       "baseline": {"model.variant": "fixed"}, "metric": "final_test_bpc",
                       "expect": "less", "test": "sign"}]}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(raw, default_flow_style=False))
    assert "- dynamic\n" in (tmp_path / "grid.yaml").read_text()  # block style
    pd.DataFrame({"seed": [0], "model.variant": ["dynamic"]}).to_csv(tmp_path / "runs.csv",
                                                                     index=False)
    changed = migrate_folder(tmp_path)
    assert changed["grid names"] == 1 and changed["names"] == 1
    text = (tmp_path / "grid.yaml").read_text()
    assert "dynamic-span" in text and not [w for w in text.split() if w.strip("[],:'") ==
                                           "dynamic"]
    grid = read(tmp_path / "grid.yaml")
    assert grid.grid["model.variant"] == ["fixed", "dynamic-span"]
    assert grid.base.model["variant"] == "dynamic-span"
    assert grid.claims[0].rows == {"model.variant": "dynamic-span"}
    assert grid.report.baseline == {"model.variant": "dynamic-span"}
    assert migrate_folder(tmp_path)["grid names"] == 0  # once
