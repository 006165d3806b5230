"""timm-style registry of variants: `register` a preset (a span policy, a mixing policy and
defaults for their options), `build(name, **cfg)` it, list `names()`; what a variant accepts is
its parts' signatures (`options(name)`)."""

import inspect

from .attention import Attention, MixingArg, SpanArg, layer_options

_PRESETS: dict[str, dict] = {}


def register(name: str, *, span_policy: SpanArg = "fixed", mixing: MixingArg = "none",
             **defaults) -> None:
    """Register variant `name`: a layer of `span_policy` and `mixing` (registered names or
    policy classes, e.g. a plugin's own) with `defaults` for any of its options. A ValueError
    for a name already registered or a default no part of the layer takes."""
    if name in _PRESETS:
        raise ValueError(f"variant {name!r} is already registered")
    preset = {"span_policy": span_policy, "mixing": mixing, **defaults}
    if unknown := sorted(set(preset) - set(layer_options(span_policy, mixing))):
        raise ValueError(f"variant {name!r}: {unknown} are not options of its layer")
    _PRESETS[name] = preset


def names() -> list[str]:
    """Registered variant names, sorted."""
    return sorted(_PRESETS)


def check_name(name: str) -> None:
    """Raise a ValueError naming `name` and the registered names if it is unknown."""
    if name not in _PRESETS:
        raise ValueError(f"variant: unknown name {name!r}; registered: {', '.join(names())}")


def build(name: str, **cfg) -> Attention:
    """Build the attention layer registered as `name`; `cfg` overrides the preset's keys.

    `build(name, d_model=D, n_heads=H, span=S, **options)` returns a module mapping
    x (B, M, D) [and an optional cache (B, C, D)] to (B, M, D).
    """
    check_name(name)
    return Attention(**{**_PRESETS[name], **cfg})


def options(name: str, **overrides) -> dict[str, inspect.Parameter]:
    """The options `build(name, ...)` accepts (beyond the body's d_model, n_heads, span,
    dropout, key_pe), with their annotations and the defaults of the variant: the layer's own
    and those of its span and mixing policies, which `overrides` may replace (e.g.
    options("adaptive", mixing="both") includes talking heads' mix_init)."""
    check_name(name)
    preset = {**_PRESETS[name], **{k: v for k, v in overrides.items()
                                   if k in ("span_policy", "mixing")}}
    params = layer_options(preset["span_policy"], preset["mixing"])
    return {k: p.replace(default=preset[k]) if k in preset else p for k, p in params.items()}
