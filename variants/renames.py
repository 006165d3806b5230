"""One name per thing: the names variants and policies had before they were renamed, the one
table of them. A config that uses one is refused with the name to use; `python -m bench.retag`
migrates the records made under them (runs in an MLflow store, committed results) once."""

# (what it names, its earlier name) -> its name now
RENAMED: dict[tuple[str, str], str] = {("model.variant", "dynamic"): "dynamic-span",
                                       ("span_policy", "dynamic"): "dynamic-span",
                                       ("mixing", "dynamic"): "dynamic-projections"}


def renamed(kind: str, name: str) -> str:
    """" (X was renamed Y: ...)" for a name `kind` (model.variant, span_policy, mixing) had
    before it was renamed; "" for any other."""
    now = RENAMED.get((kind, name))
    return f" ({name!r} was renamed {now!r}; python -m bench.retag migrates records made " \
        "under it)" if now else ""
