"""Code hashed as code: a module's syntax tree without its docstrings and comments (`code`), so that
a reworded docstring or comment hashes alike and any change to what is computed does not. What a
registered analysis is made of (`bench.findings.provenance.plan`), what a plugin adds to a trial's
identity (`bench.sweep.trials`) and what a trial records of the code it ran (`imported`,
`code_sha`): every project file (bench/, variants/) and plugin file its process imported by the end
of training, each by its path relative to the repository. It sits below every room and imports
nothing of bench, so that recording it pulls no analysis code into a trial's process.
"""

import ast
import functools
import hashlib
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "variants")  # the repository's code a trial imports


@functools.lru_cache(maxsize=512)
def code(source: bytes) -> bytes:
    """What a module computes: its syntax tree without its docstrings, written back as source
    (comments and layout drop out); the bytes themselves where they do not parse. Remembered
    by source (a pure function of it): checking a result's registration asks it for the same
    analysis files once per trial row."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree).encode()


def digest(source: bytes) -> str:
    """The first 16 hex digits of the sha256 of a file's `code`."""
    return hashlib.sha256(code(source)).hexdigest()[:16]


def named(path: Path) -> str:
    """A file as a trial's code record names it: relative to the repository, else absolute."""
    path = path.resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()


def plugin_files(plugins: Iterable[str]) -> list[Path]:
    """Each plugin's source file, in order: a .py path as given (absolute: `open_grid` made it
    so), a module's file where it is imported (`bench.plugins.load` ran first)."""
    out = []
    for plugin in plugins:
        if plugin.endswith(".py") or "/" in plugin:
            out.append(Path(plugin).resolve())
        elif (where := getattr(sys.modules.get(plugin), "__file__", None)) is not None:
            out.append(Path(where).resolve())
    return out


def imported(plugins: Iterable[str] = ()) -> dict[str, str]:
    """Every project file (under PACKAGES) and plugin file this process has imported, by
    `named` path, each file's `digest` as it is now: what a trial records at the end of
    training."""
    files = set(plugin_files(plugins))
    for module in list(sys.modules.values()):
        where = getattr(module, "__file__", None)
        if not where or not where.endswith(".py"):
            continue
        path = Path(where).resolve()
        if path.is_relative_to(ROOT) and path.relative_to(ROOT).parts[0] in PACKAGES:
            files.add(path)
    return {named(p): digest(p.read_bytes()) for p in sorted(files) if p.is_file()}


def code_sha(files: dict[str, str]) -> str:
    """The first 16 hex digits of the sha256 of a code record (`imported`: path -> digest)."""
    text = "".join(f"{path}\0{h}\n" for path, h in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
