"""A grid file, the one schema of an experiment: the trials to run (a base config, axes, seeds),
the claims it expects to find, their looks, and what its report draws. Opened once
(`bench.experiment.open`: a file, or the text a sweep logged to MLflow) and carried whole
through the sweep, its looks and its report. The trials it expands to are `bench.sweep.trials`'s.
"""

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from bench.config import (
    PRESETS,
    Config,
    ConfigError,
    Strict,
    format_error,
)
from bench.metrics import EVAL_METRICS

from .claims import Claim
from .claims import check as check_claims
from .layouts import FIGURES, LAYOUTS

FREE = ("model.attn.", "data.")  # typed by the options a variant's parts, a corpus declare


def check_key(key: str) -> None:
    """Raise ValueError unless the dotted key names a field of Config (or lies in a section
    typed by the options a class declares: a variant's, a corpus's)."""
    if key == "train.seed":
        raise ValueError("train.seed: seeds come from `seeds:` (or --seeds)")
    if key.startswith(FREE):
        return
    schema: type[BaseModel] = Config
    parts = key.split(".")
    for i, part in enumerate(parts):
        where = ".".join(parts[:i]) or "the config"
        if part not in schema.model_fields:
            raise ValueError(f"{key}: {part!r} is not a key of {where}; "
                             f"allowed: {', '.join(schema.model_fields)}")
        schema = schema.model_fields[part].annotation
        if i < len(parts) - 1 and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise ValueError(f"{key}: {'.'.join(parts[:i + 1])} is a value, not a section")


class Looks(Strict):
    """`seeds: {looks: [3, 6, 10], start: 0, futility: 0.5, replications: [200]}`: a
    group-sequential design. Look k runs seeds start .. start + looks[k] - 1 of the settings an
    undecided claim reads; each claim is tested at every look against its exact boundaries in both
    directions (`bench.findings.statistics.sequential`), and stops for futility (non-binding) at an
    interim look where neither direction's p is below `futility` (null: never). `replications`: the
    seed starts registered for running the same plan again on fresh seeds (`--seed-start N`;
    `bench.findings.provenance.plan`). `withdrawn`: registered starts that will not be published,
    each with its reason (`{300: "..."}`): publication metadata, not the plan (`plan.plan_sha`
    leaves it out), so it can be written after the trials ran; `bench.verify` prints the reason
    instead of naming the start unpublished."""

    looks: list[int] = Field(min_length=1)
    start: int = 0
    futility: float | None = Field(0.5, gt=0, lt=1)
    replications: list[int] = []
    withdrawn: dict[int, str] = {}

    @field_validator("looks")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if v[0] < 2:
            raise ValueError(f"the first look has {v[0]} seeds; a paired test needs at least 2")
        if any(b <= a for a, b in zip(v, v[1:], strict=False)):
            raise ValueError(f"{v}: looks must be strictly increasing seed counts")
        return v

    @model_validator(mode="after")
    def _registered(self) -> "Looks":
        if unknown := sorted(set(self.withdrawn) - {self.start, *self.replications}):
            raise ValueError(f"withdrawn: {', '.join(map(str, unknown))} is not a registered "
                             f"seed start (start {self.start}, replications "
                             f"{self.replications}): only a registered start can be withdrawn")
        if blank := [k for k, why in self.withdrawn.items() if not why.strip()]:
            raise ValueError(f"withdrawn: start {blank[0]} has no reason: say why it will not "
                             "be published")
        return self

    @property
    def seeds(self) -> list[int]:
        """Every seed the last look runs, in order."""
        return list(range(self.start, self.start + self.looks[-1]))


# a fixed list (one look), or looks; errors name the form given (seeds.looks.futility)
Seeds = Annotated[Annotated[list[int], Tag("list")] | Annotated[Looks, Tag("looks")],
                  Discriminator(lambda v: "looks" if isinstance(v, dict | Looks) else "list")]


def seed_list(seeds: Seeds) -> list[int]:
    """Every seed a grid's `seeds:` runs, in order (a list as given; looks: the last look's)."""
    return seeds.seeds if isinstance(seeds, Looks) else list(seeds)


