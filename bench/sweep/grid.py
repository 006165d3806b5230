"""What a grid file means: its schema, the trials it expands to (cross product minus `exclude`,
times seeds), their validated configs and identities.

Nothing here starts Ray or MLflow: the runner runs what this module resolves.
"""

import argparse
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from bench import data, provenance
from bench.config import (
    PRESETS,
    Config,
    ConfigError,
    Strict,
    drop_untaken,
    format_error,
    merge,
    parse_sets,
    read_yaml,
    resolve,
    set_dotted,
    untaken,
)
from bench.findings.claims import Claim
from bench.findings.claims import check as check_claims
from bench.findings.spec import Looks, ReportSpec, Seeds, seed_list
from bench.tracking.names import EVAL_METRICS
from bench.training import precision
from bench.training.loop import load_corpus

FREE = ("model.attn.", "data.")  # typed by the variant's and the corpus's signatures


def check_key(key: str) -> None:
    """Raise ValueError unless the dotted key names a field of Config (or lies in a section
    typed by a signature: a variant's options, a corpus's)."""
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
    cpu: float = Field(1, gt=0)
    gpu: float | None = Field(None, ge=0)  # None: one GPU per trial when the cluster has GPUs


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


class Grid(Strict):
    """A grid file: the cross product of `grid` (minus `exclude`) x `seeds`, on top of `base`."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    base: Base = Base()
    grid: dict[str, list[Any]]
    exclude: list[dict[str, Any]] = []  # a trial matching every key of a rule is dropped
    seeds: Seeds = [0]  # a list (one look), or {looks: [3, 6, 10], start, futility}
    resources: Resources = Resources()
    scheduler: Scheduler = Scheduler()
    metric: Literal[EVAL_METRICS] = "dev_bpc"
    mode: Literal["min", "max"] = "min"
    max_failures: int = Field(2, ge=0)  # Ray restarts of a crashed trial from its checkpoint
    claims: list[Claim] = []  # the findings the grid tests (bench.findings.claims)
    _claims_checked: bool = PrivateAttr(False)
    report: ReportSpec = ReportSpec()  # the table layout and figures of its report
    plugins: list[str] = []  # modules or .py files imported first, as $ATTNBENCH_PLUGINS

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
        return grid

    @field_validator("seeds")
    @classmethod
    def _some(cls, v: Seeds) -> Seeds:
        if isinstance(v, list) and (not v or len(set(v)) < len(v)):
            raise ValueError("give at least one seed, each once (or {looks: [3, 6, 10]})")
        return v

    @model_validator(mode="after")
    def _rules(self) -> "Grid":
        for i, rule in enumerate(self.exclude):
            if unknown := sorted(set(rule) - set(self.grid)):
                raise ValueError(f"exclude.{i}: {unknown} are not grid keys; grid keys: "
                                 f"{', '.join(self.grid)}")
        if not self._claims_checked:  # against the grid as written: a --set that pins an
            # axis later leaves the claims on its other values inconclusive, not invalid
            check_claims(self.claims, self.grid, lambda values: excluded(values, self.exclude))
            self._claims_checked = True
        return self


@dataclass
class Trial:
    values: dict[str, Any]  # this trial's value of each grid key
    cfg: Config
    hash: str  # set from the corpus and the precision (`check_data`)
    vocab: int = 0
    ignored: list[str] = field(default_factory=list)  # grid options its variant does not take
    probes: list[str] | None = None  # what its corpus scores apart (None: not built, a dry run)

    @property
    def seed(self) -> int:
        return self.cfg.train.seed

    @property
    def name(self) -> str:
        """<variant>-<varied values>-s<seed>, e.g. talking-heads-n_heads=8-s0."""
        varied = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.values.items()
                  if k != "model.variant"]
        return "-".join([self.cfg.model.variant, *varied, f"s{self.seed}"])


def _sha256_json(tree: dict) -> str:
    text = json.dumps(tree, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def config_hash(cfg: Config) -> str:
    """sha256 of the canonical JSON of a resolved config (the seed is train.seed)."""
    return _sha256_json(cfg.model_dump(mode="json"))


def trial_hash(cfg: Config, identity: dict | None, precision_name: str) -> str:
    """A trial's identity: the config's hash with its data section replaced by what the data is
    (`Corpus.identity()`: name, sha256, split sizes), so the same trial has the same identity in
    every checkout and on every machine, and other bytes under the same path do not; and the
    precision it runs in (train.amp resolved on this machine: `auto` is bf16 here, fp32 there),
    so a rerun elsewhere never reuses or averages with runs of the other precision. None (a dry
    run that downloads nothing) hashes the data section as written."""
    tree = cfg.model_dump(mode="json")
    if identity is not None:
        tree["data"] = identity
    return _sha256_json({**tree, "precision": precision_name})


def resolved_precision(cfg: Config) -> str:
    """The precision the trial runs in on this machine's device (ConfigError: no such device)."""
    try:
        device = provenance.device(cfg.train.device)
    except ValueError as err:
        raise ConfigError(f"train.device: {err}") from None
    return precision.name(precision.resolve(cfg.train.amp, device))


def load_grid(path: Path) -> Grid:
    raw = read_yaml(path, "grid file")
    try:
        return Grid.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_error(err, Grid, f"grid file {path}")) from None


def lookup(tree: dict, key: str) -> tuple[bool, Any]:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False, None
        tree = tree[part]
    return True, tree


