"""Adaptive span (Sukhbaatar et al. 2019, section 3.2): one learned span z_i per head."""

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.declare import option

from ..typed import Shape
from .learned import LearnedSpan, soft_mask

GROWTH = 64  # cached states kept beyond the window: "a span might increase" (the reference's 64)


class AdaptiveSpan(LearnedSpan):
    """z_i = S * z'_i with z'_i in [0, 1], initialised `z_init` (the paper: 0); mask m_z(x) with
    ramp R.

    The layer only computes the distances its widest head can use (max z + R, rounded up to
    `trim_step`), so FLOPs and the cache shrink with the learned spans. The window is a
    Python int recomputed in `clamp_()`, once per optimiser step, never read with `.item()`
    inside a forward. The cache keeps GROWTH states more than the window needs, as the reference
    does, so the first block after the window grows (by up to GROWTH) still sees real keys.
    """

    name = "adaptive"
    growth = GROWTH  # the cache: min(S, W + GROWTH) - 1, the reference's min(S, S - trim + 64)

    @dataclass(frozen=True)
    class Options(LearnedSpan.Options):
        z_init: float = option(0.0, "z', each head's span over S at the start (the paper: 0)")

    def __init__(self, shape: Shape, options: Options) -> None:
        super().__init__(shape, options)
        self.z_prime = nn.Parameter(torch.full((shape.h, 1, 1), float(options.z_init)))
        self.clamp_()

    @property
    def z(self) -> Tensor:
        return self.S * self.z_prime

    def mask(self, dist: Tensor, pos: Tensor | None) -> Tensor:
        return soft_mask(self.z, dist, self.ramp)  # (h, 1, W): the same for every query

    def loss(self) -> Tensor:
        """lambda / H * sum_i z_i (paper eq. 5, per layer)."""
        return self.lam * self.z.mean()

    def spans(self) -> Tensor:
        return (self.z.detach().flatten() + self.ramp).clamp(max=self.S)

    @torch.no_grad()
    def set_spans(self, spans: Tensor | float) -> None:
        """z_i = spans - R (at least 0), per head or one value for all."""
        z = (torch.as_tensor(spans, dtype=torch.float) - self.ramp).clamp(0, self.S)
        self.z_prime.copy_((z / self.S).view(-1, 1, 1).expand_as(self.z_prime))
        self.clamp_()

    @torch.no_grad()
    def clamp_(self) -> None:
        self.z_prime.clamp_(0, 1)
        if self.trim:  # read on the host only to trim: untrimmed, a CUDA graph can hold it
            self._window = self.trimmed(self.S * self.z_prime.max().item())
