"""Paired initialisation: at one seed every variant starts from the same weights wherever names
and shapes agree, seeds differ, and each tensor keeps its own init distribution."""

import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

from bench.config import resolve
from bench.model import create_model
from bench.model.pairing import build_paired

SIZES = {"d_model": 32, "n_layers": 2, "n_heads": 4, "d_ff": 64, "span": 32}
VARIANTS = ("fixed", "talking-heads", "adaptive", "dynamic-span", "gbma")


def params(variant: str, seed: int, paired: bool = True, **model) -> dict[str, torch.Tensor]:
    cfg = resolve({"model": {**SIZES, "variant": variant, **model}})
    build = lambda: create_model(cfg.model, 50)  # noqa: E731
    model = build_paired(build, seed) if paired else build()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_variants_share_every_same_named_tensor_at_one_seed():
    torch.manual_seed(123)  # the global RNG's state does not matter
    base = params("fixed", 0)
    for variant in VARIANTS[1:]:
        torch.manual_seed(hash(variant) % 1000)
        other = params(variant, 0)
        shared = [n for n in other if n in base and other[n].shape == base[n].shape]
        assert len(shared) >= 13, variant  # embedding, FF, norms, output (and Q/K/V/O, key_pe)
        for name in shared:
            assert torch.equal(other[name], base[name]), (variant, name)
    # a grid value that changes only the attention's shapes leaves everything else shared
    eight = params("fixed", 0, n_heads=8)
    assert torch.equal(eight["emb.weight"], base["emb.weight"])
    assert torch.equal(eight["blocks.1.ff.fc2.weight"], base["blocks.1.ff.fc2.weight"])
    assert eight["key_pe"].shape != base["key_pe"].shape  # d_k = D / h: its own draw


def test_seeds_differ_and_tensors_within_a_model_are_independent():
    a, b = params("talking-heads", 0), params("talking-heads", 1)
    random = [n for n in a if not torch.equal(a[n], params("talking-heads", 2)[n])]
    assert {"emb.weight", "blocks.0.ff.fc1.weight", "head.bias"} <= set(random)
    assert all(not torch.equal(a[n], b[n]) for n in random)
    q, k = a["blocks.0.attn.mixing.W_q"], a["blocks.0.attn.mixing.W_k"]  # same call, same shape
    assert not torch.equal(q, k)
    assert torch.equal(a["blocks.0.attn.mixing.P_l.P"], torch.eye(4))  # deterministic: kept


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_tensor_keeps_its_init_distribution(variant):
    """Pooled over seeds, a paired tensor's values are drawn from the same distribution as the
    variant's own build (two-sample KS), and constants stay constant."""
    paired = [params(variant, s) for s in range(4)]
    own = []
    for s in range(4):
        torch.manual_seed(100 + s)
        own.append(params(variant, s, paired=False))
    for name in own[0]:
        x = np.concatenate([p[name].flatten().numpy() for p in paired])
        y = np.concatenate([p[name].flatten().numpy() for p in own])
        if np.ptp(y) == 0:
            assert np.array_equal(x, y), name
            continue
        assert x.std() == pytest.approx(y.std(), rel=0.25), name
        assert np.abs(x).max() <= np.abs(y).max() * 1.5, name
        if len(x) >= 200:
            assert ks_2samp(x, y).pvalue > 1e-3, name
