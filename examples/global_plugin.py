"""attnbench plugin: the `global-tokens` variant, multi-head attention whose mask keeps a local
window of `keep` distances plus global tokens: every key whose position in the text is a
multiple of `every`, and the text's first `sinks` symbols (attention sinks), the Sparse
Transformer's strided pattern and Longformer's global tokens within the span S. Its mask reads
each key's position in the text (`pos`), so a key is global wherever the text is cut into
batches; its spans, reach, floors and cost are read off what it keeps at any position (here
every distance below S, with global tokens): it computes the whole band of S and masks the
rest. A key further than S - 1 is never computed, global or not."""

from dataclasses import dataclass

from torch import Tensor

import variants
from variants import OptionError, Shape, option
from variants.span import SpanPolicy


class GlobalTokens(SpanPolicy):
    @dataclass(frozen=True)
    class Options:
        keep: int = option(8, "local window: distances 0 .. keep - 1")
        every: int = option(16, "a global token every `every` positions of the text (0: none)")
        sinks: int = option(0, "the text's first `sinks` symbols are global too")

    def __init__(self, shape: Shape, options: Options) -> None:  # shape.h heads, shape.span
        super().__init__(shape, options)
        if not 1 <= options.keep <= shape.span:
            raise OptionError("keep", options.keep, f"1 to the span S = {shape.span}")
        if options.every < 0 or options.sinks < 0:
            raise OptionError("every" if options.every < 0 else "sinks",
                              min(options.every, options.sinks), "0 or more")
        self.keep, self.every, self.sinks = options.keep, options.every, options.sinks

    def mask(self, dist: Tensor, pos: Tensor) -> Tensor:  # dist (W,), pos (B, 1, rows, W)
        keep = dist < self.keep
        if self.sinks:
            keep = keep | (pos >= 0) & (pos < self.sinks)
        if self.every:
            keep = keep | (pos >= 0) & (pos % self.every == 0)
        return keep.to(dist.dtype)


variants.register("global-tokens", span_policy=GlobalTokens)
