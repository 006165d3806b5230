"""What a grid file says of its report, read without the sweep's machinery: its axes (the row
order), its claims, and the table layout and figures it declares (`report:`)."""

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bench.config import ConfigError, Strict, format_error, read_yaml

from .claims import Claim
from .layouts import FIGURES, LAYOUTS


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
    report: ReportSpec = Field(default_factory=ReportSpec)

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
