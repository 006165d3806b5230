"""Attention variants on one transformer body: span policies x head-mixing policies."""

from . import presets as _presets  # noqa: F401  (registers the eight named variants)
from .attention import Attention
from .registry import aliases, build, canonical, check_name, names, options, register

__all__ = ["Attention", "aliases", "build", "canonical", "check_name", "names", "options",
           "register"]
