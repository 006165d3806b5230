"""One attention layer = a span policy composed with a head-mixing policy."""

from dataclasses import asdict, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .band import distances, valid_keys
from .layer_spec import LayerSpec
from .typed import OptionError


class Attention(nn.Module):
    """Causal windowed attention over [cache; x] with relative positions.

    Query t attends to itself and the S - 1 positions before it (distances 0..S-1), so no row is
    ever empty. forward(x (B, M, D), cache (B, C, D) | None, start (B,) | None) -> (B, M, D);
    the caller keeps the last `cache_size` inputs as the next block's cache (Transformer-XL, no
    gradient through it). `start`, the text position of each row's first query, is read only by
    a positional span policy (`SpanPolicy.mask_at`); without it such a policy masks with what
    any position may keep (a benchmark, a FLOP count: the same work).
    Masks are applied after the pre-softmax mixing P_l, so mixing never sees -inf.

    Built from a `LayerSpec` (`variants.spec`: the shape, dropout, the layer's own options and
    its parts with their `Options` instances, typed and checked), taken as it is, and `key_pe`
    (S, d_k), a relative-position table the body shares between layers (None: the layer's own).
    The layer describes itself (`describe`, `flops`, `spans`, `span_trace`) and sets learned
    spans (`set_spans`), so tools never probe its policies.
    """

    def __init__(self, spec: LayerSpec, key_pe: nn.Parameter | None = None) -> None:
        super().__init__()
        shape = spec.shape
        if key_pe is not None and tuple(key_pe.shape) != (shape.span, shape.d_k):
            raise OptionError("key_pe", tuple(key_pe.shape), "a relative-position table of "
                              f"shape (span, d_k) = ({shape.span}, {shape.d_k})")
        shape = replace(shape, key_pe=key_pe)
        self.S, self.chunk, self.width = shape.span, spec.own.chunk, spec.own.width
        self.span_policy = spec.span.build(shape)
        self.span_policy.clamp_()  # its spans and window, from its parameters as built
        self.mixing = spec.mixing.build(shape)
        self.drop = nn.Dropout(spec.dropout)

    @property
    def key_pe(self) -> nn.Parameter:
        """(S, d_k) relative-position table p_x of distance x, shared by the heads (key side)."""
        return self.mixing.key_pe

    @property
    def window(self) -> int:
        """Distances the layer computes: what its span policy's mask keeps (S for a hard window),
        or trimmed to what its learned spans use (for an input-dependent span, that of the last
        forward)."""
        return self.span_policy.window

    @property
    def cache_size(self) -> int:
        return self.span_policy.cache_size

    def forward(self, x: Tensor, cache: Tensor | None = None, start: Tensor | None = None
                ) -> Tensor:
        M = x.size(1)
        W = self.span_policy.prepare(x)
        cached = 0 if cache is None else min(cache.size(1), W - 1)
        mem = x if cached == 0 else torch.cat([cache[:, cache.size(1) - cached:], x], dim=1)
        if cached < W - 1:  # start of a stream: pad to a full window, mask the missing keys
            mem = F.pad(mem, (0, 0, W - 1 - cached, 0))
        valid = valid_keys(M, W, cached, x.device) if cached < W - 1 else None
        dist = distances(W, x.device).to(x.dtype)
        pos = self._positions(start, M, W, x.device)
        q, kv = self.mixing.query(x), self.mixing.memory(mem)
        # Queries in chunks of c: a chunk computes only its c x (c + W - 1) band of keys, not the
        # block's M x (M + W - 1), and on a CPU its intermediates stay small enough for the
        # caches. A GPU is bound by kernel launches at these sizes: one chunk for the block.
        c = self.chunk or (64 if x.device.type == "cpu" else M)
        outs = []
        for i in range(0, M, c):
            rows = slice(i, i + c)
            qi = tuple(t[:, :, rows] for t in q) if isinstance(q, tuple) else q[:, :, rows]
            logits = self.mixing.logits(qi, kv, i, W)
            if valid is not None:
                logits = logits.masked_fill(~valid[rows], float("-inf"))
            m = self.span_policy.mask(dist, rows) if pos is None else \
                self.span_policy.mask_at(dist, rows, pos[:, :, rows])
            outs.append(self.mixing.attend(self.drop(self._weights(logits, m)), qi, kv, i))
        return self.mixing.output(torch.cat(outs, dim=2))

    def _positions(self, start: Tensor | None, M: int, W: int, device: torch.device
                   ) -> Tensor | None:
        """(B, 1, M, W) each band key's text position, for a positional span policy (else
        None): query i of a row sits at start + i, its key at distance x at start + i - x."""
        if start is None or not self.span_policy.positional:
            return None
        i = torch.arange(M, device=device)[:, None]
        return start.view(-1, 1, 1, 1) + i - distances(W, device)

    @staticmethod
    def _weights(logits: Tensor, m: Tensor | None) -> Tensor:
        """Softmax over the window, with the span mask when there is one; in fp32 whatever the
        logits' precision (bf16 under autocast): the normalisation is where bf16 loses most."""
        logits = logits.float()
        if m is None:
            return logits.softmax(dim=-1)
        # a = m e^s / sum m e^s: the reference's softmax, times the mask, renormalised. Keys with
        # m = 0 are also set to -inf first: the same weights, but no epsilon, so they get exactly
        # zero gradient and a trimmed window gives the same result.
        w = logits.masked_fill(m == 0, float("-inf")).softmax(dim=-1) * m
        return w / w.sum(dim=-1, keepdim=True)

    def flops(self, s: float, position: bool = False) -> float:
        """Multiply-adds per query attending over s keys, in the adaptive-span paper's #FLOPS
        convention (4 D^2 + 2 D s by default, + talking-heads maps and span gates); `position`
        adds the relative-position term q.p, which the layer executes but #FLOPS leaves out."""
        extra = self.mixing.position_flops(s) if position else 0.0
        return self.span_policy.flops() + self.mixing.flops(s) + extra

    def describe(self) -> dict:
        """What the layer is, as tables and reports name it: span policy, mixing (and whether it
        learns P_l, P_w), heads (h_k query/key, h softmax, h_v value), widths d_k, d_v, the span
        limit S, whether the spans are learned, and `options`: the layer's width and chunk and
        every option of its parts, as each part holds them (`options`, defaults included). Its
        cost per query at s keys is `flops(s)`."""
        m = self.mixing
        mats = m.matrices()
        return {"span_policy": self.span_policy.name, "mixing": m.name, "P_l": "P_l" in mats,
                "P_w": "P_w" in mats, "h_k": m.h_k, "h": m.h, "h_v": m.h_v, "d_k": m.d_k,
                "d_v": m.d_v, "S": self.S, "learned_spans": self.span_policy.learned,
                "options": {"width": self.width, "chunk": self.chunk,
                            **asdict(self.span_policy.options), **asdict(m.options)}}

    def set_spans(self, spans: Tensor | float) -> None:
        """Set the effective spans (z + R, at most S; one value or one per softmax head) as if
        learned, and trim the window to them. A ValueError where the spans are not learned."""
        self.span_policy.set_spans(spans)

    def span_penalty(self) -> Tensor:
        """The span policy's penalty on its spans, lambda (the option `span_loss`) times their
        mean: added to the language-modelling loss."""
        return self.span_policy.loss()

    def spans(self) -> Tensor:
        """(h,) effective span per softmax head (NaN where the span depends on the input)."""
        return self.span_policy.spans()

    def span_trace(self) -> Tensor | None:
        """(B, h, M) effective span of every query of the forward just run, where the span
        depends on the input (dynamic); None otherwise."""
        return self.span_policy.trace()

    def clamp_(self) -> None:
        self.span_policy.clamp_()
