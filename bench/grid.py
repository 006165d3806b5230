"""What a grid file means: its schema, the trials it expands to (cross product minus `exclude`,
times seeds), their validated configs and identities, and the dry-run plan of their cost.

Nothing here starts Ray or MLflow: `bench.run` runs what this module resolves.
"""

import argparse
import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import yaml
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from . import data, tracking
from .claims import Claim, describe
from .claims import check as check_claims
from .config import (
    PRESETS,
    Config,
    ConfigError,
    DataConfig,
    Strict,
    format_error,
    merge,
    parse_sets,
    resolve,
    set_dotted,
)
from .flops import analytic_flops
from .train import build_model, load_corpus

FREE_DICTS = ("model.attn.", "data.synthetic.")  # checked by building, not by the schema


def check_key(key: str) -> None:
    """Raise ValueError unless the dotted key names a field of Config (or lies in a free dict)."""
    if key == "train.seed":
        raise ValueError("train.seed: seeds come from `seeds:` (or --seeds)")
    if key.startswith(FREE_DICTS):
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
    seeds: list[int] = Field([0], min_length=1)
    resources: Resources = Resources()
    scheduler: Scheduler = Scheduler()
    metric: Literal[tracking.EVAL_METRICS] = "dev_bpc"
    mode: Literal["min", "max"] = "min"
    max_failures: int = Field(2, ge=0)  # Ray restarts of a crashed trial from its checkpoint
    claims: list[Claim] = []  # the findings the grid tests (bench.claims)
    _claims_checked: bool = PrivateAttr(False)
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
    hash: str
    vocab: int = 0

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


def trial_hash(cfg: Config, data_sha256: str | None) -> str:
    """A trial's identity: the config's hash with where its data lives (data.path, data_dir,
    download) replaced by what the data is, the corpus's sha256. The same trial has the same
    identity in every checkout and on every machine; other bytes under the same path do not.
    None (a dry run that downloads nothing) hashes the config without the location."""
    tree = cfg.model_dump(mode="json")
    for key in ("path", "data_dir", "download"):
        tree["data"].pop(key)
    tree["data"]["sha256"] = data_sha256
    return _sha256_json(tree)


def load_grid(path: Path) -> Grid:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: cannot read the grid file: {err}") from None
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


def add_trial_args(p: argparse.ArgumentParser) -> None:
    """--set, --preset, --data and --seeds: what turns a grid file into its trials. bench.run
    takes them to run the trials, bench.report to report exactly those trials."""
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key in every trial (pins a grid axis); repeatable")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="model/train preset; wins over the sizes the grid's base sets")
    p.add_argument("--data", choices=data.DATASETS, help="dataset (data.name)")
    p.add_argument("--seeds", type=seeds_arg, help="comma-separated seeds, e.g. 0,1,2")


