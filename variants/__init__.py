"""Attention variants on one transformer body: span policies x head-mixing policies."""

from bench.declare import option

from . import named as _named  # noqa: F401  (registers the built-in policies and variants)
from .attention import Attention
from .layer_spec import LayerSpec, register_policy
from .registry import build, check_name, names, options, register, spec
from .typed import NoOptions, Option, OptionError, Shape, declared, parse

__all__ = ["Attention", "LayerSpec", "NoOptions", "Option", "OptionError", "Shape", "build",
           "check_name", "declared", "names", "option", "options", "parse", "register",
           "register_policy", "spec"]
