"""How an option is declared, the one helper the data room and variants share: `option`, a
field of an `Options` dataclass with its default and one sentence of help. It sits below both
rooms (the table in pyproject.toml), so a corpus declares its options as a variant's parts do
without the data room importing variants; `variants.typed` reads the help back."""

from dataclasses import field
from typing import Any


def option(default: Any, help: str) -> Any:
    """A field of an `Options` class (a layer part's, model.attn.<option>; a corpus's,
    data.<option>): its default (MISSING: required) and one sentence on what it does
    (`metadata["help"]`, which the docs and the schema show)."""
    return field(default=default, metadata={"help": help})
