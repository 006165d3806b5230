"""Span policies: fixed, adaptive, dynamic-span."""

from .adaptive import AdaptiveSpan
from .base import FixedSpan, SpanPolicy, check
from .dynamic import DynamicSpan
from .learned import LearnedSpan
from .read import distances, read_mask

__all__ = ["AdaptiveSpan", "DynamicSpan", "FixedSpan", "LearnedSpan", "SpanPolicy", "check",
           "distances", "read_mask"]
