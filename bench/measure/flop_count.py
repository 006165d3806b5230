"""Counted against analytic FLOPs for every registered variant: fvcore's count of one executed
prediction step next to the paper's #FLOPS convention (plus the q.p term), at the tiny preset
and at the paper's small model."""

import torch

import variants
from bench.config import PRESETS, ModelConfig
from bench.model import TransformerLM
from bench.model.cost import analytic_flops, executed_flops, set_spans
from bench.model.count import counted_flops

TINY, SMALL = PRESETS["tiny"]["model"], PRESETS["small"]["model"]
CONFIGS = {  # name: (d_model, n_layers, n_heads, d_ff, S for fixed spans, S for learned spans,
    #                  learned effective span z + R)
    "tiny": (*(TINY[k] for k in ("d_model", "n_layers", "n_heads", "d_ff", "span")),
             TINY["span"], None),
    # mean span 314, as in AS Table 1
    "paper small": (*(SMALL[k] for k in ("d_model", "n_layers", "n_heads", "d_ff")), 512,
                    SMALL["span"], 314),
}


def compare(config: str, variant: str) -> dict:
    """One row of the counted-vs-analytic table."""
    D, L, H, F, s_fixed, s_learned, spans = CONFIGS[config]
    learned = variants.spec(variant, D, H, s_fixed).learned_spans
    S = s_learned if learned else s_fixed
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(variant=variant, d_model=D, n_layers=L, n_heads=H, d_ff=F,
                                      span=S), 256)
    spans = torch.as_tensor(spans if spans is not None else torch.linspace(32, 32 + S / 2, H),
                            dtype=torch.float)
    if learned:
        set_spans(model, spans)
    c = counted_flops(model)
    max_ = analytic_flops(model, "max")
    executed = executed_flops(model, "max")
    windows = sorted({b.attn.window for b in model.blocks})
    return {"config": config, "variant": variant, "S": S,
            "window": f"{windows[0]}-{windows[-1]}" if len(windows) > 1 else windows[0],
            "params": sum(p.numel() for p in model.parameters()),
            "analytic full": analytic_flops(model, "full"),
            "analytic mean": analytic_flops(model, spans=[spans.mean().item()] * L) if learned
            else analytic_flops(model, "mean"), "analytic max": max_,
            "output + q.p": executed - max_, "executed": c["flops_counted_executed"],
            "cache re-proj": c["cache_reprojection"], "counted": c["flops_counted"],
            "counted/(max + output + q.p) - 1 (%)": 100 * (c["flops_counted"] / executed - 1),
            "skipped": ",".join(c["skipped"]) or "-"}
