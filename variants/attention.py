"""One attention layer = a span policy composed with a head-mixing policy."""

import inspect

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import mixing as mix
from . import span as sp
from .band import distances, valid_keys


def _check(name: str, value, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is invalid: expected {allowed}")


SpanArg = str | type[sp.SpanPolicy]
MixingArg = str | type[mix.MixingPolicy]


def _policy(kind: str, value, names: dict, base: type) -> None:
    ok = value in names if isinstance(value, str) else (
        isinstance(value, type) and issubclass(value, base))
    _check(kind, value, ok, f"one of {tuple(names)}, or a subclass of {base.__name__}")


def _construct(cls: type, options: dict, **fixed) -> nn.Module:
    """cls(**the options its constructor names, **fixed): how a policy class is built."""
    params = inspect.signature(cls).parameters
    return cls(**{k: v for k, v in options.items() if k in params}, **fixed)


def check_options(d_model: int, n_heads: int, span: int, span_policy: SpanArg,
                  mixing: MixingArg, h_k: int | None, h: int | None, h_v: int | None,
                  d_k: int | None, d_v: int | None, ramp: float, trim_step: int, dropout: float,
                  chunk: int | None) -> tuple[int, int, int, int, int]:
    """Validate a layer's options before anything is allocated; return h_k, h, h_v, d_k, d_v."""
    _policy("span_policy", span_policy, sp.POLICIES, sp.SpanPolicy)
    _policy("mixing", mixing, mix.POLICIES, mix.MixingPolicy)
    for name, v in (("d_model", d_model), ("n_heads", n_heads), ("span", span),
                    ("trim_step", trim_step)):
        _check(name, v, isinstance(v, int) and v > 0, "a positive int")
    _check("chunk", chunk, chunk is None or isinstance(chunk, int) and chunk > 0,
           "a positive int, or None for the device's default")
    _check("ramp", ramp, ramp > 0, "R > 0")
    _check("dropout", dropout, 0 <= dropout < 1, "a value in [0, 1)")
    h_k, h, h_v = h_k or n_heads, h or n_heads, h_v or n_heads
    for name, heads, dim in (("h_k", h_k, d_k), ("h_v", h_v, d_v)):
        name = name if heads != n_heads else "n_heads"
        _check(name, heads, isinstance(heads, int) and heads > 0, "a positive int")
        if dim is None:
            _check(name, heads, d_model % heads == 0, f"a divisor of d_model={d_model}")
    if mixing in ("none", "weights"):
        _check("h", h, h == h_k, f"h == h_k={h_k} without a logits projection")
    if mixing in ("none", "logits"):
        _check("h_v", h_v, h_v == h, f"h_v == h={h} without a weights projection")
    return h_k, h, h_v, d_k or d_model // h_k, d_v or d_model // h_v


class Attention(nn.Module):
    """Causal windowed attention over [cache; x] with relative positions.

    Query t attends to itself and the S - 1 positions before it (distances 0..S-1), so no row is
    ever empty. forward(x (B, M, D), cache (B, C, D) | None) -> (B, M, D); the caller keeps the
    last `cache_size` inputs as the next block's cache (Transformer-XL, no gradient through it).
    Masks are applied after the pre-softmax mixing P_l, so mixing never sees -inf.
    `span_policy` and `mixing` are registered names or policy classes (built with the options
    their constructors name). `key_pe` (S, d_k) is a relative-position table owned by the caller
    (the model body passes one table to every layer, as the adaptive-span reference does); None:
    the layer has its own. The layer describes itself (`describe`, `flops`, `spans`,
    `span_trace`) and sets learned spans (`set_spans`), so tools never probe its policies.
    """

    def __init__(self, d_model: int, n_heads: int, span: int, *, span_policy: SpanArg = "fixed",
                 mixing: MixingArg = "none", h_k: int | None = None, h: int | None = None,
                 h_v: int | None = None, d_k: int | None = None, d_v: int | None = None,
                 ramp: float = 32.0, span_loss: float = 2e-6, trim: bool = True,
                 trim_step: int = 64, gate_bias: float = -4.0, dropout: float = 0.0,
                 mix_noise: float = 0.0, mix_init: str = "identity", dynamic_init: float = 0.01,
                 chunk: int | None = None, key_pe: nn.Parameter | None = None) -> None:
        super().__init__()
        _check("mix_init", mix_init, mix_init in mix.INITS, f"one of {mix.INITS}")
        h_k, h, h_v, d_k, d_v = check_options(d_model, n_heads, span, span_policy, mixing, h_k, h,
                                              h_v, d_k, d_v, ramp, trim_step, dropout, chunk)
        if key_pe is not None:
            _check("key_pe", tuple(key_pe.shape), tuple(key_pe.shape) == (span, d_k),
                   f"a relative-position table of shape (span, d_k) = ({span}, {d_k})")
        self.S, self.chunk = span, chunk
        options = dict(d_model=d_model, n_heads=h, span=span, ramp=ramp, span_loss=span_loss,
                       trim=trim, trim_step=trim_step, gate_bias=gate_bias)
        cls = sp.POLICIES[span_policy] if isinstance(span_policy, str) else span_policy
        self.span_policy = _construct(cls, options)
        options = dict(d_model=d_model, span=span, h_k=h_k, h=h, h_v=h_v, d_k=d_k, d_v=d_v,
                       mix_noise=mix_noise, mix_init=mix_init, dynamic_init=dynamic_init,
                       key_pe=key_pe)
        cls, fixed = mix.POLICIES[mixing] if isinstance(mixing, str) else (mixing, {})
        self.mixing = _construct(cls, options, **fixed)
        self.drop = nn.Dropout(dropout)

    @property
    def key_pe(self) -> nn.Parameter:
        """(S, d_k) relative-position table p_x of distance x, shared by the heads (key side)."""
        return self.mixing.key_pe

    @property
    def window(self) -> int:
        """Distances the layer computes: S, or trimmed to what its learned spans use (for an
        input-dependent span, that of the last forward)."""
        return self.span_policy.window

    @property
    def cache_size(self) -> int:
        return self.span_policy.cache_size

    def forward(self, x: Tensor, cache: Tensor | None = None) -> Tensor:
        M = x.size(1)
        W = self.span_policy.prepare(x)
        cached = 0 if cache is None else min(cache.size(1), W - 1)
        mem = x if cached == 0 else torch.cat([cache[:, cache.size(1) - cached:], x], dim=1)
        if cached < W - 1:  # start of a stream: pad to a full window, mask the missing keys
            mem = F.pad(mem, (0, 0, W - 1 - cached, 0))
        valid = valid_keys(M, W, cached, x.device) if cached < W - 1 else None
        dist = distances(W, x.device).to(x.dtype)
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
            m = self.span_policy.mask(dist, rows)
            outs.append(self.mixing.attend(self.drop(self._weights(logits, m)), qi, kv, i))
        return self.mixing.output(torch.cat(outs, dim=2))

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
        limit S, and whether the spans are learned. Its cost per query at s keys is `flops(s)`."""
        m = self.mixing
        mats = m.matrices()
        return {"span_policy": self.span_policy.name, "mixing": m.name, "P_l": "P_l" in mats,
                "P_w": "P_w" in mats, "h_k": m.h_k, "h": m.h, "h_v": m.h_v, "d_k": m.d_k,
                "d_v": m.d_v, "S": self.S, "learned_spans": self.span_policy.learned}

    def set_spans(self, spans: Tensor | float) -> None:
        """Set the effective spans (z + R, at most S; one value or one per softmax head) as if
        learned, and trim the window to them. A ValueError where the spans are not learned."""
        self.span_policy.set_spans(spans)

    def span_loss(self) -> Tensor:
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
