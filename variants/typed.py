"""Options declared as types. Each part of a layer (span policy, mixing policy) declares the
options it takes as a frozen dataclass nested in its class, `Options`: a field per option, with
its type, its default and a help sentence (`option`). The layer routes model.attn by these
classes, the run's schema types them, `describe()` and the MLflow params report their values,
and the docs and the dry run list them: nothing reads a constructor's signature for options.

A part's constructor takes the layer's `Shape` and an instance of its `Options`; a subclass
extends its base's options by subclassing its `Options`."""

import inspect
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model


def option(default: Any, help: str) -> Any:
    """A field of an `Options` class: its default and one sentence on what it does."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class NoOptions:
    """The options of a part that takes none."""


@dataclass(frozen=True)
class Option:
    """One declared option: name, type, default (MISSING: required), help, and the class that
    declares it (`owner`: its qualified name, e.g. LearnedSpan.Options)."""

    name: str
    type: Any
    default: Any
    help: str
    owner: str

    @property
    def required(self) -> bool:
        return self.default is MISSING


def declared(options: type) -> dict[str, Option]:
    """The options an `Options` dataclass declares, by name in declaration order, each with
    the class that declares it (a base's options keep their base as owner; a field made from
    another class's names it as `metadata["owner"]`)."""
    hints = get_type_hints(options)
    owners = {f.name: cls.__qualname__ for cls in reversed(options.__mro__)
              if is_dataclass(cls) for f in fields(cls) if f.name in vars(cls).get(
                  "__annotations__", {})}
    return {f.name: Option(f.name, hints[f.name], f.default, f.metadata.get("help", ""),
                           f.metadata.get("owner", owners.get(f.name, options.__qualname__)))
            for f in fields(options)}


def model_of(params: dict[str, Option], name: str) -> type[BaseModel]:
    """A pydantic model of declared options (their types and defaults; unknown keys forbidden,
    any type allowed): what converts and checks given values, lax (YAML's "2e-6" a float, a
    list a tuple where a tuple is wanted). The run's schema types model.attn and data with it."""
    return create_model(name, __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
                        **{o.name: (o.type, ... if o.required else o.default)
                           for o in params.values()})


@cache
def schema(options: type) -> type[BaseModel]:
    """`model_of` one `Options` class, built once per class."""
    return model_of(declared(options), f"options of {options.__qualname__}")


def parse(options: type, given: dict[str, Any], part: str) -> Any:
    """An instance of `options` from `given`, converted by its declared types (`schema`) and
    then checked by its own `__post_init__`; a ValueError naming the option, `part` (what it
    belongs to) and the type it expected."""
    try:
        valid = schema(options).model_validate(given)
    except ValidationError as err:
        e = err.errors()[0]
        key, found = str(e["loc"][0]), declared(options)
        expected = inspect.formatannotation(found[key].type) if key in found else "no such option"
        raise ValueError(f"{key}={given.get(key)!r} is invalid for {part}: expected {expected} "
                         f"({e['msg']})") from None
    return options(**{k: getattr(valid, k) for k in given})


def check_api(kind: str, cls: type, example: str) -> None:
    """Refuse a part written for the earlier API (options as keyword-only constructor
    parameters, no `Options` class) before anything is built, with the change to make: its
    options as an `Options` dataclass (shown, written from the old constructor) and a
    constructor (shape, options). `example` is what the constructor's body reads."""
    params = list(inspect.signature(cls).parameters.values())
    if [p.name for p in params[:2]] == ["shape", "options"] and is_dataclass(
            getattr(cls, "Options", None)):
        return
    old = [p for p in params if p.kind is p.KEYWORD_ONLY]
    lines = [f"            {p.name}: {inspect.formatannotation(p.annotation)} = "
             f"option({p.default!r}, \"...\")" for p in old if p.default is not p.empty]
    raise ValueError(
        f"{kind}={cls.__name__}: its constructor is ({', '.join(p.name for p in params)}); a "
        f"{kind.replace('_', ' ')} now declares its options as a frozen dataclass `Options` and "
        "takes (shape, options):\n"
        f"    class {cls.__name__}(...):\n        @dataclass(frozen=True)\n"
        f"        class Options:  # from variants import option\n"
        + ("\n".join(lines) or "            pass") + "\n\n"
        f"        def __init__(self, shape: Shape, options: Options) -> None:\n"
        f"            {example}")
