"""How findings print numbers: logged flags, sizes and costs (grid values as written:
`bench.experiment.claims.num`)."""


def as_bool(v: object) -> bool:
    """A logged flag as a bool: the writer logs params as JSON (`true`); older runs logged
    Python's `True`."""
    return str(v).lower() == "true"


def si_format(x: float, ref: float | None = None) -> str:
    """42_100_000 -> '42.1M': three significant digits (as the paper's #Params and #FLOPS), in
    the unit that suits `ref` (default x), so that a std reads in its mean's unit."""
    ref = abs(x if ref is None else ref)
    div, unit = next((u for u in ((1e9, "G"), (1e6, "M"), (1e3, "K")) if ref >= u[0]), (1, ""))
    return f"{x / div:.3g}{unit}"
