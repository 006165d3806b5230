"""The quick path (python -m bench.new) writes a grid file bench.run accepts: one claim against
multi-head, its looks the fewest (FIRST stretched) with power 0.8 at q 0.9; bad input exits 2
and writes nothing."""

import shutil

import pytest

from bench import new, run
from bench.experiment.open import open_grid
from bench.sweep import feasible, sizing
from tests.helpers import ROOT

PLUGIN = ROOT / "ablations" / "window.py"


@pytest.mark.parametrize("expect", ["better", "not-worse"])
def test_the_grid_written_is_sized_and_runs(expect, clean, tmp_path, capsys):
    shutil.copy(PLUGIN, tmp_path)
    out = tmp_path / "window.yaml"
    assert new.main(["window", "--plugin", str(tmp_path / PLUGIN.name), "--expect", expect,
                     "--set", "model.span=64", "--set", "model.attn.keep=40",
                     "--out", str(out)]) == 0
    grid = open_grid(out)
    (c,) = grid.claims
    assert grid.grid == {"model.variant": ["fixed", "window"]} and grid.plugins
    assert c.test == ("sign-flip" if expect == "better" else "sign")
    assert grid.base.model["span"] == 64 and grid.base.model["attn"]["keep"] == 40
    looks = tuple(grid.seeds.looks)

    def power(n: int) -> float:
        seeds = grid.seeds.model_copy(update={"looks": list(sizing.stretched(new.FIRST, n))})
        return feasible.rates(grid.claims, grid.grid, seeds, (new.Q,))[f"power q {new.Q:g}"][0]

    assert power(looks[-1]) >= 0.8
    assert looks == new.FIRST or power(looks[-1] - 1) < 0.8
    capsys.readouterr()
    assert run.main([str(out), "--dry-run"]) == 0


def test_bad_input_exits_2_and_writes_nothing(clean, tmp_path, capsys):
    out = tmp_path / "g.yaml"
    assert new.main(["window", "--plugin", str(tmp_path / "none.py"), "--out", str(out)]) == 2
    assert "--plugin" in capsys.readouterr().err and not out.exists()
    out.write_text("kept")
    assert new.main(["fixed", "--against", "gbma", "--out", str(out)]) == 2
    assert out.read_text() == "kept"
    assert new.main(["nope", "--out", str(tmp_path / "h.yaml")]) == 2
    assert "nope" in capsys.readouterr().err and not (tmp_path / "h.yaml").exists()
    assert new.main(["fixed", "--out", str(tmp_path / "nowhere" / "g.yaml")]) == 2
    assert f"no folder {tmp_path / 'nowhere'}" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()
