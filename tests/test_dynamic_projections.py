"""Talking-heads attention with dynamic projections (talking-heads appendix A): the paper's
pseudocode computed densely, talking-heads at zero dynamic parameters, causality, the cache and
chunking equivalences, and counted = analytic FLOPs."""

import math

import pytest
import torch

import variants
from bench.config import ModelConfig
from bench.model import TransformerLM
from bench.model.cost import executed_flops, layer_span, set_spans
from bench.model.count import counted_flops

D, H, S = 32, 4, 24
DYN = ["P_Xl", "P_Ml", "P_Xw", "P_Mw"]
SHAPES = [{}, {"h": 6, "h_v": 3, "d_k": 8, "d_v": 12}]  # h_k = 4 != h = 6 != h_v = 3


def build(name="talking-heads-dynamic", **cfg):
    return variants.build(name, d_model=D, n_heads=H, span=S, **cfg)


def dense_reference(layer, x, cache=None):
    """The appendix's pseudocode over every (query, key) pair of [cache; x], with the layer's
    relative positions and its window (query t sees distances 0..S-1), no banding, no chunks."""
    m = layer.mixing
    mem = x if cache is None else torch.cat([cache, x], 1)
    B, n, _ = x.shape
    K = mem.size(1)
    hk, h, hv = m.h_k, m.h, m.h_v
    q = (x @ m.W_q).view(B, n, hk, m.d_k) / math.sqrt(m.d_k)
    k = (mem @ m.W_k).view(B, K, hk, m.d_k)
    v = (mem @ m.W_v).view(B, K, hv, m.d_v)
    dist = (K - n + torch.arange(n))[:, None] - torch.arange(K)[None]  # (n, K): t - r
    valid = (dist >= 0) & (dist < S)
    pe = m.key_pe[dist.clamp(0, S - 1)]  # (n, K, d_k)
    J = torch.einsum("bnkd,bmkd->bnmk", q, k) + torch.einsum("bnkd,nmd->bnmk", q, pe)
    R_Xl, R_Ml = (x @ m.P_Xl).view(B, n, hk, h), (mem @ m.P_Ml).view(B, K, hk, h)
    R_Xw, R_Mw = (x @ m.P_Xw).view(B, n, h, hv), (mem @ m.P_Mw).view(B, K, h, hv)
    L = (torch.einsum("bnmk,kh->bnmh", J, m.P_l.P) + torch.einsum("bnmk,bnkh->bnmh", J, R_Xl)
         + torch.einsum("bnmk,bmkh->bnmh", J, R_Ml))
    W = L.masked_fill(~valid[None, :, :, None], float("-inf")).softmax(dim=2)
    U = (torch.einsum("bnmh,hv->bnmv", W, m.P_w.P) + torch.einsum("bnmh,bnhv->bnmv", W, R_Xw)
         + torch.einsum("bnmh,bmhv->bnmv", W, R_Mw))
    out = torch.einsum("bnmv,bmvd->bnvd", U, v)  # O[n, d_v, h_v] of the pseudocode
    return out.reshape(B, n, hv * m.d_v) @ m.W_o


@pytest.mark.parametrize("shape", SHAPES, ids=["square", "hk4-h6-hv3"])
def test_matches_the_papers_pseudocode(shape):
    layer = build(dynamic_init=0.5, mix_noise=0.3, **shape)
    x, c = torch.randn(2, 16, D), torch.randn(2, 30, D)
    for cache in (None, c):
        assert torch.allclose(layer(x, cache), dense_reference(layer, x, cache), atol=1e-5)
    layer(x, c).square().sum().backward()  # the four generators are learned
    assert all(getattr(layer.mixing, p).grad.abs().sum() > 0 for p in DYN)


@pytest.mark.parametrize("shape", SHAPES, ids=["square", "hk4-h6-hv3"])
def test_zero_dynamic_parameters_equal_talking_heads(shape):
    th = build("talking-heads", mix_noise=0.3, **shape)  # noise: P_l, P_w not the identity
    dyn = build(dynamic_init=0.5, **shape)
    missing, unexpected = dyn.load_state_dict(th.state_dict(), strict=False)
    assert sorted(missing) == sorted(f"mixing.{p}" for p in DYN) and not unexpected
    x, c = torch.randn(2, 16, D), torch.randn(2, 30, D)
    assert not torch.allclose(dyn(x, c), th(x, c), atol=1e-3)  # the dynamic terms matter
    with torch.no_grad():
        for p in DYN:
            getattr(dyn.mixing, p).zero_()
    for cache in (None, c):
        assert torch.allclose(dyn(x, cache), th(x, cache), atol=1e-6)
    zero_init = build(dynamic_init=0.0, **shape)
    zero_init.load_state_dict(th.state_dict(), strict=False)
    assert torch.allclose(zero_init(x, c), th(x, c), atol=1e-6)


