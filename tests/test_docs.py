"""README.md and docs/*.md name only what exists: every repository path, relative link (and its
#anchor), dotted module name and command-line option they name resolves in this checkout; and
every repository path and relative link in any Markdown file, grid file (its comments too) or
notes (NOTES.md) exists, a committed run's records as it ran aside. A failure names the file and
the line. Fast: the CLIs' parsers are captured as `main` builds them, before anything runs, and
module names are resolved from the source files, not imported."""

import argparse
import ast
import contextlib
import importlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from unittest import mock

import pandas as pd
import pytest

from tests.limits import HANG

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLIS = ("bench.run", "bench.train", "bench.report", "bench.speed", "bench.compare_outside_models",
        "bench.compare_xtransformers", "bench.flops", "bench.verify", "bench.grids",
        "bench.options", "bench.resultsdoc", "bench.new", "bench.pilot", "bench.cost",
        "ci.regression", "ci.bundle", "ci.carry")
# The top-level entries a repository path may start with.
TOPS = ("bench", "variants", "ablations", "results", "examples", "docs", "tests", "ci", ".ci",
        "runs")
# Paths the commands write at run time, named in the docs but never committed.
WRITTEN_AT_RUN_TIME = ("runs/", "results/mlflow.db", "results/mlartifacts/", "results/ray/")
# The options whose argument is a folder the command makes.
WRITES = ("--out ", "--results-dir ")
# Options of other programs the docs quote (mlflow ui, ray start, the adaptive-span reference's
# enwik8 script, pytest-xdist): not attnbench's to check.
EXTERNAL_OPTIONS = {"--backend-store-uri", "--host", "--head", "--port", "--adapt-span-cache",
                    "--user-site", "--dist"}

_TOPS = "|".join(re.escape(t) for t in TOPS)
PATH = re.compile(rf"(?<![\w./$~-])(?<!\]\()((?:{_TOPS})/[\w./-]*)")  # not a link's target
LINK = re.compile(r"\]\(([^)\s]+)\)")
MODULE = re.compile(r"(?<![\w./-])((?:bench|variants|ci)(?:\.\w+)+)(?!\.?\w)")
FILE_SUFFIXES = {"md", "py", "yaml", "json", "csv", "png", "pdf", "txt", "toml", "tex"}
# The files that name repository paths: Markdown, grid files (comments included), notes.
NAMING = ("*.md", "*.yaml", "*.yml")
# A committed run's records as it ran (results/<experiment>/<run>/): what they name is history.
RECORD = re.compile(r"results/[^/]+/[^/]+/(grid\.yaml|findings\.md)")
COMMAND = re.compile(r"python -m ((?:bench|ci)\.\w+)([^`|#;&)]*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")


class _Parsed(Exception):
    """Raised in place of parsing: `main` has built its parser."""


@cache
def cli_options(module: str) -> frozenset[str]:
    """The option strings of `module`'s argparse parser, captured when its `main` parses (so
    nothing after parsing runs)."""
    seen = []

    def capture(self, args=None, namespace=None):
        seen.append(self)
        raise _Parsed

    main = importlib.import_module(module).main
    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", capture), \
            contextlib.suppress(_Parsed):
        main(["--help"])
    assert seen, f"{module}.main never parsed its arguments"
    return frozenset(s for a in seen[0]._actions for s in a.option_strings)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) with shell continuations (a trailing backslash) joined."""
    out, buf, start = [], "", 0
    for no, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = no
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    if buf:
        out.append((start, buf))
    return out


def slugs(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    heads = re.findall(r"^#+\s+(.*)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@cache
def top_names(source: Path) -> frozenset[str]:
    """Names defined at the top of a module: functions, classes, assignments, imports."""
    names = set()
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def module_ok(dotted: str) -> bool:
    """`dotted` is a module of the repository, or a module and a name defined at its top."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if source.is_file():
            rest = parts[i:]
            return not rest or rest[0] in top_names(source)
    return False


