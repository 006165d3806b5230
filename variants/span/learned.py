"""What the adaptive and dynamic spans share (Sukhbaatar et al. 2019, section 3.2): the soft mask
m_z(x) with ramp R, the penalty lambda on the spans, and trimming the window to the spans."""

import math
from dataclasses import dataclass

from torch import Tensor

from bench.declare import option

from ..typed import OptionError, Shape
from .base import SpanPolicy


class LearnedSpan(SpanPolicy):
    """Learned spans z + R: the soft mask m_z(x) with ramp R, the penalty lambda (`span_loss`) on
    the spans, and trimming the window to what the widest head can use, in steps of `trim_step`
    distances."""

    @dataclass(frozen=True)
    class Options:
        ramp: float = option(32.0, "R, the soft mask's ramp: weight 1 up to z, 0 at z + R")
        span_loss: float = option(2e-6, "lambda, the penalty per unit of mean span, added to "
                                  "the loss")
        trim: bool = option(True, "compute only the distances the widest head can use")
        trim_step: int = option(64, "round the trimmed window up to a multiple of this")

        def __post_init__(self) -> None:
            if not self.ramp > 0:
                raise OptionError("ramp", self.ramp, "R > 0")
            if not (isinstance(self.trim_step, int) and self.trim_step > 0):
                raise OptionError("trim_step", self.trim_step, "a positive int")

    learned = True

    def __init__(self, shape: Shape, options: Options) -> None:
        super().__init__(shape, options)
        self.ramp, self.lam = options.ramp, options.span_loss
        self.trim, self.trim_step = options.trim, options.trim_step
        self._window = shape.span  # trimmed as the spans are learned

    @property
    def window(self) -> int:
        """Distances the layer computes: S, or trimmed to the widest span's z + R (`trimmed`)."""
        return self._window

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
