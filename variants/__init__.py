"""Attention variants on one transformer body: span policies x head-mixing policies."""

from . import named as _named  # noqa: F401  (registers the eight named variants)
from .attention import Attention
from .registry import build, check_name, facts, names, options, register

__all__ = ["Attention", "build", "check_name", "facts", "names", "options", "register"]