def missing_paths(path: Path, line: str, where: str) -> list[str]:
    """The repository paths and relative links (and their #anchors) one line of `path` names
    that do not exist, each starting with `where` (the file and the line)."""
    out = []
    for m in PATH.finditer(line):
        name = m.group(1).rstrip(".")
        follows = line[m.end():m.end() + 3]
        if follows.startswith(("<", "{", "*", "...")):
            continue  # a pattern (results/<grid>/), not a path
        if name.startswith(WRITTEN_AT_RUN_TIME) or name in WRITTEN_AT_RUN_TIME:
            continue
        if line[:m.start()].endswith(WRITES):
            continue  # the folder a command makes (--out results/<experiment>/<new run>)
        if not (ROOT / name).exists():
            out.append(f"{where}: names `{name}`, which does not exist")
    for m in LINK.finditer(line):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue  # http:, mailto:
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            out.append(f"{where}: links to `{target}`, which does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in slugs(dest):
            out.append(f"{where}: links to `{target}`: no heading `#{anchor}` in {file}")
    return out


def problems(path: Path, text: str | None = None) -> list[str]:
    """What `path` (or `text`, as if it were at `path`) names that does not exist, one line each,
    starting with the file and the line."""
    rel = path.relative_to(ROOT)
    known = frozenset().union(*(cli_options(m) for m in CLIS)) | EXTERNAL_OPTIONS
    out = []
    for no, line in logical_lines(path.read_text() if text is None else text):
        where = f"{rel}:{no}"
        out += missing_paths(path, line, where)
        for m in MODULE.finditer(line):
            if m.group(1).rsplit(".", 1)[1] in FILE_SUFFIXES:
                continue  # a file name (variants.md), not a module
            if not module_ok(m.group(1)):
                out.append(f"{where}: names `{m.group(1)}`, which is no module or name of it")
        checked = set()
        for m in COMMAND.finditer(line):
            module, args = m.groups()
            if module not in CLIS:
                out.append(f"{where}: `python -m {module}` is not one of the checked CLIs")
                continue
            for opt in OPTION.findall(args):
                checked.add(opt)
                if opt not in cli_options(module):
                    out.append(f"{where}: `python -m {module}` has no option `{opt}`")
        for opt in OPTION.findall(line):
            if opt not in checked and opt not in known:
                out.append(f"{where}: `{opt}` is an option of none of {', '.join(CLIS)}")
    return list(dict.fromkeys(out))


def naming_files() -> list[Path]:
    """Every file of the checkout (tracked, or new and not ignored) that names repository paths
    (NAMING), a committed run's records (RECORD) aside."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                             "--", *NAMING], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / f for f in sorted(set(listed.stdout.decode().split("\0")))
            if f and not RECORD.fullmatch(f) and (ROOT / f).is_file()]


def stale_paths(path: Path, text: str | None = None) -> list[str]:
    """Every repository path and relative link `path` (or `text`, as if it were at `path`) names
    that does not exist, one line each, starting with the file and the line."""
    rel = path.relative_to(ROOT)
    return [problem for no, line in logical_lines(path.read_text() if text is None else text)
            for problem in missing_paths(path, line, f"{rel}:{no}")]


def test_every_path_named_in_markdown_grid_files_and_notes_exists():
    files = naming_files()
    assert ROOT / "ablations" / "heads_grid.yaml" in files  # grid files are read, comments too
    assert ROOT / "results" / "heads_grid" / "NOTES.md" in files
    assert ROOT / "results" / "heads_grid" / "seeds600" / "grid.yaml" not in files  # a record
    found = [problem for path in files for problem in stale_paths(path)]
    assert not found, "\n".join(found)


def test_the_path_check_fails_on_a_stale_path():
    """A stale path planted in a grid file's comment, in a notes file's parenthesis or link, is
    named with its file and line; a run folder's grid.yaml and findings.md are records."""
    grid = "# Design, prediction and log: results/heads_grid/seeds100/NOTES.md\nname: g\n"
    assert stale_paths(ROOT / "ablations" / "g.yaml", grid) == [
        "ablations/g.yaml:1: names `results/heads_grid/seeds100/NOTES.md`, which does not exist"]
    notes = ("Its runs (results/seeds900/heads_grid_data7/) and [`seeds600/`](seeds600/),\n"
             "[the grid](../../ablations/heads_grid_data7.yaml), `ablations/heads_grid.yaml`.\n")
    assert stale_paths(ROOT / "results" / "heads_grid" / "NOTES.md", notes) == [
        "results/heads_grid/NOTES.md:1: names `results/seeds900/heads_grid_data7/`, which does "
        "not exist",
        "results/heads_grid/NOTES.md:2: links to `../../ablations/heads_grid_data7.yaml`, which "
        "does not exist"]
    assert RECORD.fullmatch("results/heads_grid/seeds100/grid.yaml")
    assert RECORD.fullmatch("results/heads_grid/seeds100/findings.md")
    assert not RECORD.fullmatch("results/heads_grid/NOTES.md")
    assert not RECORD.fullmatch("results/heads_grid/seeds100/th_table1.md")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_only_what_exists(path):
    found = problems(path)
    assert not found, "\n".join(found)


def test_the_check_fails_on_what_does_not_exist():
    text = ("ok `bench/run.py`\nsee `bench/claims.py` and [x](missing.md)\n"
            "```bash\npython -m bench.run examples/smoke.yaml \\\n  --no-such-option\n"
            "```\n`bench.experiment.layouts.NO_SUCH` `--seeds` [y](claims.md#no-anchor)\n")
    found = problems(ROOT / "docs" / "_bad_for_test.md", text)
    assert found == [
        "docs/_bad_for_test.md:2: names `bench/claims.py`, which does not exist",
        "docs/_bad_for_test.md:2: links to `missing.md`, which does not exist",
        "docs/_bad_for_test.md:4: `python -m bench.run` has no option `--no-such-option`",
        "docs/_bad_for_test.md:7: links to `claims.md#no-anchor`: no heading `#no-anchor` in "
        "claims.md",
        "docs/_bad_for_test.md:7: names `bench.experiment.layouts.NO_SUCH`, which is no module "
        "or name of it",
    ]


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 210, f"README.md has {len(lines)} lines (at most 210)"
    first = "\n".join(lines[:40])
    assert "python -m bench.run ablations/heads_grid.yaml" in first
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"^(\.venv/bin/python -m pytest[^#\n]*?)\s*(#.*)?$", ci, re.M)[1]
    assert command in first  # the test command as .ci/run calls it
    assert "[results/heads_grid/](results/heads_grid/README.md)" in first  # every run, verdicts


