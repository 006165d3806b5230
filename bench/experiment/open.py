"""Opening an experiment, the one way, in up to three steps: `read_grid_text` reads a grid file
once (`GridText`: what a command checks, opens, records and copies is that text); `load_grid`
validates a grid file's text (or text read from git or from the MLflow store) against the schema
(`grid.Grid`) as written, nothing imported; `open_grid` loads it, imports its plugins (file paths
relative to the grid file) and applies the command line's overrides (`Overrides`: --set,
--preset, --data, --seeds, --seed-start): the grid a sweep runs. `to_text` writes a grid back as
YAML that loads as the same Grid (the plan a sweep logs). No other module parses a grid file's
YAML.
"""

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench import data, plugins
from bench.config import PRESETS, ConfigError, corpus_options, merge, set_dotted
from bench.provenance import GridText

from .grid import Grid, Looks, parse

SECTIONS = ("model", "data", "train")  # what a base and a --set may hold


@dataclass(frozen=True)
class Overrides:
    """What the command line changes in a grid: `sets` (a nested tree of --set values, which
    also pin the grid axes they name), `preset` (wins over the sizes the base sets), `data` (a
    registered corpus; drops the base's options of another), `seeds` (one list) or `seed_start`
    (the grid's seeds from N)."""

    sets: dict = field(default_factory=dict)
    preset: str | None = None
    data: str | None = None
    seeds: list[int] | None = None
    seed_start: int | None = None


def _lookup(tree: dict, key: str) -> tuple[bool, Any]:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False, None
        tree = tree[part]
    return True, tree


def _drop_preset_keys(tree: dict, preset: dict) -> dict:
    """tree without the leaves `preset` sets, so a --preset on the command line wins over base."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and isinstance(preset.get(k), dict):
            out[k] = _drop_preset_keys(v, preset[k])
        elif k not in preset:
            out[k] = v
    return out


def _seeds(grid: Grid, o: Overrides) -> Any:
    if o.seeds and isinstance(grid.seeds, Looks):
        raise ConfigError(f"--seeds: the grid declares seeds.looks {grid.seeds.looks} (seeds "
                          "added look by look); --seeds fixes one list: use --seed-start N to "
                          "run the looks from seed N, or drop --seeds")
    seeds = o.seeds or grid.seeds
    if o.seed_start is None:
        return seeds
    if isinstance(seeds, Looks):
        return seeds.model_copy(update={"start": o.seed_start})
    return list(range(o.seed_start, o.seed_start + len(seeds)))


def apply(grid: Grid, o: Overrides) -> Grid:
    """A new grid: `grid` under the overrides (`grid` itself is left as read)."""
    if unknown := sorted(set(o.sets) - set(SECTIONS)):
        raise ConfigError(f"--set {unknown[0]}: not a config section; allowed: "
                          f"{', '.join(SECTIONS)}")
    base = {k: getattr(grid.base, k) for k in SECTIONS}
    preset = grid.base.preset
    if o.preset:
        preset, base = o.preset, _drop_preset_keys(base, PRESETS.get(o.preset, {}))
    sets = copy.deepcopy(o.sets)  # --data adds to it
    if o.data:
        try:
            takes = corpus_options(o.data)
        except data.DataError as err:
            raise ConfigError(f"--data: {err}") from None
        set_dotted(sets, "data.name", o.data)
        base["data"] = {k: v for k, v in base["data"].items() if k in takes}
    axes, pinned = {}, dict(grid.pinned)
    for key, values in grid.grid.items():  # a --set on a grid key pins that axis to one value
        found, value = _lookup(sets, key)
        axes[key] = [value] if found else values
        if found:
            pinned.setdefault(key, values)
    return grid.model_copy(update={
        "base": grid.base.model_copy(update={"preset": preset, **merge(base, sets)}),
        "grid": axes, "seeds": _seeds(grid, o), "pinned": pinned})


def read_grid_text(path: Path) -> GridText:
    """The grid file's text, read once (its bytes as UTF-8: the sha256 a sweep logs is the
    file's); ConfigError where it cannot be read."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"grid file {path}: cannot be read: {err.strerror}") from None
    try:
        return GridText(raw.decode(), f"grid file {path}", path.parent, path)
    except UnicodeDecodeError as err:
        raise ConfigError(f"grid file {path}: not UTF-8 text: {err.reason} at byte "
                          f"{err.start}") from None


def _text(source: Path | GridText) -> GridText:
    return source if isinstance(source, GridText) else read_grid_text(source)


def data_of(text: str | None) -> dict | None:
    """A grid file's text as YAML data, unvalidated (what a plan's sections are compared on);
    None where there is no text, it is not YAML or not a mapping."""
    try:
        data = yaml.safe_load(text) if text is not None else None
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def load_grid(source: Path | GridText) -> Grid:
    """The grid a file (or a file's text) says, as written, validated, nothing imported;
    ConfigError naming the file and the key (one line for a file that is empty, not YAML or
    not a mapping)."""
    source = _text(source)
    try:
        raw = yaml.safe_load(source.text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{source.where}: not YAML: {what}{at}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source.where}: " + ("empty" if raw is None else
                                                 f"a {type(raw).__name__}, not a mapping")
                          + ": a grid file is a YAML mapping of keys (name, grid, seeds, ...; "
                          "docs/claims.md)")
    return parse(raw, source.where)


def open_grid(source: Path | GridText, overrides: Overrides | None = None,
              imports: bool = True) -> Grid:
    """The grid `source` says (`load_grid`), its plugin files as absolute paths (relative ones
    from the grid file's folder), imported first with $ATTNBENCH_PLUGINS (its `plugins` then
    lists them all: what a trial imports), under the overrides. A plugin file that does not
    exist is a PluginError (exit 2) naming the path as resolved; `imports=False` imports nothing
    (a grid read to be listed, or from an old commit)."""
    source = _text(source)
    grid = load_grid(source)
    listed = [str((source.folder / p).expanduser().resolve()) if plugins.is_file(p) else p
              for p in grid.plugins]
    grid = grid.model_copy(update={"plugins": plugins.load(listed) if imports else listed})
    return apply(grid, overrides) if overrides is not None else grid


def to_text(grid: Grid) -> str:
    """The grid as YAML that `load_grid` reads back as the same Grid (what it sets, defaults
    left out)."""
    return yaml.safe_dump(grid.model_dump(mode="json", exclude_defaults=True),
                          sort_keys=False, width=100)
