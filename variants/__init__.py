"""Attention variants on one transformer body: span policies x head-mixing policies."""

from . import named as _named  # noqa: F401  (registers the eight named variants)
from .attention import Attention
from .registry import build, check_name, facts, names, options, register
from .shape import Shape
from .typed import NoOptions, Option, declared, option

__all__ = ["Attention", "NoOptions", "Option", "Shape", "build", "check_name", "declared",
           "facts", "names", "option", "options", "register"]
