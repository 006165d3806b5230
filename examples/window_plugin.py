"""attnbench plugin: the `window` variant, multi-head attention whose mask keeps the last
`keep` distances (0 .. keep - 1) of the span S: a hard local window, the quick path's example
(README, "Your own variant against multi-head")."""

from dataclasses import dataclass

from torch import Tensor

import variants
from variants import OptionError, Shape, option
from variants.span import SpanPolicy


class WindowSpan(SpanPolicy):
    """A hard window: weight 1 on distances below `keep`, 0 beyond. Its reach, floors and cost
    are read off this mask (`SpanPolicy.widest`), so a window shorter than a probe's episode is
    refused before anything trains."""

    @dataclass(frozen=True)
    class Options:
        keep: int = option(48, "distances each head sees: 0 .. keep - 1")

        def __post_init__(self) -> None:
            if self.keep < 1:
                raise OptionError("keep", self.keep, "a whole number of distances, 1 or more")

    def __init__(self, shape: Shape, options: Options) -> None:  # shape.h heads, shape.span
        super().__init__(shape, options)
        if options.keep > shape.span:  # a check that needs S: run when the model is built,
            raise OptionError("keep", options.keep, f"at most the span S = {shape.span}")
        self.keep = options.keep  # which bench.run does before Ray or MLflow start

    def mask(self, dist: Tensor, rows: slice) -> Tensor:  # broadcast to (B, h, len(rows), W)
        return (dist < self.keep).to(dist.dtype)


variants.register("window", span_policy=WindowSpan)