def plan_of(seeds: Seeds) -> tuple[tuple[int, ...], float | None]:
    """The seeds at each look and the futility bound of a grid's `seeds:` (a list: one look at
    all of them, never stopped early)."""
    if isinstance(seeds, Looks):
        return tuple(seeds.looks), seeds.futility
    return (len(seeds),), None


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


class Base(Strict):
    """The config every trial starts from: a preset, then these partial sections."""

    preset: str | None = "tiny"
    model: dict[str, Any] = {}
    data: dict[str, Any] = {}
    train: dict[str, Any] = {}

    @field_validator("preset")
    @classmethod
    def _known(cls, v: str | None) -> str | None:
        if v is not None and v not in PRESETS:
            raise ValueError(f"unknown preset {v!r}; known: {', '.join(PRESETS)}")
        return v


class Resources(Strict):
    """What one trial holds on the cluster: CPUs (its torch threads: the whole part, at least
    1) and GPUs, a share of one (0.125: eight trials packed on a GPU, each seeing only its own)
    or whole ones; None: trials packed on each GPU where there are GPUs, as many as fit
    (`bench.sweep.gpus`), else none."""

    cpu: float = Field(1, gt=0)
    gpu: float | None = Field(None, ge=0)

    @field_validator("gpu")
    @classmethod
    def _share_or_whole(cls, v: float | None) -> float | None:
        if v is not None and v > 1 and not float(v).is_integer():
            raise ValueError(f"{v} GPUs: a share of one GPU (0 < gpu <= 1) packs trials on a "
                             "GPU; more than one GPU per trial is a whole number")
        return v


class Scheduler(Strict):
    """`none`, or ASHA early stopping on `metric` (steps are training steps)."""

    type: Literal["none", "asha"] = "none"
    grace_period: int | None = Field(None, gt=0)  # default: the first evaluation
    reduction_factor: float = Field(4, gt=1)
    max_t: int | None = Field(None, gt=0)  # default: the longest trial's steps

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, v: Any) -> Any:
        return {"type": v} if isinstance(v, str) else v


NAME = r"^[A-Za-z0-9_.-]+$"  # a grid's name: its results folder and MLflow experiment
# A grid's `status:` words, and the earlier spellings a grid file may still use (files as
# committed at older commits are read again by the pre-registration check): each is read as the
# word it became. A word of its own, never the name of a folder under results/.
STATUS = ("primary", "repeat", "pilot", "superseded")
EARLIER_STATUS = {"replication": "repeat", "design": "pilot"}