def drop_preset_keys(tree: dict, preset: dict) -> dict:
    """tree without the leaves `preset` sets, so a --preset on the command line wins over base."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and isinstance(preset.get(k), dict):
            out[k] = drop_preset_keys(v, preset[k])
        elif k not in preset:
            out[k] = v
    return out


def apply_cli(grid: Grid, args: argparse.Namespace) -> tuple[dict, str | None]:
    """The base tree and preset after --preset, --data, --seeds and --set."""
    base = {k: getattr(grid.base, k) for k in ("model", "data", "train")}
    preset = grid.base.preset
    if args.preset:
        preset, base = args.preset, drop_preset_keys(base, PRESETS.get(args.preset, {}))
    sets = parse_sets(args.sets)
    if args.data:
        try:
            takes = data.options(args.data)
        except data.DataError as err:
            raise ConfigError(f"--data: {err}") from None
        set_dotted(sets, "data.name", args.data)
        base["data"] = {k: v for k, v in base["data"].items() if k in takes}
    for key in grid.grid:  # --set on a grid key pins that axis to one value
        found, value = lookup(sets, key)
        if found:
            grid.grid[key] = [value]
    if args.seeds and isinstance(grid.seeds, Looks):
        raise ConfigError(f"--seeds: the grid declares seeds.looks {grid.seeds.looks} (seeds "
                          "added look by look); --seeds fixes one list: use --seed-start N to "
                          "run the looks from seed N, or drop --seeds")
    if args.seeds:
        grid.seeds = args.seeds
    if args.seed_start is not None:
        grid.seeds = grid.seeds.model_copy(update={"start": args.seed_start}) if isinstance(
            grid.seeds, Looks) else list(range(args.seed_start,
                                               args.seed_start + len(grid.seeds)))
    return merge(base, sets), preset


def excluded(values: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    """A rule matches when each of its keys equals the trial's value (or lists it)."""
    def match(key: str, want: Any) -> bool:
        got = values[key]
        return got == want or (isinstance(want, list) and got in want)

    return any(all(match(k, v) for k, v in rule.items()) for rule in rules)


def trial_tree(values: dict[str, Any], seed: int, base: dict) -> dict:
    """One trial's config tree: base, then its grid values and seed."""
    tree: dict = {}
    for key, value in values.items():
        set_dotted(tree, key, value)
    tree = merge(base, tree)
    set_dotted(tree, "train.seed", seed)
    return tree


def trial_config(values: dict[str, Any], seed: int, base: dict, preset: str | None,
                 refused: set[str] = frozenset()) -> tuple[Config, list[str]]:
    """One trial's resolved config (paths absolute) and the model.attn options it drops because
    its variant does not take them; those in `refused` are kept, for resolve() to refuse."""
    tree = trial_tree(values, seed, base)
    ignored = drop_untaken(tree, preset, keep=refused)
    try:
        cfg = resolve(tree, preset)
    except ConfigError as err:
        label = ", ".join(f"{k}={v!r}" for k, v in values.items())
        raise ConfigError(f"trial {label}, seed {seed}: {err}") from None
    for key, value in cfg.data.options.items():  # trials run in other working directories
        if isinstance(value, Path):
            setattr(cfg.data, key, value.expanduser().resolve())
    return cfg, ignored


def expand(grid: Grid, base: dict, preset: str | None) -> list[Trial]:
    """Resolve and validate every trial (raises ConfigError naming the trial and the key). An
    option the grid sets for several variants is dropped, and recorded as ignored, for the
    trials whose variant does not take it; one that no trial's variant takes is refused."""
    combos = [values for combo in itertools.product(*grid.grid.values())
              if not excluded(values := dict(zip(grid.grid, combo, strict=True)), grid.exclude)]
    if not combos:
        raise ConfigError("exclude: every trial of the grid is excluded")
    refused = set.intersection(*(set(untaken(trial_tree(v, 0, base), preset)) for v in combos))
    trials: dict[str, Trial] = {}
    for values in combos:
        for seed in seed_list(grid.seeds):
            cfg, ignored = trial_config(values, seed, base, preset, refused)
            trials.setdefault(config_hash(cfg), Trial(values, cfg, "", ignored=ignored))
    return list(trials.values())


def resolve_trials(grid: Grid, args: argparse.Namespace, dry_run: bool) -> list[Trial]:
    """The grid's trials under the command line's --set, --data, --preset and --seeds (the
    options `add_trial_args` adds), each validated and identified by its corpus (a dry run
    downloads nothing)."""
    trials = expand(grid, *apply_cli(grid, args))
    check_data(trials, dry_run)
    return trials


def check_data(trials: list[Trial], dry_run: bool) -> None:
    """Build each distinct corpus once (so a bad data option is a user error here, and a
    download happens once), recording the vocabulary size and the probes it scores, and setting
    each trial's identity from the corpus's. A dry run downloads nothing: a corpus not yet
    downloaded is planned with 256 symbols and identified by its options."""
    seen: dict[str, tuple] = {}  # data options -> (vocabulary, identity, probes)
    for t in trials:
        d, tr = t.cfg.data, t.cfg.train
        key = json.dumps([d.model_dump(mode="json"), tr.block, tr.batch_size], sort_keys=True)
        if key not in seen:
            cfg = t.cfg
            if dry_run and "download" in data.options(d.name):
                cfg = cfg.model_copy(update={"data": d.model_copy(update={"download": False})})
            try:
                corpus = load_corpus(cfg)
                seen[key] = (corpus.vocab_size, corpus.identity(), list(corpus.target_floors()))
            except (data.DataError, TypeError) as err:
                if not (dry_run and cfg is not t.cfg and "no cached copy" in str(err)):
                    raise ConfigError(f"trial {t.name}: data: {err}") from None
                print(f"note: {d.name} is not downloaded yet; the plan assumes 256 symbols")
                seen[key] = (256, None, None)
        t.vocab, identity, t.probes = seen[key]
        t.hash = trial_hash(t.cfg, identity, resolved_precision(t.cfg))
