"""fvcore counts of one prediction step against the analytic #FLOPS (docs/variants.md)."""

import pytest
import torch

import variants
from bench.config import ModelConfig
from bench.model import TransformerLM
from bench.model.cost import (
    analytic_flops,
    cost,
    executed_flops,
    flops_parts,
    layer_span,
    set_spans,
)
from bench.model.count import CONTRACTIONS, MATMUL_LIKE, ZERO_OPS, counted_flops

V = 64
# (d_model, n_layers, n_heads, d_ff, span, attention options, learned effective spans z + R:
#  (lo, hi) or None)
CONFIGS = {
    "base": (32, 2, 4, 64, 24, {}, None),
    "wide": (48, 3, 6, 80, 40, {"ramp": 8.0}, None),
    "trimmed": (32, 2, 4, 64, 300, {}, (37.0, 162.0)),  # windows: adaptive 192, dynamic 128
}
COMPOSITIONS = [  # variants.build options beyond the named variants
    ("talking-heads", dict(h=6, h_v=3, d_k=8, d_v=12)),  # h_k = 4 != h = 6 != h_v = 3
    ("logits-only", dict(h=6, h_v=6, d_v=8)),
    ("weights-only", dict(h_v=2, d_v=24)),
    ("gbma", dict(h=6)),
    ("adaptive", dict(mixing="both", h=6, h_v=2, d_v=16)),
    ("dynamic-span", dict(mixing="gbma")),
    ("talking-heads", dict(banded=True)),  # q.k and w.v over the band only, as vector dots
    ("adaptive", dict(banded=True, mixing="logits", h=6, h_v=6, d_v=8)),
]


def build(variant, cfg="base", **extra):
    D, L, H, F, S, attn, z = CONFIGS[cfg]
    takes = variants.options(variant, **extra)  # the config's span options, where they apply
    torch.manual_seed(0)
    m = ModelConfig(variant=variant, d_model=D, n_layers=L, n_heads=H, d_ff=F, span=S,
                    attn={**{k: v for k, v in attn.items() if k in takes}, **extra})
    model = TransformerLM(m, V)
    learned = model.blocks[0].attn.describe()["learned_spans"]
    if z is not None and learned:  # spans spread over the heads: mean span != the window
        set_spans(model, torch.linspace(*z, model.blocks[0].attn.span_policy.n_heads))
    return model


def check(model):
    """Counted equals analytic (#FLOPS plus the q.p term) at the executed windows, split by what
    scales with the window."""
    c = counted_flops(model)
    assert c["skipped"] == {}
    assert c["flops_counted"] == pytest.approx(executed_flops(model, "max"), rel=5e-3)
    core = sum(b.attn.flops(layer_span(b.attn, "max"), position=True)
               - b.attn.flops(0, position=True) for b in model.blocks)
    assert c["attention"] == pytest.approx(core, rel=5e-3)
    assert c["flops_counted_executed"] == c["flops_counted"] + c["cache_reprojection"]
    return c


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("variant", variants.names())
def test_counted_equals_analytic(variant, cfg):
    c = check(build(variant, cfg))
    assert c["cache_reprojection"] == 0 if variant == "gbma" else c["cache_reprojection"] > 0


@pytest.mark.parametrize("variant,options", COMPOSITIONS, ids=[f"{v}-{o}" for v, o in
                                                                COMPOSITIONS])
def test_counted_equals_analytic_compositions(variant, options):
    check(build(variant, "trimmed", **options))


def test_hand_computed_step():
    """Fixed, D 32, 4 heads, S 24, F 64, 2 layers, V 64: #FLOPS is the paper's 4 D^2 + 2 D F +
    2 D S per layer (docs/variants.md: no output layer); the executed graph adds the output layer
    (D V), q.p (D S) and projects the 23 cached states through W_k and W_v again (2 D^2 each)."""
    model = build("fixed")
    c = counted_flops(model)
    paper = 4 * 32**2 + 2 * 32 * 64 + 2 * 32 * 24
    assert analytic_flops(model, "full") == 2 * paper
    assert executed_flops(model, "full") == 2 * (paper + 32 * 24) + 32 * V
    assert c["flops_counted"] == 2 * (paper + 32 * 24) + 32 * V
    assert c["cache_reprojection"] == 2 * 23 * 2 * 32**2