def test_initialised_small():
    """Generated entries have std dynamic_init at unit-variance inputs (the paper: training
    only works from small values); P_l and P_w start at the identity as in talking-heads."""
    layer = variants.build("talking-heads-dynamic", d_model=256, n_heads=8, span=S,
                           dynamic_init=0.02)
    x = torch.randn(64, 256)
    for p in DYN:
        assert (x @ getattr(layer.mixing, p)).std().item() == pytest.approx(0.02, rel=0.1)
    assert torch.equal(layer.mixing.P_l.P, torch.eye(8))
    with pytest.raises(ValueError, match="dynamic_init"):
        build(dynamic_init=-0.1)


CASES = [("talking-heads-dynamic", {"dynamic_init": 0.5}),
         ("talking-heads-dynamic", {"dynamic_init": 0.5, "h": 6, "h_v": 2, "d_v": 12}),
         ("adaptive", {"mixing": "dynamic-projections", "dynamic_init": 0.5})]


@pytest.mark.parametrize("name,cfg", CASES, ids=str)
def test_causal(name, cfg):
    layer = build(name, **cfg)
    x, c = torch.randn(2, 40, D), torch.randn(2, 30, D)
    x2 = x.clone()
    x2[:, 31:] = torch.randn(2, 9, D)
    for cache in (None, c):
        assert torch.allclose(layer(x, cache)[:, :31], layer(x2, cache)[:, :31], atol=1e-6)
        x_ = x.clone().requires_grad_(True)
        layer(x_, cache)[:, 30].sum().backward()  # sees 30-S+1..30 only: the window holds
        g = x_.grad.abs().sum(dim=(0, 2))
        assert (g[31:] == 0).all() and (g[: 30 - S + 1] == 0).all() and (g[30 - S + 1:31] > 0).all()


@pytest.mark.parametrize("name,cfg", CASES, ids=str)
def test_chunked_equals_unchunked(name, cfg):
    one, small = build(name, chunk=1000, **cfg), build(name, chunk=7, **cfg)
    small.load_state_dict(one.state_dict())
    x, c = torch.randn(2, 40, D), torch.randn(2, 30, D)
    for cache in (None, c):
        assert torch.allclose(small(x, cache), one(x, cache), atol=1e-5)


@pytest.mark.parametrize("name,cfg", CASES, ids=str)
def test_counted_equals_analytic(name, cfg):
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(variant=name, d_model=D, n_layers=2, n_heads=H, d_ff=64,
                                      span=300 if name == "adaptive" else S, attn=cfg), 64)
    if name == "adaptive":  # trimmed windows: the dynamic terms follow the computed keys
        set_spans(model, torch.linspace(5.0, 130.0, H))
    c = counted_flops(model)
    assert c["skipped"] == {}
    executed = executed_flops(model, "max")  # the graph computes q.p and the output too
    assert c["flops_counted"] == pytest.approx(executed, rel=5e-3)
    core = sum(b.attn.flops(layer_span(b.attn, "max"), position=True)
               - b.attn.flops(0, position=True) for b in model.blocks)
    assert c["attention"] == pytest.approx(core, rel=5e-3)


def test_analytic_cost_over_talking_heads():
    """Per query over s keys: 2 (D + s)(h_k h + h h_v) multiply-adds more than talking-heads:
    four D-wide projections to h_k h or h h_v entries, and J, W times the query- and
    memory-side terms."""
    hk, h, hv = 4, 6, 3
    th, dyn = (build(n, h=h, h_v=hv, d_v=8) for n in ("talking-heads", "talking-heads-dynamic"))
    for s in (1, 24):
        extra = dyn.flops(s) - th.flops(s)
        assert extra == 2 * (D + s) * (hk * h + h * hv)
