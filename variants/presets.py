"""The eight named variants: presets of (span policy, head mixing). Any option can be overridden,
e.g. build("adaptive", ..., mixing="both") is adaptive span with talking heads."""

from .registry import register

register("fixed")
register("adaptive", span_policy="adaptive")
register("dynamic", span_policy="dynamic")
register("talking-heads", mixing="both")
register("talking-heads-dynamic", mixing="dynamic")
register("logits-only", mixing="logits")
register("weights-only", mixing="weights")
register("gbma", mixing="gbma")
