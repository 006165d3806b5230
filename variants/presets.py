"""The eight named variants: presets of (span policy, head mixing). Any option can be overridden,
e.g. build("adaptive", ..., mixing="both") is adaptive span with talking heads.

"Dynamic" names two things: a span computed from each position's input (`dynamic-span`) and
talking heads whose mixing projections are (`talking-heads-dynamic`, mixing
`dynamic-projections`). `dynamic`, the dynamic span's first name, stays as its alias: the same
model, which a config records under its registered name (`bench.config` resolves the alias, and
runs recorded under the old name are read back under the new one)."""

from .registry import alias, register

register("fixed")
register("adaptive", span_policy="adaptive")
register("dynamic-span", span_policy="dynamic-span")
alias("dynamic", "dynamic-span")
register("talking-heads", mixing="both")
register("talking-heads-dynamic", mixing="dynamic-projections")
register("logits-only", mixing="logits")
register("weights-only", mixing="weights")
register("gbma", mixing="gbma")
