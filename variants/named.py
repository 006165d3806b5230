"""The built-in names, each registered by a call: the span policies and head mixings by name
(`register_policy`: a class and the constructor arguments the name fixes), then the eight named
variants (`register`): each a span policy composed with a head mixing, with defaults for their
options. Any option can be overridden, e.g. build("adaptive", ..., mixing="both") is adaptive
span with talking heads.

"Dynamic" names two things: a span computed from each position's input (`dynamic-span`) and
talking heads whose mixing projections are (`talking-heads-dynamic`, mixing
`dynamic-projections`); "dynamic" alone names neither."""

from .layer_spec import register_policy
from .mixing import GBMA, DynamicTalkingHeads, MultiHead, TalkingHeads
from .registry import register
from .span import AdaptiveSpan, DynamicSpan, FixedSpan

register_policy("span_policy", "fixed", FixedSpan)
register_policy("span_policy", "adaptive", AdaptiveSpan)
register_policy("span_policy", "dynamic-span", DynamicSpan)

register_policy("mixing", "none", MultiHead)
register_policy("mixing", "logits", TalkingHeads, mix_logits=True, mix_weights=False)
register_policy("mixing", "weights", TalkingHeads, mix_logits=False, mix_weights=True)
register_policy("mixing", "both", TalkingHeads, mix_logits=True, mix_weights=True)
register_policy("mixing", "dynamic-projections", DynamicTalkingHeads)
register_policy("mixing", "gbma", GBMA)

register("fixed")
register("adaptive", span_policy="adaptive")
register("dynamic-span", span_policy="dynamic-span")
register("talking-heads", mixing="both")
register("talking-heads-dynamic", mixing="dynamic-projections")
register("logits-only", mixing="logits")
register("weights-only", mixing="weights")
register("gbma", mixing="gbma")
