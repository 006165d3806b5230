"""timm-style registry of variants: `register` a variant (a span policy, a mixing policy and
defaults for their options), `build(name, **cfg)` it, list `names()`; what a variant accepts is
what its parts' `Options` classes declare (`options(name)`), and `spec` types and checks a
layer's options once, as the layer takes them. One name per thing: an earlier name is refused,
saying what it is called now (`names.RENAMED`)."""

from dataclasses import replace

from .attention import Attention
from .layer_spec import SIZES, LayerSpec, MixingArg, SpanArg, layer_options, make
from .span import check
from .typed import Option, Shape, declared, parse

_VARIANTS: dict[str, dict] = {}  # name -> its span policy, mixing and option defaults
PROBE = Shape(d_model=32, span=64, h_k=2, h=2, h_v=2, d_k=16, d_v=16)  # a span policy's check


def register(name: str, *, span_policy: SpanArg = "fixed", mixing: MixingArg = "none",
             **defaults) -> None:
    """Register variant `name`: a layer of `span_policy` and `mixing` (registered names or
    policy classes, e.g. a plugin's own) with `defaults` for any of its options. A ValueError
    for a name already registered, a default no part of the layer takes, or a span policy class
    whose mask leaves a query without a key or whose spans disagree with its mask (`span.check`,
    on a layer of `PROBE`'s shape), one line naming the variant."""
    if name in _VARIANTS:
        raise ValueError(f"variant {name!r} is already registered")
    variant = {"span_policy": span_policy, "mixing": mixing, **defaults}
    if unknown := sorted(set(variant) - set(layer_options(span_policy, mixing))):
        raise ValueError(f"variant {name!r}: {unknown} are not options of its layer")
    if isinstance(span_policy, type):
        cls = span_policy
        given = {k: v for k, v in defaults.items() if k in declared(cls.Options)}
        policy = cls(PROBE, parse(cls.Options, given, f"variant {name!r}"))
        try:
            check(policy)
        except ValueError as err:
            raise ValueError(f"variant {name!r}: {err}") from None
    _VARIANTS[name] = variant


def names() -> list[str]:
    """Registered variant names, sorted."""
    return sorted(_VARIANTS)


def check_name(name: str) -> None:
    """Raise a ValueError naming `name` and the registered names if it is unknown."""
    if name not in _VARIANTS:
        raise ValueError(f"variant: unknown name {name!r}; registered: {', '.join(names())}")


def _variant(name: str) -> dict:
    check_name(name)
    return _VARIANTS[name]


def spec(name: str, d_model: int, n_heads: int, span: int, dropout: float = 0.0,
         **options) -> LayerSpec:
    """The layer of variant `name` with these sizes and `options` (overriding the variant's),
    typed and checked once (`spec.make`), before anything is allocated: an OptionError with a
    line per bad value."""
    sizes = dict(zip(SIZES, (d_model, n_heads, span, dropout), strict=True))
    return make({**_variant(name), **options}, sizes, f"variant {name!r}", list(options))


def build(name: str, **cfg) -> Attention:
    """Build the attention layer registered as `name`; `cfg` overrides the variant's keys.

    `build(name, d_model=D, n_heads=H, span=S, **options)` (and optionally dropout, and key_pe,
    a shared relative-position table) returns a module mapping x (B, M, D) [and an optional
    cache (B, C, D)] to (B, M, D). Its options are typed and checked by `spec`.
    """
    key_pe = cfg.pop("key_pe", None)
    return Attention(spec(name, **cfg), key_pe)


def options(name: str, **overrides) -> dict[str, Option]:
    """The options `build(name, ...)` accepts (beyond the body's d_model, n_heads, span,
    dropout, key_pe), typed, with help and the defaults of the variant: the layer's own
    and those of its span and mixing policies, which `overrides` may replace (e.g.
    options("adaptive", mixing="both") includes talking heads' mix_init)."""
    variant = {**_variant(name), **{k: v for k, v in overrides.items()
                                     if k in ("span_policy", "mixing")}}
    params = layer_options(variant["span_policy"], variant["mixing"])
    return {k: replace(p, default=variant[k]) if k in variant else p for k, p in params.items()}
