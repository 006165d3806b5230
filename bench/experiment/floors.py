"""What each setting of a grid pays on its probes without recall, from the grid file alone: the
setting's data options (its base, then its `data.` axes, as its trials resolve them), typed by the
corpus's options class, and each probe's closed form (`bench.data.probes.base.mixed`): per target
set, the no-recall floor in bits per answer, the spread of one episode about it and the episodes the
test split holds. No corpus is built, no stream generated. The findings decide vacuity from these
(`bench.findings.decision.vacuity`), as do the pilot and the dry run; `perseed.read` holds the
floors a runs.csv recorded against them.
"""

from dataclasses import dataclass, fields
from itertools import product
from typing import Any

from pydantic import ValidationError

from bench.config import ConfigError, DataConfig, merge, set_dotted
from bench.data.corpus import DataError, split_sizes
from bench.data.probes.base import NoRecall, Probe, mixed

from .grid import Grid

TEST = 2  # the split claims score (train, dev, test)


def of_data(data: dict[str, Any]) -> dict[str, NoRecall]:
    """Per target set of the probes a data section mixes in (those of positive rate): its cost
    without recall in the test split (`mixed`); {} for a corpus without probes. ConfigError
    naming the key where the section is not a corpus's options."""
    if data.get("name", "synthetic") != "synthetic":
        return {}
    try:
        typed = DataConfig.model_validate(data).typed
        probes = tuple(p for f in fields(typed) if isinstance(p := getattr(typed, f.name), Probe)
                       and p.rate > 0)
        test = split_sizes("synthetic", typed.n_chars, typed.fractions)[TEST]
    except (ValidationError, DataError) as err:
        raise ConfigError(f"data: {err}") from None
    return mixed(probes, typed.frame, test)


@dataclass(frozen=True)
class Floors:
    """Each setting's probe costs without recall (`of_data`), listed by the values of the
    grid's `data.` axes (`keys`; values may be lists or mappings, so matched by equality):
    calling it with a cell (grid key -> value; a key it omits is at the grid's first value)
    gives that cell's."""

    keys: tuple[str, ...]
    by: list[tuple[tuple, dict[str, NoRecall]]]
    first: tuple = ()

    def __call__(self, cell: dict[str, Any]) -> dict[str, NoRecall]:
        at = tuple(cell.get(k, v) for k, v in zip(self.keys, self.first, strict=True))
        return next((costs for values, costs in self.by if values == at), {})


def same(data: dict[str, Any]) -> Floors:
    """Every cell on one data section (a runs table built without a grid file)."""
    return Floors((), [((), of_data(data))])


def of_grid(grid: Grid) -> Floors:
    """The grid's cells' probe costs without recall (`Floors`), from its base's data section
    and its `data.` axes; ConfigError naming the key where they are not a corpus's options."""
    keys = tuple(k for k in grid.grid if k.startswith("data."))
    by = []
    for values in product(*(grid.grid[k] for k in keys)):
        tree: dict = {}
        for key, value in zip(keys, values, strict=True):
            set_dotted(tree, key.removeprefix("data."), value)
        by.append((values, of_data(merge(grid.base.data, tree))))
    return Floors(keys, by, tuple(grid.grid[k][0] for k in keys))
