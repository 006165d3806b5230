"""timm-style registry of variants: `register` a preset (a span policy, a mixing policy and
defaults for their options), `build(name, **cfg)` it, list `names()`; what a variant accepts is
its parts' signatures (`options(name)`). A renamed variant keeps its earlier name as an `alias`:
the same model under either name."""

import inspect

from .attention import Attention, MixingArg, SpanArg, layer_options

_PRESETS: dict[str, dict] = {}
_ALIASES: dict[str, str] = {}  # an earlier name -> the registered name it stands for


def register(name: str, *, span_policy: SpanArg = "fixed", mixing: MixingArg = "none",
             **defaults) -> None:
    """Register variant `name`: a layer of `span_policy` and `mixing` (registered names or
    policy classes, e.g. a plugin's own) with `defaults` for any of its options. A ValueError
    for a name already registered or a default no part of the layer takes."""
    if name in _PRESETS or name in _ALIASES:
        raise ValueError(f"variant {name!r} is already registered")
    preset = {"span_policy": span_policy, "mixing": mixing, **defaults}
    if unknown := sorted(set(preset) - set(layer_options(span_policy, mixing))):
        raise ValueError(f"variant {name!r}: {unknown} are not options of its layer")
    _PRESETS[name] = preset


def alias(earlier: str, name: str) -> None:
    """Keep `earlier`, a renamed variant's first name, as another name of registered `name`."""
    check_name(name)
    if earlier in _PRESETS or earlier in _ALIASES:
        raise ValueError(f"variant {earlier!r} is already registered")
    _ALIASES[earlier] = name


def canonical(name: str) -> str:
    """The registered name `name` stands for (itself, or what its alias names); unknown names
    as given, for `check_name` to refuse."""
    return _ALIASES.get(name, name)


def aliases(name: str) -> list[str]:
    """The earlier names of registered variant `name`."""
    return [a for a, n in _ALIASES.items() if n == name]


def names() -> list[str]:
    """Registered variant names, sorted (aliases left out)."""
    return sorted(_PRESETS)


def check_name(name: str) -> None:
    """Raise a ValueError naming `name` and the registered names if it is unknown."""
    if name not in _PRESETS and name not in _ALIASES:
        raise ValueError(f"variant: unknown name {name!r}; registered: {', '.join(names())}")


def _preset(name: str) -> dict:
    check_name(name)
    return _PRESETS[_ALIASES.get(name, name)]


def build(name: str, **cfg) -> Attention:
    """Build the attention layer registered as `name`; `cfg` overrides the preset's keys.

    `build(name, d_model=D, n_heads=H, span=S, **options)` returns a module mapping
    x (B, M, D) [and an optional cache (B, C, D)] to (B, M, D).
    """
    return Attention(**{**_preset(name), **cfg})


def options(name: str, **overrides) -> dict[str, inspect.Parameter]:
    """The options `build(name, ...)` accepts (beyond the body's d_model, n_heads, span,
    dropout, key_pe), with their annotations and the defaults of the variant: the layer's own
    and those of its span and mixing policies, which `overrides` may replace (e.g.
    options("adaptive", mixing="both") includes talking heads' mix_init)."""
    preset = {**_preset(name), **{k: v for k, v in overrides.items()
                                   if k in ("span_policy", "mixing")}}
    params = layer_options(preset["span_policy"], preset["mixing"])
    return {k: p.replace(default=preset[k]) if k in preset else p for k, p in params.items()}
