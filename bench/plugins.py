"""Plugins: a user's own modules, imported before anything is built, so that the variants
(`variants.register`) and corpora (`bench.data.register`) they register work in every command
and every process.

A plugin is a module name on PYTHONPATH or a path to a .py file. They come from the environment
variable ATTNBENCH_PLUGINS=module[,module] (files relative to the working directory) and from a
grid file's `plugins:` list (files relative to the grid file: `bench.experiment.open`);
`bench.run` hands the list to each Ray trial, which imports it before building its model.
"""

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from .config import ConfigError

ENV = "ATTNBENCH_PLUGINS"


class PluginError(ConfigError):
    """A plugin that cannot be imported: a user error (exit 2), named with the import's error."""


def from_env() -> list[str]:
    """The plugins listed in $ATTNBENCH_PLUGINS (comma-separated, blanks ignored)."""
    return [p.strip() for p in os.environ.get(ENV, "").split(",") if p.strip()]


def is_file(plugin: str) -> bool:
    """Whether a plugin names a .py file (else a module on PYTHONPATH)."""
    return plugin.endswith(".py") or os.sep in plugin


def absolute(plugins: Iterable[str]) -> list[str]:
    """File plugins as absolute paths (a trial runs in another working directory), deduplicated."""
    out = (str(Path(p).expanduser().resolve()) if is_file(p) else p for p in plugins)
    return list(dict.fromkeys(out))


def _import(plugin: str) -> None:
    if not is_file(plugin):
        importlib.import_module(plugin)
        return
    path = Path(plugin).expanduser().resolve()
    tag = hashlib.sha256(str(path).encode()).hexdigest()[:8]
    name = f"attnbench_plugin_{path.stem}_{tag}"  # one module per file, imported once
    if name in sys.modules:
        return
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    exec_file(path, name)


def exec_file(path: Path, name: str, beside: bool = False) -> ModuleType:
    """`path` executed as module `name`, in sys.modules while it runs (dataclasses look their
    module up there) and after, unless it raises; with `beside`, its own folder on sys.path
    while it runs, for its sibling imports. The one way attnbench imports a .py file (plugins,
    the anchors' checkouts)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if beside:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        if beside:
            sys.path.remove(str(path.parent))
    return module


def load(plugins: Iterable[str] = (), env: bool = True) -> list[str]:
    """Import $ATTNBENCH_PLUGINS (unless env=False: a Ray trial imports exactly its driver's
    list), then `plugins`, each once per process; return them all (absolute paths for files).
    Raises PluginError naming the plugin and the last line of the error its import raised."""
    names = absolute([*(from_env() if env else []), *plugins])
    for plugin in names:
        try:
            _import(plugin)
        except Exception as err:  # noqa: BLE001  (any error in a user's module is theirs)
            last = traceback.format_exception_only(err)[-1].strip()
            raise PluginError(f"plugin {plugin!r} failed to import: {last}") from None
    return names
