"""Span policies: fixed, adaptive, dynamic-span."""

from .adaptive import AdaptiveSpan
from .base import LearnedSpan, SpanPolicy, check_spans
from .dynamic import DynamicSpan
from .fixed import FixedSpan

POLICIES = {cls.name: cls for cls in (FixedSpan, AdaptiveSpan, DynamicSpan)}  # name -> class

__all__ = ["POLICIES", "AdaptiveSpan", "DynamicSpan", "FixedSpan", "LearnedSpan",
           "SpanPolicy", "check_spans"]
