"""What a part of a layer is built from, declared as types: the layer's `Shape` and its options.
Each part of a layer (span policy, mixing policy) declares the options it takes as a frozen
dataclass nested in its class, `Options`: a field per option, with its type, its default and a
help sentence (`bench.declare.option`, which corpora use too). The layer routes model.attn by
these classes, the run's schema types them, `describe()` and the MLflow params report their
values, and the docs and the dry run list them: nothing reads a constructor's signature for
options.

A part's constructor takes the layer's `Shape` and an instance of its `Options`; a subclass
extends its base's options by subclassing its `Options`. `parse` is the one validator of
options (a layer's parts' and a corpus's): it makes the instance, and every bad value is a line
of an `OptionError` in one format, `key=value: what was expected; what it belongs to`."""

import inspect
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from torch import nn


@dataclass(frozen=True)
class Shape:
    """One layer's dimensions, as the layer resolved and checked them: the model width, the
    span limit S, heads h_k (queries and keys), h (softmax), h_v (values), their widths d_k,
    d_v, and the relative-position table to share (S, d_k) (None: the policy's own)."""

    d_model: int
    span: int
    h_k: int
    h: int
    h_v: int
    d_k: int
    d_v: int
    key_pe: nn.Parameter | None = None


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


class OptionError(ValueError):
    """Bad option values, one line each in the one format of the project: `key=value: problem`
    (`key: problem` for a missing one). An `Options.__post_init__` raises
    OptionError(key, value, "what was expected"); the validator (`parse`) adds what the option
    belongs to and where it is declared, and a config prefixes the key with where it was given
    (`lines(path)`: model.attn.ramp, data.n_chars)."""

    def __init__(self, key: str, value: Any, expected: str) -> None:
        self.bad: list[tuple[str, Any, str]] = [(key, value, f"expected {expected}")]
        super().__init__()

    @classmethod
    def of(cls, bad: list[tuple[str, Any, str]]) -> "OptionError":
        """Several bad values: (key (None: a line of its own), value (MISSING: none given),
        problem) each."""
        err = cls("", None, "")
        err.bad = list(bad)
        return err

    @classmethod
    def joined(cls, errors: list["OptionError"]) -> "OptionError":
        return cls.of([b for e in errors for b in e.bad])

    def lines(self, path: Any = str) -> list[str]:
        """One line per bad value, its key written `path(key)` (default: as it is)."""
        return [problem if k is None else f"{path(k)}: {problem}" if v is MISSING
                else f"{path(k)}={v!r}: {problem}" for k, v, problem in self.bad]

    def __str__(self) -> str:
        return "\n".join(self.lines())


@cache
def schema(options: type) -> type[BaseModel]:
    """A pydantic model of an `Options` class, built once per class: its declared types and
    defaults, unknown keys forbidden, any type allowed, lax (YAML's "2e-6" a float, a list a
    tuple where a tuple is wanted)."""
    return create_model(f"options of {options.__qualname__}",
                        __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=True),
                        **{o.name: (o.type, ... if o.required else o.default)
                           for o in declared(options).values()})


def parse(options: type, given: dict[str, Any], owner: str) -> Any:
    """The one validator of options: an instance of the `Options` class `options` from `given`,
    converted by its declared types (`schema`), then checked by its own `__post_init__`. Every
    bad value is a line of an OptionError: a wrong type names the type expected, an unknown key
    what the options belong to (`owner`, e.g. "variant 'adaptive'") and what they take, and
    each line on a declared option ends with what it belongs to, the class that declares it and
    its help."""
    found = declared(options)
    try:
        valid = schema(options).model_validate(given)
    except ValidationError as err:
        raise OptionError.of([_bad(e, given, found, owner) for e in err.errors()]) from None
    try:
        return options(**{k: getattr(valid, k) for k in given})
    except OptionError as err:
        raise OptionError.of([(k, v, p + _about(found.get(k), owner)) for k, v, p in err.bad]
                             ) from None
    except (ValueError, TypeError) as err:  # a plugin's own check, written otherwise
        raise OptionError.of([(None, MISSING, f"{err}; options of {owner}, declared by "
                               f"{options.__qualname__}")]) from None


