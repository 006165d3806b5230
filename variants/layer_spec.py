"""What an attention layer is built from, typed and checked once (`make`): the layer's own
options (`LayerOptions`: span policy, mixing, heads, query chunk), its parts' classes with their
`Options` instances, and its shape. The run's schema makes one per config (bench.config),
`variants.build` one per call; the layer (`Attention`) takes it as it is. Every bad value is a
line of an `OptionError`, in one format, whether it came from a grid, `--set` or Python."""

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from torch import nn

from bench.declare import option

from . import mixing as mix
from . import span as sp
from .typed import Option, OptionError, Shape, check_api, declared, parse

SpanArg = str | type[sp.SpanPolicy]
MixingArg = str | type[mix.MixingPolicy]
SIZES = ("d_model", "n_heads", "span", "dropout")  # the body's, not options: `make`'s `sizes`


def _positive(o: Any, *keys: str) -> None:
    """OptionError for each of `keys` of `o` that is neither None nor a positive int."""
    bad = [(k, v, "expected a positive int, or None for its default") for k in keys
           if (v := getattr(o, k)) is not None and not (isinstance(v, int) and v > 0)]
    if bad:
        raise OptionError.of(bad)


@dataclass(frozen=True)
class Heads:
    """The layer's head options: heads h_k (queries and keys), h (softmax), h_v (values),
    default n_heads; widths d_k, d_v, default `width` over their heads, and `width` default
    d_model (talking-heads Table 1 keeps h d_k = h d_v = width as h grows)."""

    h_k: int | None = option(None, "query and key heads (default n_heads; != h needs P_l)")
    h: int | None = option(None, "softmax heads (default n_heads)")
    h_v: int | None = option(None, "value heads (default n_heads; != h needs P_w)")
    d_k: int | None = option(None, "query and key width per head (default width / h_k)")
    d_v: int | None = option(None, "value width per head (default width / h_v)")
    width: int | None = option(None, "the attention's width h_k d_k = h_v d_v (default "
                               "d_model)")

    def __post_init__(self) -> None:
        _positive(self, "h_k", "h", "h_v", "d_k", "d_v", "width")


@dataclass(frozen=True)
class LayerOptions(Heads):
    """The layer's own options (model.attn.<option>), beside its policies': `span_policy` and
    `mixing` (registered names or policy classes), the heads (`Heads`) and the query `chunk`
    (None: the device's default)."""

    span_policy: SpanArg = option("fixed", "the span policy: a registered name or a class")
    mixing: MixingArg = option("none", "the head mixing: a registered name or a class")
    chunk: int | None = option(None, "queries per chunk (default: 64 on a CPU, the block on "
                               "a GPU)")

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive(self, "chunk")


# the policies by name, registered by a call (`register_policy`; the built-in ones in
# variants/named.py): kind -> name -> (class, the constructor arguments the name fixes)
POLICIES: dict[str, dict[str, tuple[type, dict[str, Any]]]] = {"span_policy": {}, "mixing": {}}
BASES = {"span_policy": sp.SpanPolicy, "mixing": mix.MixingPolicy}


def register_policy(kind: str, name: str, cls: type, **fixed: Any) -> None:
    """Register span policy (`kind` span_policy) or head mixing (`kind` mixing) `name`: the
    class `cls` with the constructor arguments the name fixes (`fixed`, e.g. talking heads'
    mix_logits), as `variants.register` registers a variant; a ValueError for a name already
    registered or a class of another kind."""
    if name in POLICIES[kind]:
        raise ValueError(f"{kind} {name!r} is already registered")
    if not (isinstance(cls, type) and issubclass(cls, BASES[kind])):
        raise ValueError(f"{kind} {name!r}: {cls!r} is not a subclass of "
                         f"{BASES[kind].__name__}")
    POLICIES[kind][name] = cls, fixed


def policy_class(kind: str, value: SpanArg | MixingArg) -> tuple[type, dict]:
    """A span or mixing policy, by registered name or as a class -> (class, the constructor
    arguments the name fixes); an OptionError naming `kind` for anything else, and a ValueError
    for a class of the earlier API (`check_api`), with the change to make."""
    names, base = POLICIES[kind], BASES[kind]
    if isinstance(value, str) and value in names:
        return names[value]
    if not (isinstance(value, type) and issubclass(value, base)):
        raise OptionError(kind, value, f"one of {tuple(names)}, or a subclass of {base.__name__}")
    check_api(kind, value, "super().__init__(shape, options)  # shape.h, shape.span, "
              "shape.d_model, ...; options.<name>")
    return value, {}


def layer_options(span_policy: SpanArg = "fixed", mixing: MixingArg = "none"
                  ) -> dict[str, Option]:
    """Every option a layer of these policies takes, as their classes declare them: the
    layer's own (`LayerOptions`) and its span and mixing policies' (their `Options`)."""
    return (declared(LayerOptions)
            | declared(policy_class("span_policy", span_policy)[0].Options)
            | declared(policy_class("mixing", mixing)[0].Options))