def seeds_arg(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers like 0,1,2") from None


def apply_cli(grid: Grid, args: argparse.Namespace) -> tuple[dict, str | None]:
    """The base tree and preset after --preset, --data, --seeds and --set."""
    base = {k: getattr(grid.base, k) for k in ("model", "data", "train")}
    preset = grid.base.preset
    if args.preset:
        preset, base = args.preset, drop_preset_keys(base, PRESETS.get(args.preset, {}))
    sets = parse_sets(args.sets)
    if args.data:
        set_dotted(sets, "data.name", args.data)
        if args.data != "synthetic":
            base["data"] = {k: v for k, v in base["data"].items() if k != "synthetic"}
    for key in grid.grid:  # --set on a grid key pins that axis to one value
        found, value = lookup(sets, key)
        if found:
            grid.grid[key] = [value]
    if args.seeds:
        grid.seeds = args.seeds
    return merge(base, sets), preset


def excluded(values: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    """A rule matches when each of its keys equals the trial's value (or lists it)."""
    def match(key: str, want: Any) -> bool:
        got = values[key]
        return got == want or (isinstance(want, list) and got in want)

    return any(all(match(k, v) for k, v in rule.items()) for rule in rules)


def trial_config(values: dict[str, Any], seed: int, base: dict, preset: str | None) -> Config:
    """One trial's resolved config: base, then its grid values and seed; data paths absolute."""
    tree: dict = {}
    for key, value in values.items():
        set_dotted(tree, key, value)
    tree = merge(base, tree)
    set_dotted(tree, "train.seed", seed)
    try:
        cfg = resolve(tree, preset)
    except ConfigError as err:
        label = ", ".join(f"{k}={v!r}" for k, v in values.items())
        raise ConfigError(f"trial {label}, seed {seed}: {err}") from None
    for key in ("path", "data_dir"):  # trials run in other working directories
        if (value := getattr(cfg.data, key)) is not None:
            setattr(cfg.data, key, str(Path(value).expanduser().resolve()))
    return cfg


def expand(grid: Grid, base: dict, preset: str | None) -> list[Trial]:
    """Resolve and validate every trial (raises ConfigError naming the trial and the key)."""
    try:
        resolve(base, preset)
    except ConfigError as err:
        raise ConfigError(f"base: {err}") from None
    trials: dict[str, Trial] = {}
    for combo in itertools.product(*grid.grid.values()):
        values = dict(zip(grid.grid, combo, strict=True))
        if excluded(values, grid.exclude):
            continue
        for seed in grid.seeds:
            cfg = trial_config(values, seed, base, preset)
            trials.setdefault(config_hash(cfg), Trial(values, cfg, trial_hash(cfg, None)))
    if not trials:
        raise ConfigError("exclude: every trial of the grid is excluded")
    return list(trials.values())


def resolve_trials(grid: Grid, args: argparse.Namespace, dry_run: bool) -> list[Trial]:
    """The grid's trials under the command line's --set, --data, --preset and --seeds (the
    options `add_trial_args` adds), each validated and identified by its corpus's sha256 (a dry
    run downloads nothing). bench.run runs them; bench.report reports exactly them."""
    trials = expand(grid, *apply_cli(grid, args))
    check_data(trials, dry_run)
    return trials


def needs_download(d: DataConfig) -> bool:
    """A real dataset that is neither given by path nor cached yet."""
    return (d.name in data.SOURCES and d.path is None
            and not (data.data_dir(d.data_dir) / d.name).is_file())


def check_data(trials: list[Trial], dry_run: bool) -> None:
    """Load each distinct corpus once (so a bad data option is a user error here, and a download
    happens once), recording the vocabulary size and setting each trial's identity from the
    corpus's sha256. A dry run downloads nothing."""
    seen: dict[str, tuple[int, str | None]] = {}  # data options -> (vocabulary, sha256)
    for t in trials:
        d, tr = t.cfg.data, t.cfg.train
        key = json.dumps([d.model_dump(mode="json"), tr.block, tr.batch_size], sort_keys=True)
        if key not in seen and dry_run and needs_download(d):
            seen[key] = (len(data.TEXT8_SYMBOLS) if d.name == "text8" else 256, None)
        if key not in seen:
            try:
                corpus = load_corpus(t.cfg)
            except (data.DataError, TypeError) as err:
                raise ConfigError(f"trial {t.name}: data: {err}") from None
            seen[key] = (corpus.vocab_size, corpus.meta["sha256"])
        t.vocab, sha256 = seen[key]
        t.hash = trial_hash(t.cfg, sha256)


def plan_table(trials: list[Trial]) -> pd.DataFrame:
    """One row per trial: its grid values, params, analytic FLOPs per token, tokens, cost."""
    models: dict[str, tuple[int, float]] = {}
    rows = []
    for t in trials:
        key = json.dumps([t.cfg.model.model_dump(mode="json"), t.vocab], sort_keys=True)
        if key not in models:
            model = build_model(t.cfg, t.vocab)
            models[key] = (sum(p.numel() for p in model.parameters()),
                           analytic_flops(model, "full"))
        params, flops = models[key]
        tr = t.cfg.train
        tokens = tr.steps * tr.batch_size * tr.block
        rows.append({"trial": t.hash[:10], **t.values, "seed": t.seed, "params": params,
                     "flops/token": flops, "tokens": tokens, "cost": float(tokens * flops)})
    return pd.DataFrame(rows)


def print_plan(trials: list[Trial], tested: list[Claim] | None = None) -> None:
    """The trial table and cost, then the claims the sweep's report will compute."""
    df = plan_table(trials)
    print(df.to_markdown(index=False, floatfmt=".3g", intfmt=","))
    print(f"\n{len(df)} trials, {df.tokens.sum():,} training tokens; estimated cost "
          f"(trials x tokens x analytic FLOPs/token at full span): {df.cost.sum():.3g} "
          "multiply-adds forward (about 3x that with the backward pass)")
    if tested:
        print(f"\n{len(tested)} claims, computed by the report from the finished runs:\n")
        print(describe(tested).to_markdown(index=False))


