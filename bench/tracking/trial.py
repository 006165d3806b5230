"""What crosses from a sweep's driver into a Ray worker and its MLflow run, typed and frozen:
one trial (`TrialSpec`) and where it is tracked (`Where`)."""

from dataclasses import dataclass
from pathlib import Path

from bench.config import Config


@dataclass(frozen=True)
class Where:
    """Where a sweep's trials are logged: the store's URI, the grid's experiment id, the
    sweep's parent run and the source name the MLflow UI shows."""

    uri: str
    experiment: str
    parent: str
    source: str


@dataclass(frozen=True)
class TrialSpec:
    """One trial as its worker trains it and its run records it: identity (`hash`, its
    `name`, the grid's name and axes), the resolved config, the precision the driver planned
    it in (the worker refuses another), its folder, torch threads, the plugins to import
    first, the grid options its variant ignores and what it records of the plan it serves
    (`bench.findings.prereg.record`)."""

    hash: str
    name: str
    grid: str
    grid_keys: tuple[str, ...]
    cfg: Config
    precision: str
    out_dir: Path
    threads: int
    plugins: tuple[str, ...]
    ignored: tuple[str, ...]
    plan: dict[str, str]

    @property
    def seed(self) -> int:
        return self.cfg.train.seed
