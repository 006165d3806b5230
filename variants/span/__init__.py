"""Span policies: fixed, adaptive, dynamic-span (alias: dynamic)."""

from .adaptive import AdaptiveSpan
from .base import LearnedSpan, SpanPolicy
from .dynamic import DynamicSpan
from .fixed import FixedSpan

# name -> class; `dynamic`, its first name (and what its layer reports), is kept as an alias
POLICIES = {**{cls.name: cls for cls in (FixedSpan, AdaptiveSpan, DynamicSpan)},
            "dynamic-span": DynamicSpan}

__all__ = ["POLICIES", "AdaptiveSpan", "DynamicSpan", "FixedSpan", "LearnedSpan", "SpanPolicy"]
