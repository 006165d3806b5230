"""The span-policy interface: which distances each softmax head may attend over, and how much."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..shape import Shape
from ..typed import NoOptions, option


class SpanPolicy(nn.Module):
    """Per-head span over distances x = 0..S-1 (x = 0 is the query itself).

    `window` is how many distances the layer computes (trimmed to what the heads can use);
    `mask(dist, rows)` is the soft mask m(x) of the queries `rows` of the block, broadcastable to
    (B, h, len(rows), W), or None for a hard window. A policy whose spans are learned says so
    (`learned`) and sets them on request (`set_spans`); one whose spans depend on the input
    gives them per position (`trace`). The constructor takes the layer's `Shape` (a policy
    reads its softmax heads `h`, the span limit S = `span`, and `d_model`) and the policy's
    options, an instance of its `Options` (a frozen dataclass: model.attn.<option>).
    """

    Options: type = NoOptions
    learned = False  # are the spans trained (adaptive, dynamic)?

    def __init__(self, shape: Shape, options: NoOptions) -> None:
        super().__init__()
        self.n_heads, self.S = shape.h, shape.span
        self.options = options  # what it was built with, as `describe()` reports it
        self._window = shape.span  # trimmed by policies whose spans are learned

    @property
    def name(self) -> str:
        """How tables and reports name the policy (the built-in ones: fixed, adaptive,
        dynamic)."""
        return type(self).__name__

    @property
    def window(self) -> int:
        return self._window

    @property
    def cache_size(self) -> int:
        """Hidden states of the previous block this layer's next forward can need."""
        return self.window - 1

    def prepare(self, x: Tensor) -> int:
        """Called at the start of a forward on x (B, M, D); returns the window W to compute."""
        return self.window

    def mask(self, dist: Tensor, rows: slice) -> Tensor | None:
        return None

    def loss(self) -> Tensor:
        return torch.zeros(())

    def flops(self) -> float:
        """Multiply-adds per query the policy itself spends (a dynamic span's gate)."""
        return 0.0

    def spans(self) -> Tensor:
        """(h,) effective span of each head, z + R capped at S."""
        return torch.full((self.n_heads,), float(self.S))

    def trace(self) -> Tensor | None:
        """(B, h, M) effective span of every query of the forward just run, for policies whose
        spans depend on the input; None for the others (their spans are `spans()`)."""
        return None

    def set_spans(self, spans: Tensor | float) -> None:
        """Set the effective spans (what `spans()` reports: z + R, at most S) to `spans`, one
        value or one per head, as if learned (benchmarks, FLOPs at a given span)."""
        raise ValueError(f"span_policy={self.name!r}: its spans are not learned, so they cannot "
                         "be set (learned: adaptive, dynamic)")

    def clamp_(self) -> None:
        """Project parameters back to their domain; the trainer calls it after every step."""


class LearnedSpan(SpanPolicy):
    """What the adaptive and dynamic spans share (Sukhbaatar et al. 2019, section 3.2): the soft
    mask m_z(x) with ramp R, the penalty lambda (`span_loss`) on the spans, and trimming the
    window to what the widest head can use, in steps of `trim_step` distances."""

    @dataclass(frozen=True)
    class Options:
        ramp: float = option(32.0, "R, the soft mask's ramp: weight 1 up to z, 0 at z + R")
        span_loss: float = option(2e-6, "lambda, the penalty per unit of mean span, added to "
                                  "the loss")
        trim: bool = option(True, "compute only the distances the widest head can use")
        trim_step: int = option(64, "round the trimmed window up to a multiple of this")

        def __post_init__(self) -> None:
            if not self.ramp > 0:
                raise ValueError(f"ramp={self.ramp!r} is invalid: expected R > 0")
            if not (isinstance(self.trim_step, int) and self.trim_step > 0):
                raise ValueError(f"trim_step={self.trim_step!r} is invalid: expected a positive "
                                 "int")

    learned = True

    def __init__(self, shape: Shape, options: Options) -> None:
        super().__init__(shape, options)
        self.ramp, self.lam = options.ramp, options.span_loss
        self.trim, self.trim_step = options.trim, options.trim_step

    def trimmed(self, max_z: float) -> int:
        """The window for a widest span z: trimmed to z + R (`trim`), else S."""
        return trimmed_window(max_z, self.ramp, self.S, self.trim_step) if self.trim else self.S


def soft_mask(z: Tensor, dist: Tensor, ramp: float) -> Tensor:
    """m_z(x) = clamp((R + z - x) / R, 0, 1): 1 up to distance z, linear ramp to 0 at z + R."""
    return ((ramp + z - dist) / ramp).clamp(0, 1)


def trimmed_window(max_z: float, ramp: float, span: int, step: int) -> int:
    """Distances a layer must compute: ceil(max z + R) rounded up to a multiple of `step`, <= S."""
    need = math.ceil(max_z + ramp)
    return min(span, step * math.ceil(need / step))
