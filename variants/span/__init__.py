"""Span policies: fixed, adaptive, dynamic-span."""

from .adaptive import AdaptiveSpan
from .base import LearnedSpan, SpanPolicy, check_spans
from .dynamic import DynamicSpan
from .fixed import FixedSpan

__all__ = ["AdaptiveSpan", "DynamicSpan", "FixedSpan", "LearnedSpan",
           "SpanPolicy", "check_spans"]
