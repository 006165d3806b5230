"""attnbench plugin: the `decay` variant, a soft span exp(-x / tau_i) with talking heads."""

import math

import torch
from torch import Tensor, nn

import variants
from variants.span import SpanPolicy


class DecaySpan(SpanPolicy):
    """Soft span: weight exp(-x / tau_i) on distance x, with a learned tau per head. Its
    keyword-only parameter `tau_init` is an option of every variant built on it
    (model.attn.tau_init), typed and defaulted here."""

    def __init__(self, n_heads: int, span: int, *, tau_init: float = 20.0) -> None:
        if tau_init <= 0:
            raise ValueError(f"tau_init={tau_init!r} is invalid: expected tau > 0")
        super().__init__(n_heads, span)
        self.log_tau = nn.Parameter(torch.full((n_heads, 1, 1), math.log(tau_init)))

    def mask(self, dist: Tensor, rows: slice) -> Tensor:  # broadcast to (B, h, len(rows), W)
        return torch.exp(-dist / self.log_tau.exp())


variants.register("decay", span_policy=DecaySpan, mixing="both")  # decay span + talking heads