def test_the_worked_example_in_docs_is_the_plugin_file():
    text = (ROOT / "docs" / "variants.md").read_text()
    block = re.search(r"<!-- example: add a variant -->\n```python\n(.*?)```", text, re.S)
    assert block, "docs/variants.md lost its add-a-variant example"
    assert block.group(1) == (ROOT / "examples" / "decay_plugin.py").read_text()


def test_table_footnotes_explain_only_their_columns():
    """A committed table's footnote explains a cost column only if the table has it."""
    for md in sorted((ROOT / "results").rglob("*table*.md")):
        lines = md.read_text().splitlines()
        top = next(i for i, line in enumerate(lines) if line.startswith("| "))
        columns = {c.strip() for c in lines[top].strip("|").split("|")}
        end = next(i for i in range(top, len(lines)) if not lines[i].startswith("|"))
        note = next(line for line in lines[end:] if line.strip())  # the table's footnote
        for col in ("#FLOPS", "Multiplies/token", "FLOPs/token"):
            assert (f"{col}:" in note) == (col in columns), (
                f"{md.relative_to(ROOT)}: the footnote and the columns disagree on {col}")


def test_the_mixing_plugin_in_docs_runs():
    import torch

    import variants
    from variants import registry

    text = (ROOT / "docs" / "variants.md").read_text()
    block = re.search(r"<!-- example: mixing plugin -->\n```python\n(.*?)```", text, re.S)
    assert block, "docs/variants.md lost its mixing-policy example"
    try:
        exec(compile(block.group(1), "docs/variants.md", "exec"), {})
        assert variants.options("temp-heads")["temp_init"].type is float
        layer = variants.build("temp-heads", d_model=32, n_heads=4, span=16, temp_init=2.0)
        x = torch.randn(1, 20, 32, requires_grad=True)
        y = layer(x)
        y[:, 5].sum().backward()
        assert y.shape == (1, 20, 32) and (x.grad[:, 6:] == 0).all()  # still causal
        assert layer.describe()["mixing"] == "temperature"
    finally:
        registry._VARIANTS.pop("temp-heads", None)


def test_a_footnote_is_written_for_the_columns_it_explains():
    from bench.findings.presentation.tables import note

    th = note(["Model", "h", "#Params", "Multiplies/token", "dev", "test", "n"])
    assert "Multiplies/token:" in th and "#FLOPS" not in th and "test <probe>" not in th
    assert "tokens/s" not in th and "dev, test: bits per character" in th
    as1 = note(["Model", "Avg. span", "#FLOPS", "dev", "test copy", "copy floor", "tokens/s",
                "peak RSS MB", "n"])
    assert "#FLOPS:" in as1 and "Multiplies/token" not in as1 and "test <probe>" in as1
    assert "peak RSS MB: the process's peak" in as1 and "peak CUDA MB" not in as1
    assert "not comparable across machines" in as1


