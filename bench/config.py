"""The run's schema, shared by every room: {model, data, train} in pydantic, presets, dotted
overrides, and errors that name the key.

Presets fill every key; `--set a.b=v` overrides one. `model.attn` is typed by the options its
variant's parts declare (`variants.options`) and `data` by its corpus's (`corpus_options`), so a
plugin's own options are checked like the built-in ones. Validation happens here, before any
data is read or tensor allocated.
"""

import copy
import inspect
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

import variants
from variants.typed import model_of

from . import data
from .data import Corpus


class ConfigError(ValueError):
    """A user error in a config: the message names the key path, the value and what is allowed."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def typed_options(where: str, given: dict[str, Any], params: dict[str, variants.Option],
                  owner: str = "") -> dict[str, Any]:
    """`given` validated and converted by the types of `params`, the options a layer's parts or
    a corpus declare (pydantic, lax: YAML's "2e-6" becomes 2e-06, 64 a float where a float is
    wanted).

    Returns the given keys only, converted. Raises a PydanticCustomError "typed_options" whose
    message has one line per bad key: `where.key`, the value and the expected type, with what
    the option belongs to (`owner`), the class that declares it and its help (an `unknown`
    line names what the options belong to and every option it accepts).
    """
    options = model_of(params, f"options of {where}")
    try:
        valid = options.model_validate(given)
    except ValidationError as err:
        lines = []
        for e in err.errors():
            key = str(e["loc"][0])  # inner names: a key inside a structured option
            inner = ".".join(str(x) for x in e["loc"][1:] if isinstance(x, str))
            if e["type"] == "extra_forbidden" and not inner:
                lines.append(f"{where}.{key}={given[key]!r}: unknown option{owner}; allowed: "
                             f"{', '.join(params)}")
            elif e["type"] == "missing" and not inner:
                lines.append(f"{where}.{key}: required")
            elif inner:  # a key inside a structured option (a dataclass)
                got = f"={e['input']!r}" if "input" in e and e["type"] != "missing" else ""
                lines.append(f"{where}.{key}.{inner}{got}: {e['msg']}")
            else:
                p = params[key]
                lines.append(f"{where}.{key}={given[key]!r}: expected "
                             f"{inspect.formatannotation(p.type)} ({e['msg']}); an option"
                             f"{owner}, declared by {p.owner}: {p.help}")
        raise PydanticCustomError("typed_options", "{lines}",
                                  {"lines": "\n  ".join(dict.fromkeys(lines))}) from None
    return {k: getattr(valid, k) for k in given}


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

    @field_validator("variant")
    @classmethod
    def _registered(cls, v: str) -> str:
        variants.check_name(v)
        return v

    @field_validator("attn")
    @classmethod
    def _typed(cls, attn: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Typed by the options the variant's parts declare (a plugin's own included); an
        option no part takes names the variant."""
        if "variant" not in info.data:  # the variant itself is invalid: reported on its own
            return attn
        variant = info.data["variant"]
        return typed_options("model.attn", attn, variant_options(variant, attn),
                             f" of variant {variant!r}")

    @model_validator(mode="after")
    def _buildable(self) -> "ModelConfig":
        variants.build(self.variant, d_model=self.d_model, n_heads=self.n_heads, span=self.span,
                       dropout=self.dropout, **self.attn)  # one layer: every option's own checks
        return self


def variant_options(variant: str, attn: dict[str, Any]) -> dict[str, variants.Option]:
    """What model.attn may hold for `variant` with these options (a span_policy or mixing in
    them changes what the layer takes)."""
    return variants.options(variant, **{k: v for k, v in attn.items()
                                        if k in ("span_policy", "mixing")})


def corpus_options(name: str) -> dict[str, variants.Option]:
    """What data may hold for corpus `name`, as its options class declares it."""
    return variants.declared(data.options(name))


class DataConfig(BaseModel):
    """data.name, a registered corpus; every other key is an option its corpus declares
    (`corpus_options`)."""

    model_config = ConfigDict(extra="allow")
    name: str = "synthetic"

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        data.check_name(v)
        return v

    @model_validator(mode="after")
    def _typed(self) -> "DataConfig":
        self.__pydantic_extra__.update(typed_options(
            "data", self.options, corpus_options(self.name), f" of dataset {self.name!r}"))
        return self

    @property
    def options(self) -> dict[str, Any]:
        """The corpus's options as given (defaults are its options class's)."""
        return dict(self.__pydantic_extra__ or {})


