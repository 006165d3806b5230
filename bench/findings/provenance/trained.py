"""Whether a result's confirmation trials ran one version of the code that trains (`apart`).

Where every trial records the code its process imported (`code_sha`, and beside runs.csv
code.json, each code_sha's file -> digest: `bench.codehash.imported`), the records are compared
file by file: two trials that give one file different digests ran different code, and the file
is named; records that differ only in which files a process imported (a module one path imports
lazily) are one version. Where the trials record none (every result committed before the
records), their run commits are compared over the code that trains (TRAINING, and the grid's
plugin files as the grid file at each run commit lists them), each file as code
(`bench.codehash.code`). Either way a change of documentation, or of the analysis, between
looks is not another experiment.
"""

import posixpath
from pathlib import Path

import pandas as pd

from bench.codehash import code
from bench.config import ConfigError
from bench.experiment.open import GridText, load_grid

from .git import git

# the code that makes a trial's numbers: run commits that differ here ran another experiment
TRAINING = ("bench/training", "bench/model", "bench/data", "bench/config.py", "bench/train.py",
            "bench/declare.py", "bench/trial.py", "bench/measure", "variants")


def _listed(files: list[str]) -> str:
    return ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")


def by_records(conf: pd.DataFrame, records: dict[str, dict[str, str]]) -> str:
    """Why trials recording code_sha ran different code, or "": the files whose digests differ
    between the code records (`records`: code.json) of `conf`'s code_sha values, and how many
    trials recorded each."""
    shas = conf["code_sha"].astype(str).value_counts().sort_index()
    versions = ", ".join(f"{s} ({n} trials)" for s, n in shas.items())
    if len(shas) < 2:
        return ""
    if lost := [s for s in shas.index if s not in records]:
        return (f"the trials recorded {len(shas)} versions of the code they imported (code_sha "
                f"{versions}), and no code.json names the files of {', '.join(lost)}")
    maps = [records[s] for s in shas.index]
    differ = sorted(p for p in set().union(*maps) if len({m[p] for m in maps if p in m}) > 1)
    if not differ:
        return ""
    return (f"the trials imported different code that trains: {_listed(differ)} "
            f"{'differs' if len(differ) == 1 else 'differ'} between their code records "
            f"(code_sha {versions})")


def _plugins(root: Path, commit: str, plan_file: str) -> list[str]:
    """The grid's plugin files as the grid file at `commit` lists them, relative to the
    repository (its module plugins aside: they are not files of it)."""
    text = git(root, "show", f"{commit}:{plan_file}")
    try:
        grid = load_grid(GridText(text or "", f"{plan_file} at {commit[:10]}", root))
    except ConfigError:
        return []
    folder = posixpath.dirname(plan_file)
    return [posixpath.normpath(posixpath.join(folder, p)) for p in grid.plugins
            if p.endswith(".py") or "/" in p]


def _as_code(root: Path, commit: str, path: str) -> bytes:
    """A file at `commit` as code (`code`; a Python file), else its bytes; b"" where absent."""
    text = (git(root, "show", f"{commit}:{path}") or "").encode()
    return code(text) if path.endswith(".py") else text


def by_commits(root: Path, prefix: str, conf: pd.DataFrame, plan_file: str) -> str:
    """Why trials recording no code_sha ran different code, or "": run commits that differ,
    as code, in TRAINING (under `prefix`, bench/'s folder in the repository) or in the grid's
    plugin files."""
    runs = sorted(set(conf["run_commit"].astype(str)))
    for other in runs[1:]:
        paths = {*(f"{prefix}{p}" for p in TRAINING), *_plugins(root, runs[0], plan_file),
                 *_plugins(root, other, plan_file)}
        names = (git(root, "diff", "--name-only", runs[0], other, "--", *sorted(paths))
                 or "").split()
        if changed := [n for n in names
                       if _as_code(root, runs[0], n) != _as_code(root, other, n)]:
            return (f"the trials ran from commits {runs[0][:10]} and {other[:10]}, which "
                    f"differ in code that trains ({_listed(changed)})")
    return ""


def apart(root: Path, prefix: str, conf: pd.DataFrame, plan_file: str,
          records: dict[str, dict[str, str]]) -> str:
    """Why `conf`'s trials are not one experiment, or "" (module doc): by their code records
    where every trial holds one, else by their run commits."""
    if "code_sha" in conf and len(conf) and conf["code_sha"].notna().all():
        return by_records(conf, records)
    return by_commits(root, prefix, conf, plan_file)
