"""Run configuration: pydantic schema, presets, dotted overrides, readable errors.

A config is {model, data, train}. Presets fill every key; `--set a.b=v` overrides one.
Validation happens here, before any data is read or tensor allocated for training.
"""

import copy
import inspect
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

import variants
from variants.attention import Attention

DATASETS = ("synthetic", "enwik8", "text8", "file")


class ConfigError(ValueError):
    """A user error in a config: the message names the key path, the value and what is allowed."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Strict):
    variant: str = "fixed"
    d_model: int = Field(128, gt=0)
    n_layers: int = Field(4, gt=0)
    n_heads: int = Field(4, gt=0)
    d_ff: int = Field(512, gt=0)
    span: int = Field(256, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    norm: Literal["post", "pre"] = "post"
    shared_pe: bool = True  # one relative-position table for all layers (False: one per layer)
    attn: dict[str, Any] = {}

    @model_validator(mode="after")
    def _buildable(self) -> "ModelConfig":
        variants.check_name(self.variant)
        allowed = set(inspect.signature(Attention).parameters) - {"d_model", "n_heads", "span",
                                                                  "dropout", "key_pe"}
        unknown = sorted(set(self.attn) - allowed)
        if unknown:
            raise ValueError(f"attn: unknown option(s) {unknown}; allowed: {sorted(allowed)}")
        variants.build(self.variant, d_model=self.d_model, n_heads=self.n_heads, span=self.span,
                       dropout=self.dropout, **self.attn)  # one layer: every option's own checks
        return self


class DataConfig(Strict):
    name: str = "synthetic"
    path: str | None = None
    fractions: tuple[float, float, float] = (0.9, 0.05, 0.05)
    data_dir: str | None = None
    download: bool = True
    synthetic: dict[str, Any] = {}

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in DATASETS:
            raise ValueError(f"unknown dataset {v!r}; known: {', '.join(DATASETS)}")
        return v


class TrainConfig(Strict):
    steps: int = Field(1000, gt=0)
    batch_size: int = Field(16, gt=0)
    block: int = Field(256, gt=0)
    optimizer: Literal["adagrad", "adamw"] = "adagrad"
    lr: float = Field(0.07, gt=0)
    warmup: int = Field(100, ge=0)
    weight_decay: float = Field(0.0, ge=0)
    clip: float = Field(0.03, ge=0)
    clip_mode: Literal["param", "global"] = "param"
    eval_every: int = Field(200, gt=0)
    eval_tokens: int | None = Field(None, gt=0)
    eval_batch_size: int | None = Field(None, gt=0)
    patience: int | None = Field(None, gt=0)
    checkpoint_every: int = Field(200, gt=0)
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    amp: bool = False
    compile: bool = False


class Config(Strict):
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()


# Paper settings (adaptive-span section 4): small 12 x 512 (F 2048), large 24 x 768 (F 4096),
# 8 heads, block 512, batch 64, Adagrad 0.07 with 32k linear warm-up, per-module clip 0.03.
PRESETS: dict[str, dict] = {
    "tiny": {"model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "d_ff": 512, "span": 256},
             "train": {"batch_size": 16, "block": 256, "steps": 1000, "warmup": 100}},
    "small": {"model": {"d_model": 512, "n_layers": 12, "n_heads": 8, "d_ff": 2048,
                        "span": 8192, "dropout": 0.3},
              "train": {"batch_size": 64, "block": 512, "steps": 600_000, "warmup": 32_000,
                        "eval_every": 1000, "checkpoint_every": 1000}},
    "large": {"model": {"d_model": 768, "n_layers": 24, "n_heads": 8, "d_ff": 4096,
                        "span": 8192, "dropout": 0.4},
              "train": {"batch_size": 64, "block": 512, "steps": 150_000, "warmup": 32_000,
                        "eval_every": 1000, "checkpoint_every": 1000}},
}


def set_dotted(tree: dict, key: str, value: Any) -> None:
    """tree[a][b] = value for key "a.b"; intermediate dicts are created."""
    *parents, leaf = key.split(".")
    for p in parents:
        node = tree.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {p!r} holds {node!r}, not a section")
        tree = node
    tree[leaf] = value


def merge(base: dict, over: dict) -> dict:
    """Recursive dict merge; `over` wins."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_sets(pairs: list[str]) -> dict:
    """["train.lr=0.1", ...] -> nested dict, values parsed as YAML scalars."""
    tree: dict = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected key=value, e.g. train.lr=0.1")
        set_dotted(tree, key.strip(), yaml.safe_load(raw))
    return tree


def fields_at(schema: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the section that holds loc's last key ([] where loc leaves the schema)."""
    for part in loc[:-1]:
        field = schema.model_fields.get(part) if isinstance(part, str) else None
        ann = field.annotation if field else None
        if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
            return []
        schema = ann
    return list(schema.model_fields)


def format_error(err: ValidationError, schema: type[BaseModel] = Config,
                 what: str = "config") -> str:
    """One line per error: key path, message, the bad value and, for unknown keys, the known."""
    lines = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"]) or what
        got = e.get("input")
        line = f"{path}: {e['msg']}" + ("" if isinstance(got, dict) else f" (got {got!r})")
        if e["type"] == "extra_forbidden" and (known := fields_at(schema, e["loc"])):
            line += f"; allowed: {', '.join(known)}"
        lines.append(line)
    return f"invalid {what}:\n  " + "\n  ".join(lines)


def resolve(tree: dict | None = None, preset: str | None = "tiny") -> Config:
    """Preset, then `tree` on top, validated. Raises ConfigError naming the bad key."""
    if preset is not None and preset not in PRESETS:
        raise ConfigError(f"preset: unknown {preset!r}; known: {', '.join(PRESETS)}")
    try:
        return Config.model_validate(merge(PRESETS.get(preset, {}), tree or {}))
    except ValidationError as err:
        raise ConfigError(format_error(err)) from None
    except (ValueError, TypeError) as err:
        raise ConfigError(f"invalid config: {err}") from None
