"""attnbench plugin: the `decay` variant, a soft span exp(-x / tau_i) with talking heads."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

import variants
from variants import OptionError, Shape, option
from variants.span import SpanPolicy


class DecaySpan(SpanPolicy):
    """Soft span: weight exp(-x / tau_i) on distance x, a learned tau per head, nonzero at every
    distance: its cost, read off this mask, is the full S's. Its options are the fields of
    `Options` (model.attn.tau_init), typed, defaulted and explained there."""

    @dataclass(frozen=True)
    class Options:
        tau_init: float = option(20.0, "each head's decay length tau at the start (distances)")

        def __post_init__(self) -> None:
            if self.tau_init <= 0:
                raise OptionError("tau_init", self.tau_init, "tau > 0")

    def __init__(self, shape: Shape, options: Options) -> None:  # shape.h heads, shape.span
        super().__init__(shape, options)
        self.log_tau = nn.Parameter(torch.full((shape.h, 1, 1), math.log(options.tau_init)))

    def mask(self, dist: Tensor, pos: Tensor) -> Tensor:  # each key's distance, its position
        return torch.exp(-dist / self.log_tau.exp())  # (h, 1, W): every position alike


variants.register("decay", span_policy=DecaySpan, mixing="both")  # decay span + talking heads
