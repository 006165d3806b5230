"""Equivalences, causality, locality, trimming and the cache: what every number rests on."""

import math
from dataclasses import dataclass

import pytest
import torch

import variants
import variants.span
from bench.config import ModelConfig
from bench.model import TransformerLM

D, H, S = 32, 4, 24
CROSS = [("adaptive", {"mixing": "both"}), ("dynamic-span", {"mixing": "gbma"}),
         ("adaptive", {"mixing": "logits", "h": 6, "h_v": 6, "d_v": 8}),
         ("talking-heads", {"width": 8}),
         ("adaptive", {"mixing": "both", "banded": True, "width": 4})]  # heads 1 wide
ALL = [(n, {}) for n in variants.names()] + CROSS


def build(name, **cfg):
    return variants.build(name, d_model=D, n_heads=H, span=S, **cfg)


def copy_shared(dst, src):
    """Copy src's parameters into dst where names match (the multi-head projections)."""
    missing, _ = dst.load_state_dict(src.state_dict(), strict=False)
    return missing


def set_z(attn, z_prime):
    with torch.no_grad():
        attn.span_policy.z_prime.copy_(torch.as_tensor(z_prime).view(-1, 1, 1))
    attn.clamp_()


@pytest.mark.parametrize("width", [None, 8])
@pytest.mark.parametrize("name", ["talking-heads", "logits-only", "weights-only"])
def test_identity_mixing_equals_multihead(name, width):
    mh, th = build("fixed", width=width), build(name, width=width)
    missing = copy_shared(th, mh)
    assert all(".P_" in k for k in missing), missing  # only the mixing matrices differ
    x, c = torch.randn(2, 16, D), torch.randn(2, 30, D)
    assert torch.allclose(th(x, c), mh(x, c), atol=1e-5)


def fold_into_gbma(layer):
    """GBMA weights equal to a multi-head / talking-heads layer (docs/variants.md)."""
    m = layer.mixing
    Pq = m.W_q.view(D, m.h_k, m.d_k) / math.sqrt(m.d_k)
    Pk = m.W_k.view(D, m.h_k, m.d_k)
    Pv = m.W_v.view(D, m.h_v, m.d_v)
    Po = m.W_o.view(m.h_v, m.d_v, D)
    Pl = m.P_l.P if m.P_l is not None else torch.eye(m.h_k)
    Pw = m.P_w.P if m.P_w is not None else torch.eye(m.h_v)
    g = build("gbma", h=Pl.shape[1])
    with torch.no_grad():
        g.mixing.P.copy_(torch.einsum("akd,bkd,kh->abh", Pq, Pk, Pl))
        g.mixing.P_pos.copy_(torch.einsum("akd,kh->adh", Pq, Pl))
        g.mixing.Q.copy_(torch.einsum("bvd,vdc,hv->bch", Pv, Po, Pw))
        g.mixing.key_pe.copy_(m.key_pe)
    return g


@pytest.mark.parametrize("name,cfg", [("fixed", {}),
                                      ("talking-heads", {"mix_noise": 0.3}),
                                      ("talking-heads", {"mix_init": "random"})])
def test_gbma_folded_equals_layer(name, cfg):
    layer = build(name, **cfg)  # noise or a random start: a non-identity P_l, P_w
    g = fold_into_gbma(layer)
    x, c = torch.randn(2, 16, D), torch.randn(2, 30, D)
    assert torch.allclose(g(x, c), layer(x, c), atol=1e-5)
    assert torch.allclose(g(x), layer(x), atol=1e-5)


def test_adaptive_full_span_equals_fixed():
    fixed, ad = build("fixed"), build("adaptive", ramp=1e-3)
    copy_shared(ad, fixed)
    set_z(ad, torch.ones(H))
    x, c = torch.randn(2, 16, D), torch.randn(2, 30, D)
    assert ad.span_policy.window == S
    assert torch.allclose(ad(x, c), fixed(x, c), atol=1e-5)


def test_dynamic_saturated_equals_fixed():
    fixed, dyn = build("fixed"), build("dynamic-span", gate_bias=50.0)
    copy_shared(dyn, fixed)
    x, c = torch.randn(2, 16, D), torch.randn(2, 30, D)
    assert torch.allclose(dyn(x, c), fixed(x, c), atol=1e-5)


@pytest.mark.parametrize("name,cfg", ALL, ids=lambda v: str(v))
def test_causal(name, cfg):
    layer = build(name, **cfg)
    if name == "adaptive":
        set_z(layer, torch.rand(layer.span_policy.n_heads))
    x, c = torch.randn(2, 20, D), torch.randn(2, 30, D)
    x2 = x.clone()
    x2[:, 11:] = torch.randn(2, 9, D)
    for cache in (None, c):
        assert torch.allclose(layer(x, cache)[:, :11], layer(x2, cache)[:, :11], atol=1e-6)


