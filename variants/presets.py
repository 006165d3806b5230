"""The eight named variants: presets of (span policy, head mixing). Any key can be overridden,
e.g. build("adaptive", ..., mixing="both") is adaptive span with talking heads."""

from .attention import Attention
from .registry import register

PRESETS = {
    "fixed": dict(span_policy="fixed", mixing="none"),
    "adaptive": dict(span_policy="adaptive", mixing="none"),
    "dynamic": dict(span_policy="dynamic", mixing="none"),
    "talking-heads": dict(span_policy="fixed", mixing="both"),
    "talking-heads-dynamic": dict(span_policy="fixed", mixing="dynamic"),
    "logits-only": dict(span_policy="fixed", mixing="logits"),
    "weights-only": dict(span_policy="fixed", mixing="weights"),
    "gbma": dict(span_policy="fixed", mixing="gbma"),
}


def _preset(defaults: dict):
    def factory(**cfg) -> Attention:
        return Attention(**{**defaults, **cfg})

    return factory


for _name, _defaults in PRESETS.items():
    register(_name)(_preset(_defaults))
