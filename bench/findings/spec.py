"""What a grid file says of its report, read without the sweep's machinery: its axes (the row
order), its claims, and the table layout and figures it declares (`report:`)."""

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
)

from bench.config import ConfigError, Strict, canonical_axes, format_error, read_yaml

from .claims import Claim
from .layouts import FIGURES, LAYOUTS


class Looks(Strict):
    """`seeds: {looks: [3, 6, 10], start: 0, futility: 0.5}`: a group-sequential design. Look k
    runs seeds start .. start + looks[k] - 1 of the settings an undecided claim reads; each
    claim is tested at every look against its own alpha-spending boundary
    (`bench.findings.sequential`), and stops for futility (non-binding) at an interim look
    where its one-sided p exceeds `futility` (null: never)."""

    looks: list[int] = Field(min_length=1)
    start: int = 0
    futility: float | None = Field(0.5, gt=0, lt=1)

    @field_validator("looks")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if v[0] < 2:
            raise ValueError(f"the first look has {v[0]} seeds; a paired test needs at least 2")
        if any(b <= a for a, b in zip(v, v[1:], strict=False)):
            raise ValueError(f"{v}: looks must be strictly increasing seed counts")
        return v

    @property
    def seeds(self) -> list[int]:
        """Every seed the last look runs, in order."""
        return list(range(self.start, self.start + self.looks[-1]))


# a fixed list (one look), or looks; errors name the form given (seeds.looks.futility)
Seeds = Annotated[Annotated[list[int], Tag("list")] | Annotated[Looks, Tag("looks")],
                  Discriminator(lambda v: "looks" if isinstance(v, dict | Looks) else "list")]


def seed_list(seeds: Seeds) -> list[int]:
    return seeds.seeds if isinstance(seeds, Looks) else list(seeds)


class ReportSpec(Strict):
    """`report:` of a grid file: a table layout (LAYOUTS; a grid that declares none gets the
    generic table), the figures to draw (FIGURES; none declared: every figure the runs have
    data for) and the baseline rows the table's significance markers compare with (grid values,
    e.g. {model.variant: fixed}; default: the first value of the grid's first axis)."""

    table: str = "generic"
    figures: list[str] | None = None
    baseline: dict[str, Any] | None = None  # grid values of the rows the table compares with

    @field_validator("table")
    @classmethod
    def _layout(cls, v: str) -> str:
        if v not in LAYOUTS:
            raise ValueError(f"unknown table layout {v!r}; known: {', '.join(LAYOUTS)}")
        return v

    @field_validator("figures")
    @classmethod
    def _figures(cls, v: list[str] | None) -> list[str] | None:
        if unknown := [f for f in v or [] if f not in FIGURES]:
            raise ValueError(f"unknown figure {unknown[0]!r}; known: {', '.join(FIGURES)}")
        return v


class GridSpec(BaseModel):
    """The parts of a grid file the report reads; the rest is the runner's."""

    model_config = ConfigDict(extra="ignore")
    name: str = ""
    grid: dict[str, list[Any]] = {}
    claims: list[Claim] = []
    seeds: Seeds = [0]
    design_seeds: list[int] | None = None  # the seeds the claims were designed from
    report: ReportSpec = Field(default_factory=ReportSpec)

    @field_validator("grid")
    @classmethod
    def _named(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return canonical_axes(grid)

    @property
    def looks(self) -> Looks | None:
        """The group-sequential design, where the grid declares one (None: one look)."""
        return self.seeds if isinstance(self.seeds, Looks) else None

    @classmethod
    def parse(cls, raw: Any, where: str) -> "GridSpec":
        """A grid file's content -> its report spec; ConfigError naming `where` and the key."""
        try:
            return cls.model_validate(raw if isinstance(raw, dict) else {})
        except ValidationError as err:
            raise ConfigError(format_error(err, cls, where)) from None

    @classmethod
    def read(cls, path: Path) -> "GridSpec":
        return cls.parse(read_yaml(path, "grid file"), f"grid file {path}")

    @classmethod
    def from_text(cls, text: str | None, where: str) -> "GridSpec":
        return cls.parse(yaml.safe_load(text) if text else {}, where)