class TrainConfig(Strict):
    steps: int = Field(1000, gt=0)
    batch_size: int = Field(16, gt=0)
    block: int = Field(256, gt=0)
    optimizer: Literal["adagrad", "adamw"] = "adagrad"
    lr: float = Field(0.07, gt=0)
    warmup: int = Field(100, ge=0)
    # after warm-up: constant, or a half cosine from lr down to 0 at the last step
    schedule: Literal["constant", "cosine"] = "constant"
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
    amp: Literal["auto"] | bool = "auto"  # bf16 autocast where native (bench.training.precision)
    # torch.compile the model; "graphs": its step captured as CUDA graphs (training.step)
    compile: bool | Literal["graphs"] = False

    @field_validator("amp", mode="before")
    @classmethod
    def _amp(cls, v: Any) -> Any:
        if v != "auto" and not isinstance(v, bool):
            raise ValueError("expected one of auto, true, false")
        return v


class Config(Strict):
    model: ModelConfig = ModelConfig()
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()

    def corpus(self) -> Corpus:
        """This run's corpus, checked against its span and training sizes (`data.fitted`;
        DataError)."""
        return data.fitted(self.data.name, self.data.options, span=self.model.span,
                           block=self.train.block, batch_size=self.train.batch_size)

    @model_validator(mode="after")
    def _static_shapes(self) -> "Config":
        """A captured step (training.graphs) replays fixed shapes and reads nothing on the host:
        a learned span that trims its window changes the shapes as it learns, and Adagrad's step
        and per-tensor clipping read values on the host, so capture is refused there (with the
        way out)."""
        m, t = self.model, self.train
        host_step = t.optimizer != "adamw" or (t.clip > 0 and t.clip_mode == "param")
        if t.compile == "graphs" and host_step:
            raise ValueError("train.compile=graphs captures the whole step, optimiser included, "
                             "which needs train.optimizer=adamw (a capturable step) and "
                             "train.clip_mode=global or train.clip=0 (per-tensor clipping reads "
                             f"each norm on the host); got train.optimizer={t.optimizer}, "
                             f"train.clip_mode={t.clip_mode}, train.clip={t.clip}")
        if t.compile == "graphs":
            layer = variants.facts(m.variant, m.d_model, m.n_heads, **m.attn)
            if layer["learned_spans"] and layer["options"].get("trim", False):
                raise ValueError("train.compile=graphs: the learned spans of variant "
                                 f"{m.variant!r} trim the window as they learn, which changes "
                                 "the step's shapes; set model.attn.trim=false (every step "
                                 "computes S keys) or train.compile to true or false")
        return self


def defaults(schema: type[BaseModel], *keys: str) -> dict[str, Any]:
    """The field defaults of `keys` in `schema`: the tiny preset is the schema's defaults, so
    its sizes are written once (the preset lists which keys it sets, so that `--preset tiny`
    wins over a grid's base as the other presets do)."""
    return {k: schema.model_fields[k].default for k in keys}


# Paper settings (adaptive-span section 4): small 12 x 512 (F 2048), large 24 x 768 (F 4096),
# 8 heads, block 512, batch 64, Adagrad 0.07 with 32k linear warm-up, per-module clip 0.03.
PRESETS: dict[str, dict] = {
    "tiny": {"model": defaults(ModelConfig, "d_model", "n_layers", "n_heads", "d_ff", "span"),
             "train": defaults(TrainConfig, "batch_size", "block", "steps", "warmup")},
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
        if e["type"] == "typed_options":  # its lines name their keys in full
            lines.append(e["msg"])
            continue
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


def untaken(tree: dict, preset: str | None) -> list[str]:
    """The model.attn options of a config tree that its variant does not take (dotted keys)."""
    model = merge(PRESETS.get(preset, {}).get("model", {}), tree.get("model", {}))
    attn = model.get("attn") or {}
    try:
        takes = variant_options(model.get("variant", "fixed"), attn)
    except ValueError:  # an unknown variant or policy: resolve() names it
        return []
    return [f"model.attn.{k}" for k in attn if k not in takes]


def drop_untaken(tree: dict, preset: str | None, keep: set[str] = frozenset()) -> list[str]:
    """Remove from a config tree the model.attn options its variant does not take (but those in
    `keep`, which resolve() then refuses by name), and return them: a grid or a benchmark that
    sets an option for several variants at once (a ramp for fixed and adaptive alike) records
    it as ignored where it does not apply."""
    dropped = [k for k in untaken(tree, preset) if k not in keep]
    for key in dropped:
        del tree["model"]["attn"][key.rsplit(".", 1)[1]]
    return dropped
