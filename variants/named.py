"""The eight named variants: each a span policy composed with a head mixing, with defaults for
their options. Any option can be overridden, e.g. build("adaptive", ..., mixing="both") is
adaptive span with talking heads.

"Dynamic" names two things: a span computed from each position's input (`dynamic-span`) and
talking heads whose mixing projections are (`talking-heads-dynamic`, mixing
`dynamic-projections`). Their first name, `dynamic`, is gone (`names.RENAMED`; `python -m
bench.retag` migrates records made under it)."""

from .registry import register

register("fixed")
register("adaptive", span_policy="adaptive")
register("dynamic-span", span_policy="dynamic-span")
register("talking-heads", mixing="both")
register("talking-heads-dynamic", mixing="dynamic-projections")
register("logits-only", mixing="logits")
register("weights-only", mixing="weights")
register("gbma", mixing="gbma")
