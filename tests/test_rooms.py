"""The rooms' import rules, one table (`[tool.importlinter]` in pyproject.toml), checked over the
whole tree by import-linter; a module that breaks one is named with its line and the rule."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(where: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(where)}  # this tree's packages, not the installed
    return subprocess.run([str(LINT), "--no-logo", "--no-cache"], cwd=where, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_module_keeps_the_rooms_rules():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 broken" in done.stdout and "7 kept" in done.stdout


def test_an_import_across_rooms_is_named_with_its_line_and_rule(tmp_path):
    """The findings room reaching into the one-run room (a direct import at line 3), and the
    data room reaching up into the run's schema: both refused, each with its rule."""
    for part in ("bench", "variants", "pyproject.toml"):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, tmp_path / part)
    (tmp_path / "bench" / "findings" / "leak.py").write_text(
        '"""A leak."""\n\nfrom bench.training import loop  # noqa: F401\n')
    (tmp_path / "bench" / "data" / "up.py").write_text('"""Up."""\nimport bench.config\n')
    done = lint(tmp_path)
    assert done.returncode == 1
    out = " ".join(done.stdout.split())
    assert "bench.findings.leak -> bench.training.loop (l.3)" in out
    assert "bench.data.up -> bench.config (l.2)" in out
    assert "The findings read runs, never make them" in out and "BROKEN" in out
    assert "The rooms, top to bottom" in out
