"""Span policies: fixed, adaptive, dynamic-span (its first name, `dynamic`, an alias)."""

from .adaptive import AdaptiveSpan
from .base import LearnedSpan, SpanPolicy
from .dynamic import DynamicSpan
from .fixed import FixedSpan

POLICIES = {cls.name: cls for cls in (FixedSpan, AdaptiveSpan, DynamicSpan)}  # name -> class
ALIASES = {"dynamic": "dynamic-span"}  # an earlier name -> the name it stands for

__all__ = ["ALIASES", "POLICIES", "AdaptiveSpan", "DynamicSpan", "FixedSpan", "LearnedSpan",
           "SpanPolicy"]
