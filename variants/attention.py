"""One attention layer, read top to bottom: a span policy (which keys each head may use: its
mask) composed with a mixing policy (what happens across the heads), over a band of keys.

The band: queries i = 0..M-1 of a block attend over K = W - 1 + M keys [cache (W - 1); block
(M)]; query i sits at key W - 1 + i and sees keys i .. i + W - 1, at distances x = W - 1 - j
for band column j = 0..W-1 (column W - 1 is the query itself). `scores` (q.k) and `mix` (w.v)
compute either densely, the whole M x K product and its band (a zero-copy view: M W of M K
entries used), or `banded`, each query against its own window of keys (`unfold`, a view): the
same sums in another order, so equal to float rounding. A matmul over a head 1 wide is an outer
product that no BLAS runs well, and the band is a third of the entries at M = 64, W = 32: there
banded is 2 to 6 times faster; from d = 2 on the dense matmul is faster (docs/speed.md).
"""

from dataclasses import asdict, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layer_spec import LayerSpec
from .span import distances
from .typed import OptionError


def band(a: Tensor, window: int) -> Tensor:
    """(..., M, K) contiguous -> (..., M, W) zero-copy view: out[..., i, j] = a[..., i, i + j]."""
    *lead, m, k = a.shape
    stride = a.stride()
    return a.as_strided((*lead, m, window), (*stride[:-2], k + 1, 1))


def unband(w: Tensor, keys: int) -> Tensor:
    """(..., M, W) -> (..., M, K): w on the band, zeros elsewhere (the inverse of band)."""
    *lead, m, window = w.shape
    out = w.new_zeros(*lead, m, keys)
    band(out, window).copy_(w)
    return out


def valid_keys(m: int, window: int, cached: int, device: torch.device | None = None) -> Tensor:
    """(M, W) bool: band entries whose key exists (cache holds `cached` < W-1 real states)."""
    i = torch.arange(m, device=device)[:, None]
    j = torch.arange(window, device=device)[None, :]
    return i + j >= window - 1 - cached


def scores(q: Tensor, k: Tensor, window: int, banded: bool = False) -> Tensor:
    """q (..., M, d), keys k (..., M + W - 1, d) -> (..., M, W): s[i, j] = q_i . k_{i+j}."""
    if banded:
        return torch.linalg.vecdot(q.unsqueeze(-1), k.unfold(-2, window, 1), dim=-2)
    return band(q @ k.transpose(-1, -2), window)


def mix(w: Tensor, v: Tensor, banded: bool = False) -> Tensor:
    """Weights w (..., M, W), values v (..., M + W - 1, d) -> (..., M, d): o_i = sum_j w[i, j]
    v_{i+j}."""
    if banded:
        return torch.linalg.vecdot(w.unsqueeze(-2), v.unfold(-2, w.size(-1), 1), dim=-1)
    return unband(w, v.size(-2)) @ v


def softmax(logits: Tensor, m: Tensor | None) -> Tensor:
    """Softmax over the window, with the span mask m when there is one; in fp32 whatever the
    logits' precision (bf16 under autocast): the normalisation is where bf16 loses most.
    a = m e^s / sum m e^s, the adaptive-span reference's softmax times the mask, renormalised;
    keys with m = 0 are set to -inf first: the same weights, but no epsilon, so they get
    exactly zero gradient and a trimmed window gives the same result."""
    logits = logits.float()
    if m is None:
        return logits.softmax(dim=-1)
    w = logits.masked_fill(m == 0, float("-inf")).softmax(dim=-1) * m
    return w / w.sum(dim=-1, keepdim=True)


