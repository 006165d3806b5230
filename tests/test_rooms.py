"""The rooms' import rules, one table (`[tool.importlinter]` in pyproject.toml), checked over the
whole tree by import-linter; a module that breaks one is named with its line and the rule."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.limits import HANG

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(where: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(where)}  # this tree's packages, not the installed
    return subprocess.run([str(LINT), "--no-logo", "--no-cache"], cwd=where, env=env,
                          capture_output=True, text=True, timeout=HANG)


def test_every_module_keeps_the_rooms_rules():
    done = lint(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 broken" in done.stdout and "12 kept" in done.stdout


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


def test_the_findings_layers_are_kept_with_their_lines_and_rules(tmp_path):
    """The findings in layers (statistics | reading < decision < provenance < presentation):
    the statistics reaching for pandas and git's subprocess, the reading reaching up into the
    decision, and the decision reaching up into a page are each refused, with the line and the
    rule; an import down the layers is not."""
    for part in ("bench", "variants", "pyproject.toml"):
        (shutil.copytree if (ROOT / part).is_dir() else shutil.copy)(ROOT / part, tmp_path / part)
    findings = tmp_path / "bench" / "findings"
    (findings / "statistics" / "leak.py").write_text(
        '"""A leak."""\n\nimport subprocess  # noqa: F401\n\nimport pandas  # noqa: F401\n')
    (findings / "reading" / "up.py").write_text(
        '"""Up."""\nfrom bench.findings.decision import verdicts  # noqa: F401\n')
    (findings / "decision" / "page.py").write_text(
        '"""A page."""\nfrom bench.findings.presentation import tables  # noqa: F401\n')
    (findings / "presentation" / "down.py").write_text(
        '"""Down."""\nfrom bench.findings.provenance import prereg  # noqa: F401\n')
    done = lint(tmp_path)
    assert done.returncode == 1
    out = " ".join(done.stdout.split())
    assert "The statistics import numpy and scipy" in out
    assert "bench.findings.statistics.leak -> subprocess (l.3)" in out
    assert "bench.findings.statistics.leak -> pandas (l.5)" in out
    assert "The findings in layers, top to bottom" in out
    assert "bench.findings.reading.up -> bench.findings.decision.verdicts (l.2)" in out
    assert "bench.findings.decision.page -> bench.findings.presentation.tables (l.2)" in out
    assert "presentation.down" not in out


def functions() -> list[tuple[str, ast.FunctionDef]]:
    """Every function and method under bench/ and variants/, with where it is."""
    out = []
    for path in sorted([*(ROOT / "bench").rglob("*.py"), *(ROOT / "variants").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append((f"{path.relative_to(ROOT)}:{node.lineno} {node.name}", node))
    return out


def test_functions_are_short_and_take_few_parameters():
    """No function in bench/ or variants/ over 60 lines, none with more than 6 parameters (self
    aside, keyword-only ones counted): state travels as objects, not argument lists."""
    long, wide = [], []
    for where, node in functions():
        a = node.args
        params = [p.arg for p in [*a.posonlyargs, *a.args] if p.arg not in ("self", "cls")]
        params += [p.arg for p in a.kwonlyargs]
        if node.end_lineno - node.lineno + 1 > 60:
            long.append(where)
        if len(params) > 6:
            wide.append(f"{where}: {len(params)}")
    assert not long and not wide, (long, wide)


def test_options_are_declared_as_types_never_read_from_signatures():
    """Nothing under bench/ or variants/ reads a signature or fakes one (`__signature__`) to
    learn what a part takes: options are the fields of the classes that declare them. The one
    signature read is `variants.typed.check_api`, which refuses a plugin of the earlier API
    and writes the Options class it should declare."""
    reads = []
    for path in sorted([*(ROOT / "bench").rglob("*.py"), *(ROOT / "variants").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "inspect":
                reads += [f"{path.relative_to(ROOT)}:{node.lineno} {a.name}" for a in node.names]
            if not isinstance(node, ast.Attribute):
                continue
            of_inspect = isinstance(node.value, ast.Name) and node.value.id == "inspect"
            if node.attr == "__signature__" or of_inspect and node.attr in (
                    "signature", "Parameter", "getfullargspec", "Signature"):
                reads.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.attr}")
    assert [r.split(":")[0] for r in reads] == ["variants/typed.py"], reads


def test_the_command_line_stays_in_commands():
    """argparse (the command line) is imported by the commands alone (bench/<name>.py for each
    of `bench.cli.COMMANDS`, and bench/cli.py, the arguments they share): a sweep, a report or a
    run takes typed options, never a Namespace."""
    from bench.cli import COMMANDS

    line = {ROOT / "bench" / f"{name}.py" for name in (*COMMANDS, "cli")}
    assert all(p.is_file() for p in line), line
    found = [str(p.relative_to(ROOT)) for p in (ROOT / "bench").rglob("*.py")
             if p not in line and "argparse" in {
                 a.name.split(".")[0] for n in ast.walk(ast.parse(p.read_text()))
                 if isinstance(n, ast.Import | ast.ImportFrom)
                 for a in (n.names if isinstance(n, ast.Import) else [ast.alias(n.module or "")])}]
    assert not found, found


def test_every_command_is_its_own_module():
    """`python -m bench.<name>` runs bench/<name>.py itself, no entry module in between: each
    command module has `main` and runs it as __main__, and bench/ holds no other module that
    does."""
    from bench.cli import COMMANDS

    mains = sorted(p.stem for p in (ROOT / "bench").glob("*.py")
                   if 'if __name__ == "__main__":' in p.read_text())
    assert mains == sorted(COMMANDS)
