"""attnbench plugin: the `window` variant, multi-head attention whose mask keeps the last `keep`
distances (0 .. keep - 1) of the span S: a hard local window, the README's worked example. Its
spans, window, cache, reach, floors and cost are read off this mask (`Attention.widest`,
`flops`), so a window shorter than a probe's episode is refused before anything trains; its
check of `keep` needs S, so it lives in the constructor, which bench.run calls before Ray or
MLflow start (exit 2, one line)."""

from dataclasses import dataclass

from torch import Tensor

import variants
from variants import OptionError, Shape, option
from variants.span import SpanPolicy


class WindowSpan(SpanPolicy):
    @dataclass(frozen=True)
    class Options:
        keep: int = option(48, "distances each head sees: 0 .. keep - 1")

    def __init__(self, shape: Shape, options: Options) -> None:  # shape.h heads, shape.span
        super().__init__(shape, options)
        if not 1 <= options.keep <= shape.span:  # needs S: exit 2 before anything runs
            raise OptionError("keep", options.keep, f"1 to the span S = {shape.span}")
        self.keep = options.keep

    def mask(self, dist: Tensor, pos: Tensor) -> Tensor:  # each key's distance, its position
        return (dist < self.keep).to(dist.dtype)  # (W,): every head and position alike


variants.register("window", span_policy=WindowSpan)
