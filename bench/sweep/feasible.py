"""What a grid's claims can say about its trials, checked before anything runs: a claim naming
a probe metric its corpus does not score, or none of whose tests the data could decide (the
setup fixes the outcome: `bench.findings.bounds`), is refused, naming the claim."""

from typing import Any

import variants
from bench.config import ConfigError
from bench.findings.bounds import Spans, decided
from bench.findings.claims import PROBE_METRIC, Claim, cells

from .trials import Trial


def spans(t: Trial) -> Spans:
    """What fixes a trial's spans: its span limit, its ramp where its spans are learned, its
    softmax heads (as its layer describes itself)."""
    m = t.cfg.model
    layer = variants.build(m.variant, d_model=m.d_model, n_heads=m.n_heads, span=m.span,
                           **m.attn).describe()
    return Spans(m.span, layer["options"]["ramp"] if layer["learned_spans"] else None,
                 layer["h"])


def _trial(trials: list[Trial], cell: dict[str, Any]) -> Trial | None:
    """A trial whose grid values include the cell's (any seed)."""
    return next((t for t in trials if all(t.values.get(k) == v for k, v in cell.items())), None)


def check(claims: list[Claim], axes: dict[str, list[Any]], trials: list[Trial]) -> None:
    """Raise ConfigError naming the claim (see the module doc)."""
    for i, c in enumerate(claims):
        where = f"claims.{i} ({c.id})"
        if (probe := PROBE_METRIC.match(c.metric)) and any(
                t.probes is not None and probe[3] not in t.probes for t in trials):
            scored = sorted({p for t in trials for p in t.probes or []}) or ["none"]
            raise ConfigError(f"{where}: metric {c.metric!r}: the runs' corpus scores no probe "
                              f"{probe[3]!r} (it scores: {', '.join(scored)})")
        if c.type == "trend" or c.margin == "planted":
            continue
        why = []
        for _, rows, base in cells(c, axes):
            found = [_trial(trials, cell) for cell in (rows, base) if cell is not None]
            if None in found:  # a --set narrowed the sweep: the report says what is missing
                break
            why.append(decided(c, c.margin, *map(spans, found), *[None] * (base is None)))
        if why and all(why):
            raise ConfigError(f"{where}: {why[0]}; no test of the claim is left to the data")
