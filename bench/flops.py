"""Multiply-adds per predicted token (the adaptive-span paper's "#FLOPS"), SPEC section 6.

Analytic, per layer: projections 2 D (h_k d_k + h_v d_v) (= 4 D^2 by default), feed-forward
2 D F, and per attended key s: q.k (h_k d_k), the relative-position term q.p (h_k d_k) and
weights.v (h_v d_v), plus talking-heads mixing s (h_k h + h h_v); GBMA: 2 D^2 h + 2 D h s (+ its
position term D d h + d h s). The output layer adds D V. The SPEC's 2 D s counts q.k and w.v;
the executed graph also computes q.p, so it is counted here.
"""

from typing import Literal

from torch import nn

from variants.attention import Attention
from variants.mixing import GBMA

Span = Literal["full", "mean", "max"]


def attention_flops(attn: Attention, d_model: int, s: float) -> float:
    """Multiply-adds per query of one attention layer attending over s keys."""
    D, mix, h = d_model, attn.mixing, attn.span_policy.n_heads
    gate = D * h if hasattr(attn.span_policy, "gate") else 0
    if isinstance(mix, GBMA):
        d = mix.P_pos.shape[1]
        return gate + 2 * D * D * h + 2 * D * h * s + D * d * h + d * h * s
    qk, vo = mix.h_k * mix.d_k, mix.h_v * mix.d_v
    mixing = s * (mix.h_k * h if mix.P_l is not None else 0)
    mixing += s * (h * mix.h_v if mix.P_w is not None else 0)
    return gate + 2 * D * (qk + vo) + s * (2 * qk + vo) + mixing


def layer_span(attn: Attention, which: Span) -> float:
    """Keys per query: S ("full"), mean of the heads' z + R ("mean", the paper's estimate) or the
    layer's computed window ("max", what a batched implementation executes)."""
    if which == "full":
        return attn.S
    if which == "mean":
        return attn.spans().mean().item()
    return attn.span_policy.window


def analytic_flops(model: nn.Module, which: Span = "max") -> float:
    """Multiply-adds per predicted token of a TransformerLM at its current spans."""
    D = model.emb.embedding_dim
    total = D * model.head.out_features
    for b in model.blocks:
        total += attention_flops(b.attn, D, layer_span(b.attn, which))
        total += 2 * D * b.ff.fc1.out_features
    return total
