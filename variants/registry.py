"""timm-style registry: `@register` a factory, `build(name, **cfg)` it, list `names()`; the
factory's signature is the check of its options (`options(name)`)."""

import inspect
from collections.abc import Callable

from torch import nn

from .attention import Attention

_FACTORIES: dict[str, Callable[..., nn.Module]] = {}


def register(name: str) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator: register `fn(**cfg) -> nn.Module` under `name`."""

    def wrap(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if name in _FACTORIES:
            raise ValueError(f"variant {name!r} is already registered")
        _FACTORIES[name] = fn
        return fn

    return wrap


def names() -> list[str]:
    """Registered variant names, sorted."""
    return sorted(_FACTORIES)


def check_name(name: str) -> None:
    """Raise a ValueError naming `name` and the registered names if it is unknown."""
    if name not in _FACTORIES:
        raise ValueError(f"variant: unknown name {name!r}; registered: {', '.join(names())}")


def build(name: str, **cfg) -> nn.Module:
    """Build the attention layer registered as `name`; `cfg` overrides the preset's keys.

    `build(name, d_model=D, n_heads=H, span=S, **options)` returns a module mapping
    x (B, M, D) [and an optional cache (B, C, D)] to (B, M, D).
    """
    check_name(name)
    return _FACTORIES[name](**cfg)


def options(name: str) -> dict[str, inspect.Parameter]:
    """The keyword options `build(name, ...)` accepts, with their annotations and defaults.

    They are the factory's own parameters; a factory that takes `**cfg` forwards it to
    `Attention`, whose parameters it then accepts too (as the presets and the README's plugin do).
    """
    check_name(name)
    out: dict[str, inspect.Parameter] = {}
    for p in inspect.signature(_FACTORIES[name], eval_str=True).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            forwarded = inspect.signature(Attention, eval_str=True).parameters
            out.update({k: v for k, v in forwarded.items() if k not in out})
        elif p.kind is not p.VAR_POSITIONAL:
            out[p.name] = p
    return out
