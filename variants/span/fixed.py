"""Fixed span: a hard window of S keys for every head (the baseline of both papers)."""

from .base import SpanPolicy


class FixedSpan(SpanPolicy):
    """Every head attends over distances 0..S-1 with weight 1."""

    name = "fixed"