def test_attends_to_itself():
    """Chosen convention: query t sees t-S+1..t, itself included. With S = 1 the output is
    exactly the value of x_t projected by W_o."""
    layer = variants.build("fixed", d_model=D, n_heads=H, span=1)
    x = torch.randn(2, 10, D)
    m = layer.mixing
    assert torch.allclose(layer(x), x @ m.W_v @ m.W_o, atol=1e-6)


def output_and_grads(layer, x, cache=None):
    """layer(x, cache) -> (y, dL/dx, [dL/dp for each parameter]) under L = sum(y^2)."""
    layer.zero_grad()
    x = x.clone().requires_grad_(True)
    y = layer(x, cache)
    y.square().sum().backward()
    return y, x.grad, [p.grad for p in layer.parameters()]


def input_grad(layer, x, t):
    x = x.clone().requires_grad_(True)
    layer(x)[:, t].sum().backward()
    return x.grad.abs().sum(dim=(0, 2))  # (M,) gradient mass per input position


def test_fixed_span_locality():
    layer = build("fixed")
    g = input_grad(layer, torch.randn(2, 60, D), t=50)
    assert (g[: 50 - S + 1] == 0).all() and (g[50 - S + 1 : 51] > 0).all()
    assert (g[51:] == 0).all()


def test_adaptive_span_locality():
    layer = variants.build("adaptive", d_model=D, n_heads=H, span=64, ramp=4.0)
    set_z(layer, torch.tensor([0.1, 0.2, 0.05, 0.15]))  # z = 6.4 .. 12.8, z + R <= 16.8
    g = input_grad(layer, torch.randn(2, 80, D), t=70)
    reach = math.ceil(64 * 0.2 + 4.0)  # widest head: mask is zero from distance z + R on
    assert (g[: 70 - reach + 1] == 0).all() and (g[70 - reach + 1 : 71] > 0).all()


@pytest.mark.parametrize("name,cfg", [("adaptive", {}), ("dynamic-span", {"gate_bias": -3.5}),
                                      ("adaptive", {"mixing": "both", "mix_noise": 0.2}),
                                      ("adaptive", {"banded": True})])