@pytest.mark.slow
def test_the_add_a_claim_commands_run_as_written_and_leave_a_clone_clean():
    """docs/claims.md's worked "Adding a claim": its commands, as written, in a fresh clone
    (runs/ as they write it): the dry run shows the claim and its look, the sweep decides it
    (and its trials record when they started, the plan they serve, the clone's commit and a
    clean tree, which the findings check against the clone's git history: confirmatory), the
    report recomputes the same findings from runs.csv, and `git status` shows nothing after
    them."""
    text = (ROOT / "docs" / "claims.md").read_text()
    block = re.search(r"<!-- commands: add a claim -->\n```bash\n(.*?)```", text, re.S)
    commands = [shlex.split(line) for line in block.group(1).splitlines() if line.strip()]
    with tempfile.TemporaryDirectory(prefix="ab", dir="/tmp") as d:  # Ray's socket paths
        clone = Path(d) / "clone"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)],
                       check=True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", "ATTNBENCH_RUNS")}
        env |= {"TMPDIR": d, "PYTHONPATH": str(clone)}
        outs, found, runs = [], [], clone / "runs" / "add_a_claim"
        for argv in commands:
            argv = [sys.executable if a == "python" else a for a in argv]
            done = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True,
                                  timeout=HANG)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            outs.append(done.stdout)
            if (runs / "findings.csv").exists():
                found.append(pd.read_csv(runs / "findings.csv"))
        status = subprocess.run(["git", "status", "--porcelain"], cwd=clone,
                                capture_output=True, text=True, check=True).stdout
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True,
                              text=True, check=True).stdout.strip()
        assert status == "", status
        per_seed = pd.read_csv(runs / "runs.csv")
        registered = (runs / "findings.md").read_text()
        verified = subprocess.run([sys.executable, "-m", "bench.verify", str(runs)], cwd=clone,
                                  env=env, capture_output=True, text=True, timeout=HANG)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "th_not_much_worse: reproduced, confirmatory" in verified.stdout
    dry = outs[0]
    assert "th_not_much_worse" in dry and "seeds 100-104: confirmatory" in dry
    assert re.search(r"\| th_not_much_worse \| 1 of 1 \| +5 \| +0\.05 \| 5 of 5 +\| +0\.0312 ",
                     dry), dry
    assert found[0].loc[0, "verdict"] == "reproduced" and found[0].loc[0, "seed_range"] == "100-104"
    pd.testing.assert_frame_equal(found[0], found[1])  # recomputed from runs.csv: the same
    assert per_seed["start_time"].notna().all() and (per_seed["run_commit"] == head).all()
    assert per_seed["run_clean"].all() and per_seed["plan_file"].eq(
        "examples/add_a_claim.yaml").all() and per_seed["plan_sha"].nunique() == 1
    assert "Pre-registration: confirmatory" in registered  # committed before the clone ran


@pytest.mark.parametrize("name", ["run", "report", "grids", "verify", "train", "speed",
                                  "compare_outside_models", "compare_xtransformers",
                                  "flops", "options",
                                  "resultsdoc", "new", "pilot"])
def test_help_describes_each_command_in_whole_sentences(name, capsys):
    """`--help` opens with the command module's first paragraph, whole: never cut at its first
    line, mid-sentence."""
    import importlib

    command = importlib.import_module(f"bench.{name}")
    with pytest.raises(SystemExit) as done:
        command.main(["--help"])
    assert done.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    first = " ".join((command.__doc__ or "").split("\n\n")[0].split())
    assert first.endswith(".") and first in shown, (first, shown[:400])


def test_the_readmes_main_job_verdicts_are_generated_from_its_findings():
    """The README's main-job section states the confirmation's verdicts in the sentence
    `bench.resultsdoc` generates from results/heads_grid/seeds600/findings.csv (its seeds,
    evidence, and every claim's verdict and look), right under its table, whose rows state no
    verdict: a verdict restated by hand, or findings regenerated with another verdict, fails
    here (and in tests/test_results_docs.py)."""
    from bench.findings.presentation.folders import sentence

    text = (ROOT / "README.md").read_text()
    section = text.split("## What the main job finds", 1)[1].split("\n## ", 1)[0]
    block = "<!-- verdicts: results/heads_grid/seeds600 -->\n"
    assert block + sentence("results/heads_grid/seeds600") + "\n<!-- /verdicts -->" in section
    table = section[:section.index(block)]
    assert not re.search(r"reproduced|contradicted|inconclusive", table), table