class Attention(nn.Module):
    """Causal windowed attention over [cache; x] with relative positions.

    Query t attends to itself and the S - 1 positions before it (distances 0..S-1), as far as
    its span policy's mask keeps them. forward(x (B, M, D), cache (B, C, D) | None,
    start (B,) | None) -> (B, M, D); the caller keeps the last `cache_size` inputs as the next
    block's cache (Transformer-XL, no gradient through it). `start`, the text position of each
    row's first query, is read only by a mask that reads key positions; without it such a mask
    keeps what it keeps at any position (a benchmark, a FLOP count: the same work).
    Masks are applied after the pre-softmax mixing P_l, so mixing never sees -inf.

    Built from a `LayerSpec` (`variants.spec`: the shape, dropout, the layer's own options and
    its parts with their `Options` instances, typed and checked), taken as it is, and `key_pe`
    (S, d_k), a relative-position table the body shares between layers (None: the layer's own).
    The layer describes itself (`describe`, `flops`, `spans`, `span_trace`, `window`,
    `cache_size`, `widest`) and sets learned spans (`set_spans`), so tools never probe its
    policies.
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
        self.span_policy.clamp_()  # its spans and window, read off its mask as built
        self.mixing = spec.mixing.build(shape)
        self.drop = nn.Dropout(spec.dropout)

    @property
    def key_pe(self) -> nn.Parameter:
        """(S, d_k) relative-position table p_x of distance x, shared by the heads (key side)."""
        return self.mixing.key_pe

    @property
    def window(self) -> int:
        """Distances the layer computes: those its span policy's mask keeps (S for a hard
        window), or trimmed to what its learned spans use (for an input-dependent span, that of
        the last forward)."""
        return self.span_policy.window

    @property
    def cache_size(self) -> int:
        """Hidden states of the previous block the next forward can need: the window's W - 1,
        and the span policy's `growth` beyond it (S where its mask has parameters, which may
        widen it at the next step), at most S - 1."""
        p = self.span_policy
        growth = p.growth if p.growth is not None else self.S if p.moves else 0
        return min(self.S, self.window + growth) - 1

    @property
    def widest(self) -> int:
        """The widest window the layer can ever compute: S where its spans are learned or its
        mask has parameters (either may widen it), else the distances its mask keeps. What a
        run can see through it (its floors are taken there, a probe that needs more is refused
        before a run) and what `flops` counts at most."""
        p = self.span_policy
        return self.S if p.learned or p.moves else self.window

    def forward(self, x: Tensor, cache: Tensor | None = None, start: Tensor | None = None
                ) -> Tensor:
        M = x.size(1)
        W = self.span_policy.prepare(x)  # the band: distances W - 1 .. 0
        # the keys: the last W - 1 cached states, then x; a stream's start is padded to a full
        # band, and its missing keys are masked (`valid`)
        cached = 0 if cache is None else min(cache.size(1), W - 1)
        mem = x if cached == 0 else torch.cat([cache[:, cache.size(1) - cached:], x], dim=1)
        if cached < W - 1:
            mem = F.pad(mem, (0, 0, W - 1 - cached, 0))
        valid = valid_keys(M, W, cached, x.device) if cached < W - 1 else None
        m = self._mask(x, W, start)  # the span mask, broadcastable to (B, h, M, W), or None
        per_row = m is not None and m.dim() > 1 and m.size(-2) > 1  # one mask per query
        heads = self.mixing.project(x, mem)  # q, k, v (and the mixing's own), once per block
        banded = self.mixing.banded
        # Queries in chunks of c: a chunk computes only its c x (c + W - 1) band of keys, not the
        # block's M x (M + W - 1), and on a CPU its intermediates stay small enough for the
        # caches. A GPU is bound by kernel launches at these sizes: one chunk for the block.
        c = self.chunk or (64 if x.device.type == "cpu" else M)
        outs = []
        for i in range(0, M, c):
            rows, keys = slice(i, i + c), slice(i, i + c + W - 1)
            q, q_pos = heads.q[:, :, rows], heads.q_pos[:, :, rows]
            J = scores(q, heads.k[:, :, keys], W, banded) + q_pos @ self.key_pe[:W].flip(0).T
            L = self.mixing.pre_softmax(J, heads, rows, keys)  # P_l: (B, h_k, c, W) -> (B, h, ...)
            if valid is not None:  # a stream's start: no keys before it
                L = L.masked_fill(~valid[rows], float("-inf"))
            w = self.drop(softmax(L, m[..., rows, :] if per_row else m))
            U = self.mixing.post_softmax(w, heads, rows, keys)  # P_w: (B, h, c, W) -> (B, h_v, ...)
            outs.append(mix(U, heads.v[:, :, keys], banded))  # sum over the band: (B, h_v, c, d_v)
        return self.mixing.output(torch.cat(outs, dim=2))

    def _mask(self, x: Tensor, W: int, start: Tensor | None) -> Tensor | None:
        """The span policy's mask over the band, once per block: at each key's text position
        where the mask reads positions and `start` gives them (query i of a row sits at
        start + i, its key at distance x at start + i - x), else at any position."""
        p, dist = self.span_policy, distances(W, x.device).to(x.dtype)
        if not p.kept.positional:
            return p.mask(dist, None)
        if start is None:
            return p.kept.anywhere[..., self.S - W:].to(x.device, x.dtype)
        i = torch.arange(x.size(1), device=x.device)[:, None]
        return p.mask(dist, start.view(-1, 1, 1, 1) + i - distances(W, x.device))

    def flops(self, s: float, position: bool = False) -> float:
        """Multiply-adds per query attending over s keys, in the adaptive-span paper's #FLOPS
        convention (4 D^2 + 2 D s by default, + talking-heads maps and span gates), s at most
        the widest window the layer computes (`widest`: a mask keeping distances 0..7 costs 8
        keys at any s); `position` adds the relative-position term q.p, which the layer
        executes but #FLOPS leaves out."""
        s = min(s, self.widest)
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