def check_heads(d_model: int, n_heads: int, free: set[str], heads: Heads) -> tuple[int, ...]:
    """Validate the heads and widths against the body's d_model and n_heads before anything is
    allocated; return h_k, h, h_v, d_k, d_v with their defaults (`Heads`). h_k and h_v not in
    `free` (the mixing class's `free_heads`) must equal h. An OptionError for each bad one."""
    width = heads.width or d_model
    h_k, h, h_v = heads.h_k or n_heads, heads.h or n_heads, heads.h_v or n_heads
    bad = []
    for name, count, dim in (("h_k", h_k, heads.d_k), ("h_v", h_v, heads.d_v)):
        if dim is None and width % count:
            bad.append((name if count != n_heads else "n_heads", count, f"expected a divisor of "
                        f"the width {width} (model.attn.width, default d_model)"))
    if "h_k" not in free and h != h_k:
        bad.append(("h", h, f"expected h == h_k={h_k} without a logits projection"))
    elif "h_v" not in free and h_v != h:
        bad.append(("h_v", h_v, f"expected h_v == h={h} without a weights projection"))
    if bad:
        raise OptionError.of(list(dict.fromkeys(bad)))
    return h_k, h, h_v, heads.d_k or width // h_k, heads.d_v or width // h_v


@dataclass(frozen=True)
class Part:
    """One part of a layer: its class, its `Options` instance, and the constructor arguments
    its registered name fixes (talking heads' `mix_logits`, `mix_weights`)."""

    cls: type
    options: Any
    fixed: dict[str, Any] = field(default_factory=dict)

    def build(self, shape: Shape) -> nn.Module:
        return self.cls(shape, self.options, **self.fixed)


@dataclass(frozen=True)
class LayerSpec:
    """A layer's shape (its relative-position table aside: the layer's own or the body's), its
    attention dropout, its own options and its two parts, checked; and `given`, the options as
    they were given, converted by their types (what a config records and hashes)."""

    shape: Shape
    dropout: float
    own: LayerOptions
    span: Part
    mixing: Part
    given: dict[str, Any]

    @property
    def learned_spans(self) -> bool:
        """Whether its span policy learns its spans (adaptive, dynamic)."""
        return self.span.cls.learned

    def values(self) -> dict[str, Any]:
        """Every option of the layer with its value: its own, then its parts' (defaults
        included)."""
        own = {f.name: getattr(self.own, f.name) for f in fields(self.own)}
        return {**own, **asdict(self.span.options), **asdict(self.mixing.options)}


def _sizes(d_model: Any, n_heads: Any, span: Any, dropout: Any) -> None:
    """The body's sizes, as a layer built alone gets them (a config's schema types them)."""
    bad = [(k, v, "expected a positive int") for k, v in (("d_model", d_model),
                                                          ("n_heads", n_heads), ("span", span))
           if not (isinstance(v, int) and v > 0)]
    if not (isinstance(dropout, int | float) and 0 <= dropout < 1):
        bad.append(("dropout", dropout, "expected a value in [0, 1)"))
    if bad:
        raise OptionError.of(bad)


def make(settings: dict[str, Any], sizes: dict[str, Any], owner: str,
         given: list[str]) -> LayerSpec:
    """A layer's spec from `settings` (its variant's defaults with the options given on top)
    and the body's `sizes` (d_model, n_heads, span, dropout), checked in that order: sizes,
    policies, unknown options, each part's options (`parse`), the heads. An OptionError lists
    every bad value of a stage; `owner` names what the options belong to in it (e.g. "variant
    'adaptive'"); `given` names the options given, in order, whose converted values the
    spec's `given` keeps."""
    _sizes(*(sizes[k] for k in SIZES))
    ours = {k: v for k, v in settings.items() if k in declared(LayerOptions)}
    span_cls, span_fixed = policy_class("span_policy", ours.get("span_policy", "fixed"))
    mix_cls, mix_fixed = policy_class("mixing", ours.get("mixing", "none"))
    parts = {"own": LayerOptions, "span": span_cls.Options, "mixing": mix_cls.Options}
    takes = {part: declared(cls) for part, cls in parts.items()}
    done, errors = {}, []
    if unknown := sorted(set(settings) - {k for t in takes.values() for k in t}):
        allowed = ", ".join(dict.fromkeys(k for t in takes.values() for k in t))
        errors.append(OptionError.of([(k, settings[k], f"unknown option of {owner}; allowed: "
                                       f"{allowed}") for k in unknown]))
    for part, cls in parts.items():
        try:
            done[part] = parse(cls, {k: v for k, v in settings.items() if k in takes[part]},
                               owner)
        except OptionError as err:
            errors.append(err)
    if errors:
        raise OptionError.joined(errors)
    own: LayerOptions = done["own"]
    read = {"h", *mix_cls.heads}  # the span policy takes h heads
    if unread := [(k, v, f"not an option of mixing {_called(own.mixing)} (it reads "
                   f"{', '.join(sorted(read))})") for k in declared(Heads)
                  if k != "width" and k not in read and (v := getattr(own, k)) is not None]:
        raise OptionError.of(unread)
    h_k, h, h_v, d_k, d_v = check_heads(sizes["d_model"], sizes["n_heads"],
                                        mix_cls.free_heads(mix_fixed), own)
    values = {k: getattr(done[p], k) for p in parts for k in takes[p]}
    return LayerSpec(Shape(sizes["d_model"], sizes["span"], h_k, h, h_v, d_k, d_v),
                     sizes["dropout"], own, Part(span_cls, done["span"], span_fixed),
                     Part(mix_cls, done["mixing"], mix_fixed),
                     {k: values[k] for k in given})


def _called(value: SpanArg | MixingArg) -> str:
    """A policy as messages name it: its registered name, or its class's name."""
    return value if isinstance(value, str) else value.__name__

