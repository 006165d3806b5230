"""Multiply-adds per predicted token (the adaptive-span paper's "#FLOPS", docs/variants.md),
analytic: what the layers say they cost, and parameters.

Each layer reports its own cost per query at s keys (`Attention.flops`: projections
2 D (h_k d_k + h_v d_v), q.k and w.v s (h_k d_k + h_v d_v), talking-heads maps s (h_k h + h h_v),
span gates D h; GBMA 2 D^2 h + 2 D h s), plus the feed-forward 2 D F. This is `#FLOPS`. Two
costs are real work but not in it, and are reported under their own names: the output layer
(`output`: D V per token) and the relative-position term q.p (`position`: h_k d_k s per query,
GBMA D d h + d h s); `executed_flops` adds them back.
"""

from typing import Literal

import torch
from torch import nn

from variants.attention import Attention

Span = Literal["full", "mean", "max"]


def layer_span(attn: Attention, which: Span) -> float:
    """Keys per query: S ("full", which the layer's `flops` counts at most at its `widest`, a
    mask's own window), mean of the heads' z + R ("mean", the paper's estimate) or the layer's
    computed window ("max", what a batched implementation executes)."""
    if which == "full":
        return attn.S
    if which == "mean":
        return attn.spans().mean().item()
    return attn.window


def flops_parts(model: nn.Module, which: Span = "max",
                spans: list[float] | None = None) -> dict[str, float]:
    """Analytic multiply-adds per predicted token, by part: attention (each layer's `flops`,
    projections included), feed_forward (2 D F per layer), output (D V); and, outside #FLOPS,
    position (the q.p term). `spans` (one per layer) overrides `which`: e.g. a dynamic span's
    mean over the dev split."""
    D = model.emb.embedding_dim
    spans = spans or [layer_span(b.attn, which) for b in model.blocks]
    parts = {"attention": 0.0, "feed_forward": 0.0, "output": float(D * model.head.out_features),
             "position": 0.0}
    for b, s in zip(model.blocks, spans, strict=True):
        parts["attention"] += b.attn.flops(s)
        parts["position"] += b.attn.flops(s, position=True) - b.attn.flops(s)
        parts["feed_forward"] += 2 * D * b.ff.fc1.out_features
    return parts


def analytic_flops(model: nn.Module, which: Span = "max",
                   spans: list[float] | None = None) -> float:
    """#FLOPS: multiply-adds per predicted token of a TransformerLM at its current spans, in the
    paper's convention (docs/variants.md): the layers' attention and feed-forward, without the
    output layer's D V and the q.p term."""
    p = flops_parts(model, which, spans)
    return p["attention"] + p["feed_forward"]


def executed_flops(model: nn.Module, which: Span = "max",
                   spans: list[float] | None = None) -> float:
    """What one prediction step executes beyond the cache re-projection: #FLOPS plus the output
    layer and the q.p term (what fvcore counts as `flops_counted`; what MFU divides by)."""
    return sum(flops_parts(model, which, spans).values())


def kept_distances(attn: Attention) -> float | None:
    """Distances a layer's mask keeps, per head (mean over its heads): how many of 0..S-1 the
    mask keeps nonzero for some query. A hard window keeps S; a local window its width; a
    dilated mask every other distance, though the layer computes the whole window. None where
    the spans are learned or the mask has parameters (they move with training: the run
    measures them, as flops_mean)."""
    policy = attn.span_policy
    if policy.learned or policy.moves:
        return None
    anywhere = policy.kept.anywhere  # (h | 1, 1, S): what the mask keeps at any position
    if anywhere is None:
        return float(policy.S)
    keep = (anywhere != 0).sum(-1).flatten().float()  # (h | 1,)
    return float(keep.expand(policy.n_heads).mean())


def kept_flops(model: nn.Module) -> float | None:
    """#FLOPS (`analytic_flops`) at the distances each layer's mask keeps (`kept_distances`):
    the work the mask asks for, beside `analytic_flops(model, "max")`, the work the layer
    computes; None where a layer's spans are learned."""
    kept = [kept_distances(b.attn) for b in model.blocks]
    return None if None in kept else analytic_flops(model, spans=kept)


def set_spans(model: nn.Module, spans: torch.Tensor | float) -> None:
    """Every layer's effective spans (z + R) set as if learned (`Attention.set_spans`): one
    value, or one per head; the layers trim their windows to them."""
    for b in model.blocks:
        b.attn.set_spans(spans)


def cost(model: nn.Module, mean_spans: list[float] | None = None,
         windows: list[int] | None = None) -> dict[str, float]:
    """A model's size and analytic cost per token: params (total, non-embedding), #FLOPS at the
    full span S (each layer at most at the widest window it can compute: `Attention.widest`),
    at each layer's mean span (the paper's estimate; default: its heads' z + R) and
    at each layer's computed window (what runs; default: its current window), and the q.p
    position term at those windows. A run passes the spans and windows measured over dev."""
    return {"params": sum(p.numel() for p in model.parameters()),
            "params_non_embedding": sum(p.numel() for n, p in model.named_parameters()
                                        if not n.startswith(("emb.", "head."))),
            "flops_full": analytic_flops(model, "full"),
            "flops_mean": analytic_flops(model, "mean", spans=mean_spans),
            "flops_max": analytic_flops(model, "max", spans=windows),
            "flops_position": flops_parts(model, "max", windows)["position"]}
