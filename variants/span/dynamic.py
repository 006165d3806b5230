"""Dynamic span (Sukhbaatar et al. 2019, section 3.3): the span is a function of the input."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.declare import option

from ..typed import Shape
from .learned import LearnedSpan, soft_mask


class DynamicSpan(LearnedSpan):
    """z_t = S * sigmoid(v . x_t + b) per head and query position, b initialised `gate_bias`.

    The next block's spans are unknown, so the cache keeps S - 1 states (its gate has
    parameters: `growth` S); each forward trims its own window (that of the last forward) to
    max_t z_t + R: one host read per forward.
    z_t lives from a forward to the span loss of the same step; statistics over a split are
    read per forward through `trace()` (the trainer's evaluation), never from a later forward.
    """

    name = "dynamic-span"

    @dataclass(frozen=True)
    class Options(LearnedSpan.Options):
        gate_bias: float = option(-4.0, "b, the gate's bias at the start: spans start near "
                                  "S sigmoid(b)")

    def __init__(self, shape: Shape, options: Options) -> None:
        super().__init__(shape, options)
        self.gate = nn.Linear(shape.d_model, shape.h)
        nn.init.constant_(self.gate.bias, options.gate_bias)
        self.z_t: Tensor | None = None

    def prepare(self, x: Tensor) -> int:
        with torch.autocast(x.device.type, enabled=False):  # the span parameters stay fp32
            g = self.gate(x.float())
        self.z_t = self.S * torch.sigmoid(g).transpose(1, 2).unsqueeze(-1)  # (B, h, M, 1)
        if self.trim:
            self._window = self.trimmed(self.z_t.max().item())
        return self._window

    def mask(self, dist: Tensor, pos: Tensor | None) -> Tensor:
        return soft_mask(self.z_t, dist, self.ramp)  # (B, h, M, W): per query of the block

    @torch.no_grad()
    def set_spans(self, spans: Tensor | float) -> None:
        """A constant gate: z_t = mean(spans) - R at every position, in every head."""
        z = torch.as_tensor(spans, dtype=torch.float).mean().item() - self.ramp
        z = min(max(z, 1e-3), self.S - 1e-3)  # a finite gate bias at z = 0 or S
        self.gate.weight.zero_()
        self.gate.bias.fill_(math.log(z / (self.S - z)))

    def flops(self) -> float:
        """The gate v . x_t + b: D h per query."""
        return float(self.gate.in_features * self.n_heads)

    def loss(self) -> Tensor:
        """lambda * mean over heads and positions of z_t."""
        return self.lam * self.z_t.mean() if self.z_t is not None else torch.zeros(())

    def spans(self) -> Tensor:
        """No span independent of the input: NaN per head. The spans are per position, in
        `trace()` after each forward; their mean over a split is measured by the caller."""
        return torch.full((self.n_heads,), float("nan"))

    def trace(self) -> Tensor:
        """(B, h, M) effective span z_t + R (capped at S) of each query of the last forward."""
        return (self.z_t.detach() + self.ramp).clamp(max=self.S).squeeze(-1)