def test_trimming_lowers_counted_flops():
    """z' = 1: every layer computes S = 256 keys. z = 20 (layer 1) and 80 (layer 2): the model
    trims to ceil(z + R = 52) -> 64 and ceil(112) -> 128 keys; each key dropped saves q.k, q.p and
    w.v (3 D), and one cached state fewer is re-projected through W_k and W_v (2 D^2)."""
    D, S = 32, 256
    model = TransformerLM(ModelConfig(variant="adaptive", d_model=D, n_layers=2, n_heads=4,
                                      d_ff=64, span=S), V)
    set_spans(model, torch.tensor(float(S)))
    full = counted_flops(model)
    for b, z in zip(model.blocks, (20.0, 80.0), strict=True):
        b.attn.set_spans(z + 32)
    assert [b.attn.span_policy.window for b in model.blocks] == [64, 128]
    trimmed = counted_flops(model)
    dropped = (S - 64) + (S - 128)
    assert full["flops_counted"] - trimmed["flops_counted"] == dropped * 3 * D
    assert full["cache_reprojection"] - trimmed["cache_reprojection"] == dropped * 2 * D * D


def test_no_matmul_like_op_is_skipped():
    """Every contraction fvcore can meet here has an exact handle; the guard recognises them
    (and scaled_dot_product_attention, which fvcore would count as 0) and no zero-op."""
    assert all(MATMUL_LIKE.search(op) for op in CONTRACTIONS)
    assert MATMUL_LIKE.search("aten::scaled_dot_product_attention")
    assert not any(MATMUL_LIKE.search(op) for op in ZERO_OPS)


def test_cost():
    model = build("adaptive", "trimmed")
    r, c = cost(model), counted_flops(model)
    assert r["params"] == sum(p.numel() for p in model.parameters())
    assert r["params"] - r["params_non_embedding"] == 2 * V * 32 + V  # embedding, output layer
    counted = c["flops_counted_executed"] - c["cache_reprojection"]
    output = 32 * V  # the output layer: executed, not in #FLOPS
    assert counted == pytest.approx(r["flops_max"] + r["flops_position"] + output, rel=5e-3)
    assert r["flops_mean"] < r["flops_max"] < r["flops_full"]


def paper_small(variant="fixed", span=8192, vocab=256):
    """The adaptive-span paper's small model: 12 layers, D 512, F 2048, 8 heads."""
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(variant=variant, d_model=512, n_layers=12, n_heads=8,
                                     d_ff=2048, span=span), vocab)


def test_paper_small_model_flops():
    """Adaptive-span Table 1: the small text8 model at mean span 314 costs about 42M #FLOPS
    (4 D^2 + 2 D F + 2 D s per layer; q.p would add 1.9M), 3x less than at S = 8192."""
    model = paper_small("adaptive", vocab=27)
    set_spans(model, 314.0)  # z + R = 314 in every head
    flops = analytic_flops(model, "mean")
    assert abs(flops - 42e6) / 42e6 < 0.015, flops
    assert flops_parts(model, "mean")["position"] == 12 * 512 * 314
    assert analytic_flops(model, "full") > 3 * flops


@pytest.mark.parametrize("span,part,share", [(256, "feed_forward", 0.62),
                                             (8192, "attention", 0.82)])
def test_paper_flops_shares(span, part, share):
    """Adaptive-span section 4: in a fixed-span small model the feed-forward layers are 62% of
    the FLOPs at S = 256, and attention is 82% at S = 8192 (within 1 point)."""
    with torch.device("meta"):
        model = paper_small(span=span)
    parts = flops_parts(model, "full")
    total = parts["attention"] + parts["feed_forward"]  # #FLOPS: the layers, no output layer
    assert abs(parts[part] / total - share) < 0.01, parts[part] / total