class Grid(Strict):
    """A grid file: the cross product of `grid` (minus `exclude`) x `seeds`, on top of `base`;
    its `status` says what its results are (docs/grids.md): the `primary` grid of an experiment
    (the experiment is named after it), a `repeat` of one (its plan run again) or a `pilot` for
    one (data its claims are designed from; its findings exploratory whatever its seeds), each
    naming it in `of`, or `superseded` by another grid (`superseded_by`, with `why`), which
    `bench.run` refuses. `replication` and `design`, the earlier spellings of repeat and pilot,
    are read as them (`EARLIER_STATUS`)."""

    name: str = Field(pattern=NAME)
    status: Literal[STATUS] = "primary"
    of: str | None = Field(None, pattern=NAME)  # a repeat's or pilot's primary grid
    superseded_by: str | None = Field(None, pattern=NAME)  # the grid that replaces this one
    why: str | None = None  # why it was superseded
    base: Base = Base()
    grid: dict[str, list[Any]]
    exclude: list[dict[str, Any]] = []  # a trial matching every key of a rule is dropped
    seeds: Seeds = [0]  # a list (one look), or {looks: [3, 6, 10], start, futility}
    resources: Resources = Resources()
    scheduler: Scheduler = Scheduler()
    metric: Literal[EVAL_METRICS] = "dev_bpc"
    mode: Literal["min", "max"] = "min"
    max_failures: int = Field(2, ge=0)  # Ray restarts of a crashed trial from its checkpoint
    claims: list[Claim] = []  # the findings the grid tests (bench.experiment.claims)
    # the seeds the claims were designed from ([]: none); findings on them are exploratory
    design_seeds: list[int] | None = None
    report: ReportSpec = ReportSpec()  # the table layout and figures of its report
    plugins: list[str] = []  # modules or .py files imported first, as $ATTNBENCH_PLUGINS
    # axes a --set pinned to one value, with the values the file lists (a sweep's logged plan)
    pinned: dict[str, list[Any]] = {}

    @field_validator("status", mode="before")
    @classmethod
    def _earlier_spelling(cls, v: Any) -> Any:
        return EARLIER_STATUS.get(v, v) if isinstance(v, str) else v

    @field_validator("grid")
    @classmethod
    def _axes(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if not grid:
            raise ValueError("empty grid: give at least one dotted key with a list of values, "
                             "e.g. model.variant: [fixed, adaptive]")
        for key, values in grid.items():
            check_key(key)
            if not values:
                raise ValueError(f"{key}: empty list of values")
            if len(set(map(repr, values))) < len(values):
                raise ValueError(f"{key}: {values} lists a value twice")
        return grid

    @field_validator("seeds")
    @classmethod
    def _some(cls, v: Seeds) -> Seeds:
        if isinstance(v, list) and (not v or len(set(v)) < len(v)):
            raise ValueError("give at least one seed, each once (or {looks: [3, 6, 10]})")
        return v

    @model_validator(mode="after")
    def _status(self) -> "Grid":
        needs = {"repeat": ["of"], "pilot": ["of"], "superseded": ["superseded_by", "why"]}
        wanted = needs.get(self.status, [])
        if missing := [k for k in wanted if getattr(self, k) is None]:
            raise ValueError(f"status {self.status}: needs {' and '.join(missing)}")
        if extra := [k for k in ("of", "superseded_by", "why")
                     if k not in wanted and getattr(self, k) is not None]:
            raise ValueError(f"{extra[0]}: not a key of a grid with status {self.status} (of: "
                             "repeat or pilot; superseded_by and why: superseded)")
        return self

    @model_validator(mode="after")
    def _rules(self) -> "Grid":
        if self.claims and self.design_seeds is None:
            raise ValueError("design_seeds: required with claims: the seeds whose runs the "
                             "claims were designed from ([] if none ran), so that findings on "
                             "them are labelled exploratory")
        for i, rule in enumerate(self.exclude):
            if unknown := sorted(set(rule) - set(self.grid)):
                raise ValueError(f"exclude.{i}: {unknown} are not grid keys; grid keys: "
                                 f"{', '.join(self.grid)}")
        # against the grid as written: a --set that pins an axis (`pinned` keeps the values the
        # file lists) leaves the claims on its other values inconclusive, not invalid
        check_claims(self.claims, {**self.grid, **self.pinned},
                     lambda values: excluded(values, self.exclude))
        return self

    @property
    def status_line(self) -> str:
        """Its status in words, one line (the dry run's and the findings')."""
        if self.status == "superseded":
            return f"superseded by {self.superseded_by}: {self.why}"
        return self.status if self.of is None else f"{self.status} of {self.of}"

    @property
    def looks(self) -> Looks | None:
        """The group-sequential design, where the grid declares one (None: one look)."""
        return self.seeds if isinstance(self.seeds, Looks) else None

    def look_seeds(self) -> list[list[int]]:
        """The seeds each look runs: the first looks[k] of the grid's seeds (a list: one)."""
        seeds = seed_list(self.seeds)
        return [seeds[:n] for n in self.looks.looks] if self.looks else [seeds]


def check_runnable(grid: Grid, path: Path) -> None:
    """ConfigError for a superseded grid (`bench.run` refuses it), naming the grid that
    replaces it, its file where it lies beside `path`, and why."""
    if grid.status != "superseded":
        return
    beside = path.with_name(f"{grid.superseded_by}.yaml")
    then = f"python -m bench.run {beside}" if beside.is_file() else "its grid file"
    raise ConfigError(f"{path}: status superseded: grid {grid.name} is replaced by "
                      f"{grid.superseded_by} ({grid.why}); run {then}")


def excluded(values: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    """A rule matches when each of its keys equals the trial's value (or lists it)."""
    def match(key: str, want: Any) -> bool:
        got = values[key]
        return got == want or (isinstance(want, list) and got in want)

    return any(all(match(k, v) for k, v in rule.items()) for rule in rules)


def parse(raw: Any, where: str) -> Grid:
    """A grid file's content -> its Grid; ConfigError naming `where` and the key."""
    try:
        return Grid.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_error(err, Grid, where)) from None