def _bad(e: dict, given: dict[str, Any], found: dict[str, Option], owner: str
         ) -> tuple[str, Any, str]:
    """A pydantic error on `given` as an OptionError line (key, value, problem)."""
    key = str(e["loc"][0])
    inner = ".".join(str(x) for x in e["loc"][1:] if isinstance(x, str))
    if inner:  # a key inside a structured option (a dataclass)
        return f"{key}.{inner}", e.get("input", MISSING) if e["type"] != "missing" else MISSING, \
            e["msg"]
    if e["type"] == "extra_forbidden":
        return key, given[key], f"unknown option of {owner}; allowed: {', '.join(found)}"
    if e["type"] == "missing":
        return key, MISSING, "required" + _about(found[key], owner)
    expected = inspect.formatannotation(found[key].type)
    return key, given[key], f"expected {expected} ({e['msg']})" + _about(found[key], owner)


def _about(o: Option | None, owner: str) -> str:
    """"; an option of <owner>, declared by <class>: <help>" ("" for no declared option)."""
    return f"; an option of {owner}, declared by {o.owner}: {o.help}" if o else ""


def check_api(kind: str, cls: type, example: str) -> None:
    """Refuse a part written for the earlier API before anything is built: options taken as
    keyword-only constructor parameters, or an `Options` that is not a dataclass, or a
    constructor that cannot take (shape, options) positionally. Whatever its parameters are
    called, (shape, opts) included, a part with a dataclass `Options` and such a constructor
    passes. The refusal shows the change to make: an `Options` dataclass with every option the
    part declares (its `Options` fields, then its keyword-only parameters) and a constructor
    (shape, options). `example` is what the constructor's body reads."""
    params = list(inspect.signature(cls).parameters.values())
    keyword = [p for p in params if p.kind is p.KEYWORD_ONLY]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_two = len(positional) >= 2 and all(p.default is not p.empty for p in positional[2:])
    takes_two |= any(p.kind is p.VAR_POSITIONAL for p in params)
    options = getattr(cls, "Options", None)
    if is_dataclass(options) and not keyword and takes_two:
        return
    kept = _fields_of(options) + [(p.name, Any if p.annotation is p.empty else p.annotation,
                                   MISSING if p.default is p.empty else p.default, "...")
                                  for p in keyword]
    lines = [f"            {name}: {_annotation(hint)} = " + (
        f"field(metadata={{'help': {help!r}}})" if default is MISSING
        else f"option({default!r}, {help!r})") for name, hint, default, help in kept]
    base = next((c.Options for c in cls.__mro__[1:] if is_dataclass(getattr(c, "Options", None))
                 and c.Options is not NoOptions and c.Options is not options), None)
    raise ValueError(
        f"{kind}={cls.__name__}: its constructor is ({', '.join(p.name for p in params)})"
        + ("" if is_dataclass(options) else " and its Options is not a dataclass") + "; a "
        f"{kind.replace('_', ' ')} declares its options as a frozen dataclass `Options` and "
        "takes (shape, options):\n"
        f"    class {cls.__name__}(...):\n        @dataclass(frozen=True)\n"
        f"        class Options{f'({base.__qualname__})' if base else ''}:  # from variants "
        "import option\n" + ("\n".join(lines) or "            pass") + "\n\n"
        f"        def __init__(self, shape: Shape, options: Options) -> None:\n"
        f"            {example}")


def _fields_of(options: Any) -> list[tuple[str, Any, Any, str]]:
    """(name, type, default, help) of what an `Options` class declares itself: a dataclass's
    fields (its base's aside), or a plain class's annotated attributes; [] for none."""
    if options is None or options is NoOptions:
        return []
    own = vars(options).get("__annotations__", {})
    if is_dataclass(options):
        return [(f.name, f.type, f.default, f.metadata.get("help", "..."))
                for f in fields(options) if f.name in own]
    return [(k, t, vars(options).get(k, MISSING), "...") for k, t in own.items()]


def _annotation(hint: Any) -> str:
    return hint if isinstance(hint, str) else inspect.formatannotation(hint)
