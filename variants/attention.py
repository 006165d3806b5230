"""One attention layer = a span policy composed with a head-mixing policy."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import mixing as mix
from . import span as sp
from .band import distances, valid_keys


def _check(name: str, value, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is invalid: expected {allowed}")


def check_options(d_model: int, n_heads: int, span: int, span_policy: str, mixing: str,
                  h_k: int | None, h: int | None, h_v: int | None, d_k: int | None,
                  d_v: int | None, ramp: float, trim_step: int, dropout: float,
                  chunk: int | None) -> tuple[int, int, int, int, int]:
    """Validate a layer's options before anything is allocated; return h_k, h, h_v, d_k, d_v."""
    _check("span_policy", span_policy, span_policy in sp.POLICIES, f"one of {sp.POLICIES}")
    _check("mixing", mixing, mixing in mix.POLICIES, f"one of {mix.POLICIES}")
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
    """

    def __init__(self, d_model: int, n_heads: int, span: int, *, span_policy: str = "fixed",
                 mixing: str = "none", h_k: int | None = None, h: int | None = None,
                 h_v: int | None = None, d_k: int | None = None, d_v: int | None = None,
                 ramp: float = 32.0, span_loss: float = 2e-6, trim: bool = True,
                 trim_step: int = 64, gate_bias: float = -4.0, dropout: float = 0.0,
                 mix_noise: float = 0.0, dynamic_init: float = 0.01,
                 chunk: int | None = None) -> None:
        super().__init__()
        h_k, h, h_v, d_k, d_v = check_options(d_model, n_heads, span, span_policy, mixing, h_k, h,
                                              h_v, d_k, d_v, ramp, trim_step, dropout, chunk)
        self.S, self.chunk = span, chunk
        if span_policy == "fixed":
            self.span_policy = sp.FixedSpan(h, span)
        elif span_policy == "adaptive":
            self.span_policy = sp.AdaptiveSpan(h, span, ramp, span_loss, trim, trim_step)
        else:
            self.span_policy = sp.DynamicSpan(d_model, h, span, ramp, span_loss, trim, trim_step,
                                              gate_bias)
        if mixing == "gbma":
            self.mixing = mix.GBMA(d_model, span, h, d_k)
        elif mixing == "dynamic":
            self.mixing = mix.DynamicTalkingHeads(d_model, span, h_k, h, h_v, d_k, d_v, mix_noise,
                                                  dynamic_init)
        else:
            self.mixing = mix.MultiHead(d_model, span, h_k, h, h_v, d_k, d_v,
                                        mix_logits=mixing in ("logits", "both"),
                                        mix_weights=mixing in ("weights", "both"),
                                        mix_noise=mix_noise)
        self.drop = nn.Dropout(dropout)

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
            outs.append(self.mixing.attend(self.drop(self._weights(logits, m)), kv, i))
        return self.mixing.output(torch.cat(outs, dim=2))

    @staticmethod
    def _weights(logits: Tensor, m: Tensor | None) -> Tensor:
        """Softmax over the window, with the span mask when there is one."""
        if m is None:
            return logits.softmax(dim=-1)
        # a = m e^s / sum m e^s: the reference's softmax, times the mask, renormalised. Keys with
        # m = 0 are also set to -inf first: the same weights, but no epsilon, so they get exactly
        # zero gradient and a trimmed window gives the same result.
        w = logits.masked_fill(m == 0, float("-inf")).softmax(dim=-1) * m
        return w / w.sum(dim=-1, keepdim=True)

    def span_loss(self) -> Tensor:
        return self.span_policy.loss()

    def spans(self) -> Tensor:
        """(h,) effective span per softmax head."""
        return self.span_policy.spans()

    def clamp_(self) -> None:
        self.span_policy.clamp_()
