"""fvcore's executed count of one prediction step against torch's own FlopCounterMode.

bench.flops counts through fvcore (TorchScript's tracer, with exact handles of our own); torch's
FlopCounterMode counts the same step at dispatch, 2 FLOPs per multiply-add. For every variant and
the compositions that exercise other head shapes, the two must agree exactly (after halving), so
that neither a tracer quirk nor a handle of ours can drift from what torch executes.
"""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import variants
from bench.config import ModelConfig
from bench.model import TransformerLM
from bench.model.cost import set_spans
from bench.model.count import _step_inputs, counted_flops

V = 64
SHAPES = {  # (d_model, n_layers, n_heads, d_ff, span, learned spans z: (lo, hi) or None)
    "base": (32, 2, 4, 64, 24, None),
    "trimmed": (32, 2, 4, 64, 300, (5.0, 130.0)),  # windows shorter than S
}
COMPOSITIONS = [  # (variant, attention options): h_k != h != h_v, one-sided mixing, GBMA mixes
    ("talking-heads", dict(h=6, h_v=3, d_k=8, d_v=12)),
    ("weights-only", dict(h_v=2, d_v=24)),
    ("adaptive", dict(mixing="both", h=6, h_v=2, d_v=16)),
    ("dynamic-span", dict(mixing="gbma")),
]
CASES = [(v, {}, s) for s in SHAPES for v in variants.names()] + [
    (v, o, "trimmed") for v, o in COMPOSITIONS]


def build(variant: str, shape: str, attn: dict) -> TransformerLM:
    D, L, H, F, S, z = SHAPES[shape]
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(variant=variant, d_model=D, n_layers=L, n_heads=H, d_ff=F,
                                      span=S, attn=attn), V)
    if z is not None and model.blocks[0].attn.describe()["learned_spans"]:
        set_spans(model, torch.linspace(*z, model.blocks[0].attn.span_policy.n_heads))
    return model.eval()


@pytest.mark.parametrize("variant,attn,shape", CASES,
                         ids=[f"{v}-{s}-{o or ''}" for v, o, s in CASES])
def test_fvcore_equals_flop_counter_mode(variant, attn, shape):
    model = build(variant, shape, attn)
    fvcore = counted_flops(model)["flops_counted_executed"]
    idx, cache = _step_inputs(model)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(idx, cache)
    assert counter.get_total_flops() % 2 == 0
    assert fvcore == counter.get_total_flops() // 2 > 0
