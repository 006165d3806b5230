"""What a claim's metric can be by construction: a test whose outcome the setup decides (a span
spread above S / R, fewer FLOPs where every span is capped at S, fewer than half the heads long
where R >= S / 2) is not run as if the data could decide it; the dry run refuses a claim none
of whose tests can be decided by data.

A learned span (adaptive, dynamic) reports z + R per head, capped at S, with z >= 0: every
head's span lies in [min(R, S), S], so with R >= S it is S, as a fixed window's is, and with
R >= S / 2 every head reaches half the longest one's.
"""

from dataclasses import dataclass

from bench.experiment.claims import Claim

# metrics fixed by the spans alone: equal for two rows whose spans are all S (the same config)
SPAN_METRICS = ("mean_span", "span_fraction", "max_head_span", "head_span_spread",
                "long_head_fraction", "layer_span_ratio", "flops_mean", "flops_max")


@dataclass(frozen=True)
class Spans:
    """What fixes a row's spans: its span limit S, its ramp R where its spans are learned (None:
    a fixed window) and its softmax heads h."""

    S: int
    R: float | None
    h: int

    @property
    def capped(self) -> bool:
        """Every head's span is S, whatever is learned."""
        return self.R is None or self.R >= self.S

    def describe(self) -> str:
        return f"S = {self.S}" + ("" if self.R is None else f", R = {self.R:g}")


def span_range(metric: str, sp: Spans) -> tuple[float, float] | None:
    """[lowest, highest] the metric can take with these spans; None where they do not fix it."""
    S, shortest = sp.S, sp.S if sp.capped else sp.R
    return {"mean_span": (shortest, S), "span_fraction": (shortest / S, 1.0),
            "max_head_span": (shortest, S), "head_span_spread": (1.0, S / shortest),
            "long_head_fraction": (1.0 if 2 * shortest >= S else 1 / sp.h, 1.0),
            "layer_span_ratio": (shortest / S, S / shortest)}.get(metric)


def decided(claim: Claim, margin: float, rows: Spans, base: Spans | None) -> str | None:
    """Why the setup decides this test of `claim` (its rows' spans, and its baseline's), or
    None where the data can. Trend claims are left to the data."""
    if claim.type == "trend" or claim.metric not in SPAN_METRICS or claim.floor == "R":
        return None  # above R a head's span is its growth z in [0, S - R]: data decide it
    if base is not None:
        if not (rows.capped and base.capped and rows.S == base.S):
            r, b = span_range(claim.metric, rows), span_range(claim.metric, base)
            if r is None or b is None:
                return None
            low, high = r[0] - b[1], r[1] - b[0]
        else:
            low = high = 0.0
        why = f"rows at {rows.describe()}, baseline at {base.describe()}"
    else:
        if (found := span_range(claim.metric, rows)) is None:
            return None
        (low, high), why = found, f"rows at {rows.describe()}"
    m = margin
    can = {"less": low < m, "greater": high > m, "equivalent": high > -m and low < m}
    must = {"less": high < m, "greater": low > m, "equivalent": -m < low and high < m}
    what = f"{claim.metric} {'difference ' if base else ''}lies in [{low:.3g}, {high:.3g}]"
    if not can[claim.expect]:
        return f"cannot hold by construction: {what} ({why})"
    if must[claim.expect]:
        return f"holds by construction: {what} ({why})"
    return None
