"""The run's schema, shared by every room: {model, data, train} in pydantic, presets, dotted
overrides, and errors that name the key.

Presets fill every key; `--set a.b=v` overrides one. `model.attn` is typed and checked by the
one validator of options (`variants.spec`: the options its variant's parts declare, with the
body's sizes) and `data` by the same (`variants.parse`, on its corpus's options class), so a
plugin's own options are checked like the built-in ones, and a bad value reads the same from a
grid, `--set` or Python. What they make is kept (`ModelConfig.layer`, `DataConfig.typed`): the
layer and the corpus take it as it is. Validation happens here, and allocates no tensor and
reads no data.
"""

import copy
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

import variants
from variants.layer_spec import SIZES

from . import data
from .data import Corpus


class ConfigError(ValueError):
    """A user error in a config: the message names the key path, the value and what is allowed."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def refused(err: variants.OptionError, path: Any) -> PydanticCustomError:
    """An OptionError as the schema reports it: its lines, each key written `path(key)`."""
    return PydanticCustomError("options", "{lines}", {"lines": "\n  ".join(err.lines(path))})


class Kept(BaseModel):
    """A section that keeps what its validator typed (`_kept`: a layer's spec, a corpus's
    options), built again where it is read after unpickling (`kept`): Ray hands a trial to a
    worker that imports its plugins, whose classes these hold, only after that."""

    _kept: Any = PrivateAttr(None)

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "__pydantic_private__": {"_kept": None}}

    def __eq__(self, other: object) -> bool:
        """Equal where the fields are: `_kept` is what they give, kept or not (a section after
        unpickling equals the one pickled)."""
        return type(self) is type(other) and self.__dict__ == other.__dict__ and (
            self.__pydantic_extra__ == other.__pydantic_extra__)

    __hash__ = None  # as BaseModel's: a mutable section is not hashable

    def kept(self) -> Any:
        if self._kept is None:
            self._kept = self._typed_once()
        return self._kept

    def _typed_once(self) -> Any:
        raise NotImplementedError


class ModelConfig(Strict, Kept):
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

    @model_validator(mode="after")
    def _typed(self) -> "ModelConfig":
        """model.attn typed and checked once by the variant's parts, with the body's sizes
        (`variants.spec`; nothing allocated): the layer as it will be built (`layer`), and
        model.attn as given, converted (what the run records and hashes). An option no part
        takes names the variant."""
        self._kept = self._typed_once()
        self.__dict__["attn"] = self._kept.given  # not an assignment: that would validate again
        return self

    def _typed_once(self) -> variants.LayerSpec:
        try:
            return variants.spec(self.variant, self.d_model, self.n_heads, self.span,
                                 self.dropout, **self.attn)
        except variants.OptionError as err:
            raise refused(err, lambda k: f"model.{k}" if k in SIZES else f"model.attn.{k}"
                          ) from None

    @property
    def layer(self) -> variants.LayerSpec:
        """Each layer's options as `variants.Attention` takes them (`variants.LayerSpec`)."""
        return self.kept()


def variant_options(variant: str, attn: dict[str, Any]) -> dict[str, variants.Option]:
    """What model.attn may hold for `variant` with these options (a span_policy or mixing in
    them changes what the layer takes)."""
    return variants.options(variant, **{k: v for k, v in attn.items()
                                        if k in ("span_policy", "mixing")})


def corpus_options(name: str) -> dict[str, variants.Option]:
    """What data may hold for corpus `name`, as its options class declares it."""
    return variants.declared(data.options(name))


class DataConfig(Kept):
    """data.name, a registered corpus; every other key is an option its corpus declares
    (`corpus_options`), typed and checked once (`variants.parse`) into the instance of its
    options class the corpus is built from (`typed`)."""

    model_config = ConfigDict(extra="allow")
    name: str = "synthetic"

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        data.check_name(v)
        return v

    @model_validator(mode="after")
    def _typed(self) -> "DataConfig":
        self._kept = self._typed_once()
        self.__pydantic_extra__.update({k: getattr(self._kept, k) for k in self.options})
        return self

    def _typed_once(self) -> Any:
        try:
            return variants.parse(data.options(self.name), self.options,
                                  f"dataset {self.name!r}")
        except variants.OptionError as err:
            raise refused(err, lambda k: f"data.{k}") from None

    @property
    def options(self) -> dict[str, Any]:
        """The corpus's options as given (defaults are its options class's)."""
        return dict(self.__pydantic_extra__ or {})

    @property
    def typed(self) -> Any:
        """The instance of the corpus's options class, as its builder takes it."""
        return self.kept()

    @property
    def vocab_size(self) -> int | None:
        """The corpus's vocabulary, without building it (None: its registration does not say;
        `bench.data.vocab_size`)."""
        return data.vocab_size(self.name, self.typed)


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
        return data.fitted(self.data.name, self.data.typed, span=self.model.span,
                           block=self.train.block, batch_size=self.train.batch_size)

    @model_validator(mode="after")
    def _static_shapes(self) -> "Config":
        """A captured step (`cuda_graphs`) replays fixed shapes and reads nothing on the host:
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
            if m.layer.learned_spans and m.layer.values().get("trim", False):
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


# smoke: seconds a run on a CPU (the runner's tests, the examples, a check that a set-up works;
# its evaluation reads 64 streams at once, not a forward per 4 x 32 characters of the whole dev
# and test splits: the bpc is the same); tiny: the CPU-scale experiments (grids with committed
# results use it: keep it as it is).
# Paper settings (adaptive-span section 4): small 12 x 512 (F 2048), large 24 x 768 (F 4096),
# 8 heads, block 512, batch 64, Adagrad 0.07 with 32k linear warm-up, per-module clip 0.03.
PRESETS: dict[str, dict] = {
    "smoke": {"model": {"d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "span": 32},
              "train": {"batch_size": 4, "block": 32, "steps": 20, "warmup": 5, "eval_every": 10,
                        "eval_tokens": 1000, "eval_batch_size": 64, "checkpoint_every": 10}},
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
        if e["type"] == "options":  # its lines name their keys in full
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
