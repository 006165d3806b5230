"""Tables of options, read from the classes that declare them (`variants.options`,
`bench.config.corpus_options`): the reference that `python -m bench.options` prints and
docs/options.md holds, and the dry run's table of the options a grid's trials run with."""

import re

import pandas as pd

import variants
from bench import data
from bench.config import Config, corpus_options
from variants import Option
from variants.layer_spec import LayerOptions

OWN = variants.declared(LayerOptions)  # every layer's own options


def type_name(t: object) -> str:
    """A type as a reader writes it, without module paths and without `|` (a table's column
    separator): float, int or None, Literal['identity', 'random'], Recall or None."""
    text = t.__name__ if isinstance(t, type) and not getattr(t, "__args__", None) else str(t)
    text = re.sub(r"\b(?:[a-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", text.replace("typing.", ""))
    return text.replace(" | ", " or ")


def markdown(df: pd.DataFrame) -> str:
    """A table as markdown, every cell as written (no number parsing: 32.0 stays 32.0)."""
    return df.to_markdown(index=False, disable_numparse=True)


def _value(v: object) -> str:
    return v.__name__ if isinstance(v, type) else repr(v)


def _name(v: object) -> str:
    return v if isinstance(v, str) else _value(v)


def table(options: dict[str, Option]) -> pd.DataFrame:
    """One row per option: name, type, default (`required` where none), the class that
    declares it, and its help."""
    return pd.DataFrame([{"option": o.name, "type": type_name(o.type),
                          "default": "required" if o.required else _value(o.default),
                          "declared by": o.owner, "help": o.help} for o in options.values()],
                        columns=["option", "type", "default", "declared by", "help"])


def reference(names: list[str] | None = None) -> str:
    """Markdown: the layer's own options, then each variant's (its parts', with the variant's
    defaults) and each corpus's; `names` picks variants and corpora (default: all registered)."""
    picked = [n for n in variants.names() if names is None or n in names]
    corpora = [n for n in data.names() if names is None or n in names]
    out = ["## Every layer's own options (`model.attn.<option>`)\n", markdown(table(OWN))]
    for name in picked:
        options = variants.options(name)
        span, mixing = (_name(options[k].default) for k in ("span_policy", "mixing"))
        own = {k: o for k, o in options.items() if k not in OWN}
        out += [f"\n### variant `{name}`: span policy `{span}`, mixing `{mixing}`\n",
                markdown(table(own)) if own else "No options beyond the layer's own."]
    for name in corpora:
        out += [f"\n## corpus `{name}` (`data.<option>`)\n",
                markdown(table(corpus_options(name)))]
    return "\n".join(out) + "\n"


def trial_options(cfgs: list[Config]) -> pd.DataFrame:
    """The dry run's table: one row per option of the trials' variants, with the values the
    trials resolve it to per variant (every option, defaults included; `-`: the variant does
    not take it), its type and its help."""
    values: dict[str, dict[str, list]] = {}
    types: dict[str, Option] = {}
    models = {(m.variant, repr(sorted(m.attn.items()))): m for m in (c.model for c in cfgs)}
    for m in models.values():  # each distinct variant and options once
        declared, resolved = variants.options(m.variant, **m.attn), m.layer.values()
        types |= declared
        for k in declared:
            seen = values.setdefault(k, {}).setdefault(m.variant, [])
            if (v := _value(resolved[k])) not in seen:
                seen.append(v)
    names = list(dict.fromkeys(m.variant for m in models.values()))
    return pd.DataFrame([{"option": k, "type": type_name(types[k].type),
                          **{n: ", ".join(by.get(n, ["-"])) for n in names},
                          "help": types[k].help} for k, by in values.items()])