def test_trimmed_equals_untrimmed(name, cfg):
    span = 256
    kw = dict(d_model=D, n_heads=H, span=span, ramp=8.0, **cfg)
    trimmed, full = variants.build(name, **kw), variants.build(name, trim=False, **kw)
    full.load_state_dict(trimmed.state_dict())
    if name == "adaptive":
        for layer in (trimmed, full):
            set_z(layer, torch.tensor([0.05, 0.1, 0.02, 0.08]))
    x, c = torch.randn(2, 32, D), torch.randn(2, 300, D)
    outs = [output_and_grads(layer, x, c) for layer in (trimmed, full)]
    assert trimmed.span_policy.window < span // 2 and full.span_policy.window == span
    assert trimmed.cache_size < full.cache_size or name == "dynamic-span"
    (y1, gx1, gp1), (y2, gx2, gp2) = outs
    assert torch.allclose(y1, y2, atol=1e-5) and torch.allclose(gx1, gx2, atol=1e-5)
    for a, b in zip(gp1, gp2, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


CACHED = [(n, {}) for n in ("fixed", "adaptive", "dynamic-span", "talking-heads", "gbma")] + [
    ("talking-heads-dynamic", {"dynamic_init": 0.5}),  # dynamic projections, visibly non-zero
    ("talking-heads-dynamic", {"dynamic_init": 0.5, "h": 6, "h_v": 2, "d_v": 12}),
    ("adaptive", {"mixing": "dynamic-projections", "dynamic_init": 0.5}),
    ("talking-heads", {"banded": True}), ("adaptive", {"banded": True, "width": 4})]


@pytest.mark.parametrize("name,cfg", CACHED, ids=str)
def test_cache_blocks_equal_one_pass(name, cfg):
    ramp = {"ramp": 4.0} if name in ("adaptive", "dynamic-span") else {}
    model = TransformerLM(ModelConfig(variant=name, d_model=D, n_layers=3, n_heads=H, d_ff=64,
                                      span=S, attn={**ramp, **cfg}), 50)
    if name == "adaptive":
        for b in model.blocks:
            set_z(b.attn, torch.rand(H))
    model.eval()
    idx = torch.randint(0, 50, (2, 96))
    one, _ = model(idx)
    cache, outs = None, []
    for blk in idx.split(16, dim=1):
        y, cache = model(blk, cache)
        outs.append(y)
    assert torch.allclose(torch.cat(outs, 1), one, atol=1e-4)


def test_z_clamped_and_span_loss():
    layer = build("adaptive", span_loss=0.5)
    opt = torch.optim.SGD(layer.parameters(), lr=10.0)
    for sign in (-1.0, 1.0):
        for _ in range(3):
            opt.zero_grad()
            (sign * layer.span_policy.z_prime.sum() * 100).backward()
            opt.step()
            layer.clamp_()
            z = layer.span_policy.z_prime
            assert (z >= 0).all() and (z <= 1).all()
    set_z(layer, torch.tensor([0.0, 0.25, 0.5, 1.0]))
    z = S * torch.tensor([0.0, 0.25, 0.5, 1.0])
    assert torch.isclose(layer.span_penalty(), 0.5 / H * z.sum())
    assert torch.allclose(layer.spans(), (z + 32).clamp(max=S))


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def test_parameter_counts():
    g = build("gbma")
    assert g.mixing.P.numel() + g.mixing.Q.numel() == 2 * D * D * H
    assert n_params(g) == 2 * D * D * H + D * (D // H) * H + S * (D // H)  # + positions
    hk, h, hv = 2, 6, 3
    th = variants.build("talking-heads", d_model=D, n_heads=hk, span=S, h=h, h_v=hv, d_k=8, d_v=8)
    mh = variants.build("fixed", d_model=D, n_heads=hk, span=S, d_k=8)
    base = n_params(mh) - mh.mixing.W_v.numel() - mh.mixing.W_o.numel() + 2 * D * hv * 8
    assert n_params(th) - base == hk * h + h * hv


def test_width_sets_the_heads_widths_and_the_projections():
    """`width` = h d_k = h d_v (talking-heads Table 1's constant): narrower heads as h grows,
    Q, K, V and O of D x width; explicit d_k / d_v still win."""
    for h in (1, 2, 8):
        layer = variants.build("talking-heads", d_model=D, n_heads=h, span=S, width=8)
        m = layer.mixing
        assert (m.d_k, m.d_v) == (8 // h, 8 // h) and layer.describe()["options"]["width"] == 8
        assert all(w.shape in {(D, 8), (8, D)} for w in (m.W_q, m.W_k, m.W_v, m.W_o))
        assert m.flops(10) == 2 * D * 16 + 10 * (16 + 2 * h * h)
    m = variants.build("fixed", d_model=D, n_heads=2, span=S, width=8, d_k=1).mixing
    assert (m.d_k, m.d_v) == (1, 4)
    assert build("fixed").mixing.d_k == D // H  # default: d_model


@pytest.mark.parametrize("kwargs,key", [
    (dict(name="nope"), "variant"), (dict(mixing="talk"), "mixing"),
    (dict(span_policy="wide"), "span_policy"), (dict(n_heads=5), "n_heads"),
    (dict(span=0), "span"), (dict(ramp=0.0), "ramp"), (dict(dropout=1.0), "dropout"),
    (dict(dropout=-0.1), "dropout"), (dict(name="talking-heads", mix_init="orthogonal"),
                                      "mix_init"),
    (dict(name="fixed", span_loss=1e-6), "span_loss"), (dict(name="gbma", h_v=3), "h_v"),
    (dict(width=6), "divisor of the width 6"), (dict(width=0), "width=0"),
    (dict(name="talking-heads-dynamic", banded=True), "banded=True: expected false with dynamic"),
    (dict(name="gbma", banded=True), "banded=True: unknown option of variant 'gbma'"),
])
def test_bad_input(kwargs, key):
    name = kwargs.pop("name", "adaptive")
    cfg = dict(d_model=D, n_heads=H, span=S) | kwargs
    with pytest.raises(ValueError, match=key) as err:
        variants.build(name, **cfg)
    if key == "variant":
        assert all(n in str(err.value) for n in variants.names())


@pytest.mark.parametrize("name,cfg", [("fixed", {}), ("dynamic-span", {"mixing": "both"}),
                                      ("gbma", {})])
def test_query_chunking_is_exact(name, cfg):
    """Chunked queries (each chunk over its own band of keys) = one chunk for the block."""
    one = build(name, chunk=1000, **cfg)
    small = build(name, chunk=7, **cfg)
    small.load_state_dict(one.state_dict())
    x, c = torch.randn(2, 40, D), torch.randn(2, 30, D)
    for cache in (None, c):
        assert torch.allclose(small(x, cache), one(x, cache), atol=1e-5)


BANDED = [("fixed", 8, {"width": 8}), ("talking-heads", 8, {"width": 8}),
          ("talking-heads", 4, {}), ("adaptive", 8, {"mixing": "both", "width": 8, "ramp": 4.0,
                                                 "trim_step": 4}),
          ("dynamic-span", 8, {"width": 8}), ("weights-only", 4, {"h_v": 2, "d_v": 3}),
          ("logits-only", 2, {"width": 8})]


@pytest.mark.parametrize("name,heads,cfg", BANDED, ids=lambda v: str(v))
def test_banded_equals_dense(name, heads, cfg):
    """banded=True (q.k and w.v over each query's window only) is the dense layer's function:
    outputs and every gradient agree to float rounding, at the start of a stream (keys padded
    and masked) and after a cache, at heads 1 wide (d_k = d_v = 1) and wider, over learned
    spans with the window trimmed below S, and in several query chunks."""
    layers = [variants.build(name, d_model=D, n_heads=heads, span=S, chunk=16, banded=banded,
                             **cfg) for banded in (False, True)]
    layers[1].load_state_dict(layers[0].state_dict())
    if layers[0].describe()["learned_spans"] and name != "dynamic-span":
        for layer in layers:
            set_z(layer, torch.linspace(0.2, 0.5, heads))
        assert layers[0].window < S
    x, c = torch.randn(2, 40, D), torch.randn(2, 30, D)
    for cache in (None, c):
        (y1, gx1, gp1), (y2, gx2, gp2) = (output_and_grads(layer, x, cache) for layer in layers)
        for a, b in zip([y1, gx1, *gp1], [y2, gx2, *gp2], strict=True):
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: CPU-only machine")
@pytest.mark.parametrize("name,cfg", ALL, ids=lambda v: str(v))
def test_cuda_matches_cpu(name, cfg):
    """The same layer on CUDA gives the CPU's outputs and gradients."""
    import copy

    cpu = build(name, **cfg)
    if name == "adaptive":
        set_z(cpu, torch.rand(cpu.span_policy.n_heads))
    gpu = copy.deepcopy(cpu).cuda()
    gpu.clamp_()
    x, c = torch.randn(2, 40, D), torch.randn(2, 30, D)
    for layer, dev in ((cpu, "cpu"), (gpu, "cuda")):
        layer(x.to(dev), c.to(dev)).square().sum().backward()
    assert torch.allclose(gpu(x.cuda(), c.cuda()).cpu(), cpu(x, c), atol=1e-4)
    for a, b in zip(cpu.parameters(), gpu.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad.cpu(), atol=1e-3, rtol=1e-3)


def start_variances(name, d_model=128, n_heads=4, span=32, seeds=4):
    """Mean over seeds of the variance of a fresh layer's logits (valid band entries, position
    term included) and of its outputs, on N(0, 1) inputs (what LayerNorm feeds a layer)."""
    from variants.attention import scores, valid_keys

    logit_v, out_v = [], []
    for seed in range(seeds):
        torch.manual_seed(seed)
        layer = variants.build(name, d_model=d_model, n_heads=n_heads, span=span)
        x = torch.randn(8, span, d_model)
        mix, every = layer.mixing, slice(None)
        with torch.no_grad():
            p = mix.project(x, torch.nn.functional.pad(x, (0, 0, span - 1, 0)))
            J = scores(p.q, p.k, span) + p.q_pos @ layer.key_pe.flip(0).T
            logits = mix.pre_softmax(J, p, every, every)
            logit_v.append(logits[..., valid_keys(span, span, 0)].var().item())
            out_v.append(layer(x).var().item())
    return sum(logit_v) / seeds, sum(out_v) / seeds


def test_gbma_starts_with_multihead_variance():
    """GBMA is not a hotter start: its logits and outputs begin with the variances multi-head
    and talking-heads begin with, at the tiny preset's sizes (D 128, 4 heads), within 10%."""
    ref = start_variances("fixed")
    for name in ("talking-heads", "gbma"):
        got = start_variances(name)
        for g, r in zip(got, ref, strict=True):
            assert g == pytest.approx(r, rel=0.1), (name, got, ref)


@pytest.mark.parametrize("data_name,vocab,paper", [("text8", 27, 38e6), ("enwik8", 256, 39e6)])
def test_small_preset_params_match_paper(data_name, vocab, paper):
    """Adaptive-span Table 1: the small model has 38M parameters on text8 and 39M on enwik8,
    with one relative-position table shared by the 12 layers (a table per layer: +5.8M)."""
    from bench.config import resolve
    from bench.model import create_model

    cfg = resolve({"data": {"name": data_name}}, "small")
    with torch.device("meta"):
        model = create_model(cfg.model, vocab)
        per_layer = TransformerLM(cfg.model.model_copy(update={"shared_pe": False}), vocab)
    params = n_params(model)
    assert abs(params - paper) / paper < 0.03, params
    assert n_params(per_layer) - params == 11 * 8192 * 64


@pytest.mark.parametrize("name", ["fixed", "talking-heads", "gbma"])
def test_shared_position_table(name):
    """One table for every layer: the same Parameter, trained by every layer's gradient, and the
    same function as per-layer tables that hold equal values."""
    torch.manual_seed(0)
    m = ModelConfig(variant=name, d_model=D, n_layers=3, n_heads=H, d_ff=64, span=S)
    shared = TransformerLM(m, 50)
    per_layer = TransformerLM(m.model_copy(update={"shared_pe": False}), 50)
    tables = {id(b.attn.key_pe) for b in shared.blocks}
    assert tables == {id(shared.key_pe)} and len({id(b.attn.key_pe) for b in per_layer.blocks}) == 3
    assert n_params(per_layer) - n_params(shared) == 2 * S * shared.key_pe.size(1)
    state = {k: v for k, v in shared.state_dict().items() if k != "key_pe"}
    per_layer.load_state_dict(state)  # every layer's table := the shared one
    idx = torch.randint(0, 50, (2, 40))
    assert torch.allclose(per_layer(idx)[0], shared(idx)[0], atol=1e-5)
    shared(idx)[0].square().sum().backward()
    per_layer(idx)[0].square().sum().backward()
    summed = sum(b.attn.key_pe.grad for b in per_layer.blocks)
    assert torch.allclose(shared.key_pe.grad, summed, atol=1e-4)


def test_key_pe_shape_checked():
    with pytest.raises(ValueError, match=r"key_pe.*\(24, 8\)"):
        build("fixed", key_pe=torch.nn.Parameter(torch.zeros(S, 4)))


def adaptive_model(n_layers, z, span=256):
    """Adaptive LM with every head at span z (R 8): the window is z + 8 rounded up to 64."""
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(variant="adaptive", d_model=D, n_layers=n_layers,
                                      n_heads=H, d_ff=64, span=span, attn={"ramp": 8.0}), 50)
    set_spans_all(model, z / span)
    return model.eval()


def set_spans_all(model, z_prime):
    for b in model.blocks:
        set_z(b.attn, torch.full((H,), z_prime))


def run_blocks(model, idx, size, cache=None):
    outs = []
    for blk in idx.split(size, dim=1):
        y, cache = model(blk, cache)
        outs.append(y)
    return torch.cat(outs, 1), cache


def test_adaptive_cache_blocks_equal_one_pass_when_trimmed():
    """S 256 > trim_step 64: the layers compute a 128-key window, and blocks of 32 with the cache
    give the one-pass outputs."""
    model = adaptive_model(3, 100.0)
    assert {b.attn.span_policy.window for b in model.blocks} == {128}
    idx = torch.randint(0, 50, (2, 320))
    assert torch.allclose(run_blocks(model, idx, 32)[0], model(idx)[0], atol=1e-4)


def test_adaptive_cache_survives_window_growth():
    """The cache keeps 64 states beyond the window (the reference's "a span might increase"), so
    the first block after the window grows from 64 to 128 keys sees the real preceding text, as a
    one pass at the new window does. One layer: its cache is the embeddings, exact at any span."""
    model = adaptive_model(1, 40.0)
    attn = model.blocks[0].attn
    assert attn.span_policy.window == 64 and attn.cache_size == 127
    idx = torch.randint(0, 50, (2, 192))
    _, cache = run_blocks(model, idx[:, :160], 32)
    set_spans_all(model, 100.0 / 256)  # a training step widens the spans
    assert attn.span_policy.window == 128
    after, _ = model(idx[:, 160:], cache)
    assert torch.allclose(after, model(idx)[0][:, 160:], atol=1e-4)


def loop_reference(layer, x, z):
    """The paper's soft-masked attention written out per query t, head i and key r (no cache):
    s_tr = q_t . (k_r + p_{t-r}) / sqrt(d), m = clamp((R + z - (t - r)) / R, 0, 1) and
    a_tr = m(t-r) e^s_tr / sum_r' m(t-r') e^s_tr', over the keys t - S < r <= t.
    z is (h,) per head or (B, M, h) per query position. Returns (B, M, D)."""
    m, R, S_ = layer.mixing, layer.span_policy.ramp, layer.S
    B, M, _ = x.shape
    h, d = m.h_k, m.d_k
    q, k, v = ((x @ w).view(B, M, h, d) for w in (m.W_q, m.W_k, m.W_v))
    rows = []
    for b in range(B):
        for t in range(M):
            heads = []
            for i in range(h):
                zi = z[i] if z.dim() == 1 else z[b, t, i]
                keys = range(max(0, t - S_ + 1), t + 1)
                s = torch.stack([q[b, t, i] @ (k[b, r, i] + m.key_pe[t - r]) / math.sqrt(d)
                                 for r in keys])
                mask = torch.stack([((R + zi - (t - r)) / R).clamp(0, 1) for r in keys])
                a = mask * s.exp() / (mask * s.exp()).sum()
                heads.append(sum(a_r * v[b, r, i] for a_r, r in zip(a, keys, strict=True)))
            rows.append(torch.cat(heads))
    return (torch.stack(rows).view(B, M, h * d)) @ m.W_o


def soft_layer(name, **cfg):
    torch.manual_seed(0)
    return variants.build(name, d_model=16, n_heads=2, span=16, ramp=6.0, **cfg)


def test_adaptive_soft_mask_matches_paper():
    """0 < m < 1 on distances 4..9 (z = 3.5, 4.5; R = 6): the outputs and the gradient to z' are
    the paper's renormalised soft-masked softmax, not a hard window or an unnormalised mask."""
    layer = soft_layer("adaptive")
    set_z(layer, torch.tensor([3.5, 4.5]) / 16)
    x, g = torch.randn(2, 20, 16), torch.randn(2, 20, 16)
    (layer(x) * g).sum().backward()
    got = layer.span_policy.z_prime.grad.clone()
    layer.zero_grad()
    ref = loop_reference(layer, x, layer.span_policy.z.flatten())
    (ref * g).sum().backward()
    assert torch.allclose(layer(x), ref, atol=1e-5)
    assert got.abs().min() > 0 and torch.allclose(got, layer.span_policy.z_prime.grad, atol=1e-5)


def test_dynamic_soft_mask_gate_gradient_and_penalty():
    """Dynamic span: z_t = S sigmoid(v . x_t + b) per head and position puts 0 < m < 1 on some
    keys; outputs, the gate's gradient, and the penalty lambda * mean_{b,i,t} z_t (the span loss
    the trainer adds) match the loop-level reference."""
    layer = soft_layer("dynamic-span", gate_bias=-1.0, span_loss=0.5)
    gate = layer.span_policy.gate
    x, g = torch.randn(2, 20, 16), torch.randn(2, 20, 16)
    ((layer(x) * g).sum() + layer.span_penalty()).backward()
    got = [gate.weight.grad.clone(), gate.bias.grad.clone()]
    layer.zero_grad()
    z = 16 * torch.sigmoid(x @ gate.weight.T + gate.bias)  # (B, M, h)
    assert ((z > 0.5) & (z < 15)).any()
    ref = loop_reference(layer, x, z)
    penalty = 0.5 * z.sum() / z.numel()
    ((ref * g).sum() + penalty).backward()
    assert torch.allclose(layer(x), ref, atol=1e-5)
    assert torch.isclose(layer.span_penalty(), penalty)
    for a, b in zip(got, (gate.weight.grad, gate.bias.grad), strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def test_mix_init_random():
    """mix_init="random": P_l and P_w start with N(0, 1/h_in) entries (no head structure, the
    logits' scale kept on average), not the identity; the default is the identity exactly."""
    torch.manual_seed(0)
    th = variants.build("talking-heads", d_model=64, n_heads=32, span=S, mix_init="random")
    for P in (th.mixing.P_l.P, th.mixing.P_w.P):
        assert abs(P.mean().item()) < 0.03 and P.var().item() == pytest.approx(1 / 32, rel=0.15)
        assert P.diagonal().abs().mean() < 0.5
    default = build("talking-heads").mixing
    assert torch.equal(default.P_l.P, torch.eye(H)) and torch.equal(default.P_w.P, torch.eye(H))


def test_layer_describes_itself():
    """Tools read what a layer is and costs from the layer: policies, heads, widths, learned
    spans, and multiply-adds per query at s keys (4 D^2 + 2 D s for multi-head)."""
    th = variants.build("talking-heads", d_model=D, n_heads=4, span=S, h=6, h_v=3, d_k=8,
                        d_v=12)
    assert th.describe() == {"span_policy": "fixed", "mixing": "both", "P_l": True, "P_w": True,
                             "h_k": 4, "h": 6, "h_v": 3, "d_k": 8, "d_v": 12, "S": S,
                             "learned_spans": False,
                             "options": {"width": None, "chunk": None, "mix_noise": 0.0,
                                         "mix_init": "identity", "banded": False}}
    assert th.flops(10) == 2 * D * (32 + 36) + 10 * (32 + 36 + 4 * 6 + 6 * 3)
    fixed, gbma, ad = build("fixed"), build("gbma"), build("adaptive")
    assert fixed.flops(S) == 4 * D * D + 2 * D * S
    assert fixed.flops(S, position=True) - fixed.flops(S) == D * S
    assert gbma.describe()["d_k"] == gbma.describe()["d_v"] == D
    assert ad.describe()["learned_spans"] and ad.describe()["mixing"] == "none"


def test_set_spans():
    """set_spans takes effective spans (z + R, what spans() reports), per head or one value;
    a dynamic span becomes that span at every position; a fixed span refuses."""
    ad = variants.build("adaptive", d_model=D, n_heads=H, span=256, ramp=8.0)
    ad.set_spans(torch.tensor([20.0, 40.0, 60.0, 100.0]))
    assert torch.allclose(ad.spans(), torch.tensor([20.0, 40.0, 60.0, 100.0]))
    assert ad.span_policy.window == 128
    dyn = variants.build("dynamic-span", d_model=D, n_heads=H, span=256, ramp=8.0)
    dyn.set_spans(100.0)
    dyn(torch.randn(1, 10, D))
    assert torch.allclose(dyn.span_trace(), torch.full((1, H, 10), 100.0), atol=1e-3)
    with pytest.raises(ValueError, match="span_policy='fixed'"):
        build("fixed").set_spans(10.0)


class HardWindow(variants.span.SpanPolicy):
    """A mask-only span policy: head i keeps the distances x < keep[i] (all heads `keep` by
    default); it says nothing of its spans, window or cache."""

    @dataclass(frozen=True)
    class Options:
        keep: tuple[int, ...] = variants.option((8,), "distances kept, per head or for all")

    def __init__(self, shape: variants.Shape, opts: Options) -> None:  # any parameter names
        super().__init__(shape, opts)
        self.register_buffer("keep", torch.tensor(opts.keep).view(-1, 1, 1), persistent=False)

    def mask(self, dist: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return (dist < self.keep).to(dist.dtype)  # (h | 1, 1, W)


def test_a_mask_only_policy_costs_what_it_computes():
    """Spans, window, cache and FLOPs are read off the mask: a hard window of 8 under S = 64 is
    the fixed span S = 8, output for output (cache included) and cost for cost; per-head windows
    give per-head spans, and the layer computes the widest."""
    hard = variants.build("fixed", d_model=D, n_heads=H, span=64, span_policy=HardWindow)
    fixed = variants.build("fixed", d_model=D, n_heads=H, span=8)
    fixed.load_state_dict({k: v[:8] if k.endswith("key_pe") else v
                           for k, v in hard.state_dict().items()})
    assert hard.spans().tolist() == [8.0] * H and hard.window == 8 and hard.cache_size == 7
    assert (hard.cache_size, hard.flops(hard.window)) == (fixed.cache_size, fixed.flops(8))
    x, c = torch.randn(2, 20, D), torch.randn(2, 7, D)
    assert torch.allclose(hard(x, c), fixed(x, c), atol=1e-6)
    assert torch.allclose(hard(x), fixed(x), atol=1e-6)
    per_head = variants.build("fixed", d_model=D, n_heads=H, span=64, span_policy=HardWindow,
                              keep=(2, 5, 8, 3))
    assert per_head.spans().tolist() == [2.0, 5.0, 8.0, 3.0] and per_head.window == 8

    class LearnedWindow(HardWindow):  # the same mask, its width a parameter
        def __init__(self, shape: variants.Shape, opts: HardWindow.Options) -> None:
            super().__init__(shape, opts)
            self.keep = torch.nn.Parameter(self.keep.float())

    moving = variants.build("fixed", d_model=D, n_heads=H, span=64, span_policy=LearnedWindow)
    assert moving.window == 8 and moving.cache_size == 63  # it may widen: every state kept
    with torch.no_grad():
        moving.span_policy.keep.fill_(4.5)  # a step moves it: read again after the step
    assert moving.window == 8
    moving.clamp_()
    assert moving.spans().tolist() == [5.0] * H and moving.window == 5


def test_spans_that_disagree_with_the_mask_are_refused_naming_both(clean):
    """A plugin's spans() must say what its mask keeps: one that says more is refused when it is
    registered, with both; the built-in adaptive span's z + R agrees with its soft mask at any z;
    a mask that depends on the input must say its spans itself (spans() and trace())."""

    class Claims16(HardWindow):
        def spans(self) -> torch.Tensor:
            return torch.full((self.n_heads,), 16.0)

    with pytest.raises(ValueError, match=r"span_policy=Claims16: its mask keeps per head the "
                       r"distances x < 8, 8 .*but its spans\(\) say 16, 16"):
        variants.register("claims-16", span_policy=Claims16)
    assert "claims-16" not in variants.names()
    variants.register("hard-8", span_policy=HardWindow)  # spans read off the mask: it agrees
    ad = variants.build("adaptive", d_model=D, n_heads=H, span=256, ramp=8.0).span_policy
    for spans in ([8.0, 100.5, 256.0, 31.25], torch.rand(H) * 300):
        ad.set_spans(torch.as_tensor(spans))
        variants.span.check(ad)

    class FromInput(HardWindow):
        def prepare(self, x: torch.Tensor) -> int:
            self.keep = x.new_full((1, 1, 1), 4.0)
            return self.window

    with pytest.raises(ValueError, match=r"span_policy=FromInput: its mask depends on the "
                       r"input .*add spans\(\) .* and trace\(\)"):
        variants.register("from-input", span_policy=FromInput)


def test_policies_passed_as_classes():
    """A span or mixing policy class builds with the layer's options its Options class
    declares: AdaptiveSpan + MultiHead is the `adaptive` preset; anything else is refused by
    name."""
    from variants.mixing import MultiHead
    from variants.span import AdaptiveSpan

    torch.manual_seed(0)
    by_class = build("fixed", span_policy=AdaptiveSpan, mixing=MultiHead, ramp=4.0)
    by_name = build("adaptive", ramp=4.0)
    by_name.load_state_dict(by_class.state_dict())
    set_z(by_class, torch.rand(H))
    set_z(by_name, by_class.span_policy.z_prime.detach().flatten())
    x = torch.randn(2, 16, D)
    assert torch.allclose(by_class(x), by_name(x), atol=1e-6)
    assert by_class.describe() == by_name.describe()
    with pytest.raises(ValueError, match="mixing=.*: expected .*subclass of MixingPolicy"):
        build("fixed", mixing=torch.nn.Linear)


def test_the_mixing_class_says_which_heads_may_differ():
    """check_heads asks the mixing class, not its registered name: a plugin's subclass of
    MultiHead (no projection) is refused h != h_k as `none` is; a talking-heads subclass with
    both projections maps h_k -> h -> h_v as `both` does."""
    from variants.mixing import DynamicTalkingHeads, MultiHead

    class Plain(MultiHead):
        pass

    class Dyn(DynamicTalkingHeads):
        pass

    for mixing in ("none", Plain):
        with pytest.raises(ValueError, match="h=2: expected h == h_k=4"):
            build("fixed", mixing=mixing, h=2)
        with pytest.raises(ValueError, match="h_v=2: expected h_v == h=4"):
            build("fixed", mixing=mixing, h_v=2)
    for mixing in ("dynamic-projections", Dyn):
        layer = build("fixed", mixing=mixing, h_k=2, h=8, h_v=2)
        assert (layer.mixing.h_k, layer.mixing.h, layer.mixing.h_v) == (2, 8, 2)


def test_a_variant_owns_its_options():
    """Each option goes to the part whose `Options` class declares it, with its default written
    there once; `options(name)` is what the parts take (an override of a policy changes it); an
    option no part takes is refused by name; describe() reports every option as resolved."""
    assert "span_loss" in variants.options("adaptive")
    assert "ramp" in variants.options("dynamic-span")
    assert not {"ramp", "span_loss", "mix_init"} & set(variants.options("fixed"))
    assert "mix_init" in variants.options("adaptive", mixing="both")
    assert variants.options("talking-heads")["mixing"].default == "both"
    layer = build("adaptive", ramp=5.0, mixing="logits", mix_noise=0.1)
    assert layer.span_policy.ramp == 5.0 and layer.mixing.P_l is not None
    assert layer.describe()["options"] == {"width": None, "chunk": None, "z_init": 0.0,
                                           "ramp": 5.0, "span_loss": 2e-6, "trim": True,
                                           "trim_step": 64, "mix_noise": 0.1,
                                           "mix_init": "identity", "banded": False}
    with pytest.raises(ValueError, match=r"span_loss=1e-06: unknown option of variant 'fixed'"):
        build("fixed", span_loss=1e-6)
    with pytest.raises(ValueError, match="already registered"):
        variants.register("fixed")
    with pytest.raises(ValueError, match=r"\['tau'\] are not options"):
        variants.register("nope", tau=3)


def test_a_plugin_of_the_earlier_api_is_refused_with_the_change_to_make(clean):
    """A policy whose constructor takes its options as keyword-only parameters (the earlier
    API), or whose Options is not a dataclass, is refused when it is registered, before
    anything is built, with the Options class to write, every option it declares kept; one
    declaring `Options` and taking (shape, options), whatever it calls them, builds, its options
    typed and reported like the built-in ones."""
    from dataclasses import dataclass

    from variants import Shape, option
    from variants.mixing import MultiHead
    from variants.span import SpanPolicy

    class OldSpan(SpanPolicy):
        def __init__(self, n_heads: int, span: int, *, tau_init: float = 20.0) -> None:
            super().__init__(Shape(1, span, n_heads, n_heads, n_heads, 1, 1), None)

    class OldMixing(MultiHead):
        def __init__(self, shape: Shape, *, scale: float = 1.0) -> None:
            super().__init__(shape, MultiHead.Options())

    with pytest.raises(ValueError, match=r"(?s)span_policy=OldSpan: its constructor is "
                       r"\(n_heads, span, tau_init\).*class Options:.*tau_init: float = "
                       r"option\(20.0, .*def __init__\(self, shape: Shape, options: Options\)"):
        variants.register("old-span", span_policy=OldSpan)
    with pytest.raises(ValueError, match=r"(?s)mixing=OldMixing.*scale: float = option\(1.0"):
        variants.register("old-mixing", mixing=OldMixing)

    class HalfWay(SpanPolicy):  # an Options dataclass, and one option still keyword-only
        @dataclass(frozen=True)
        class Options:
            tau_init: float = option(20.0, "decay length")

        def __init__(self, shape: Shape, options: Options, *, floor: float = 0.1) -> None:
            super().__init__(shape, options)

    with pytest.raises(ValueError, match=r"(?s)span_policy=HalfWay: .*class Options:[^\n]*\n *"
                       r"tau_init: float = option\(20.0, 'decay length'\)\n.*"
                       r"floor: float = option\(0.1, "):
        variants.register("half-way", span_policy=HalfWay)

    class Plain(MultiHead):  # its Options a plain class: not the API, whatever its fields
        class Options:
            scale: float = 1.0

    with pytest.raises(ValueError, match=r"(?s)mixing=Plain: .*its Options is not a dataclass"
                       r".*class Options\(MultiHead.Options\):.*scale: float = option\(1.0"):
        variants.register("plain", mixing=Plain)
    assert not {"old-span", "old-mixing", "half-way", "plain"} & set(variants.names())

    class New(MultiHead):
        @dataclass(frozen=True)
        class Options(MultiHead.Options):
            scale: float = option(1.0, "a scale")

        def __init__(self, s: Shape, opts: Options) -> None:  # the API, not parameter names
            super().__init__(s, opts)
            self.scale = opts.scale

    variants.register("new-mixing", mixing=New, scale=2.0)
    assert build("new-mixing").mixing.scale == 2.0
    declared = variants.options("new-mixing")
    assert declared["scale"].type is float and declared["scale"].help == "a scale"
    assert declared["scale"].default == 2.0 and declared["banded"].owner == "MultiHead.Options"
    assert build("new-mixing", scale=3.0).describe()["options"]["scale"] == 3.0
