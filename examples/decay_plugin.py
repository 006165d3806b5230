"""attnbench plugin: the `decay` variant, a soft span exp(-x / tau_i) with talking heads."""

import math

import torch
from torch import Tensor, nn

import variants
from variants.attention import Attention
from variants.span import SpanPolicy


class DecaySpan(SpanPolicy):
    """Soft span: weight exp(-x / tau_i) on distance x, with a learned tau per head."""

    def __init__(self, n_heads: int, span: int, tau_init: float) -> None:
        super().__init__(n_heads, span)
        self.log_tau = nn.Parameter(torch.full((n_heads, 1, 1), math.log(tau_init)))

    def mask(self, dist: Tensor, rows: slice) -> Tensor:  # broadcast to (B, h, len(rows), W)
        return torch.exp(-dist / self.log_tau.exp())


@variants.register("decay")
def decay(tau_init: float = 20.0, **cfg) -> Attention:
    """Decay span + talking heads; `tau_init` is this plugin's own option (model.attn.tau_init),
    the other options are Attention's."""
    if tau_init <= 0:
        raise ValueError(f"tau_init={tau_init!r} is invalid: expected tau > 0")
    layer = Attention(**{"mixing": "both", **cfg})
    layer.span_policy = DecaySpan(layer.span_policy.n_heads, layer.S, tau_init)
    return layer
