"""Multiply-adds per predicted token (the adaptive-span paper's "#FLOPS"), SPEC section 6.

Analytic, per layer: projections 2 D (h_k d_k + h_v d_v) (= 4 D^2 by default), feed-forward
2 D F, and per attended key s: q.k (h_k d_k), the relative-position term q.p (h_k d_k) and
weights.v (h_v d_v), plus talking-heads mixing s (h_k h + h h_v); GBMA: 2 D^2 h + 2 D h s (+ its
position term D d h + d h s). The output layer adds D V. The SPEC's 2 D s counts q.k and w.v;
the executed graph also computes q.p, so it is counted here.

Counted: fvcore on one step of prediction (one new token, every layer's cache full), with exact
handles for the contractions. The model caches hidden states (Transformer-XL), so that step also
re-projects the W - 1 cached states through W_k and W_v; a key/value cache (and the paper's
count) projects each token once. `counted_flops` reports both: the executed graph, and the
graph minus that re-projection, which is what the analytic formula counts.

python -m bench.flops   prints the counted-vs-analytic table for every variant.
"""

import argparse
import math
import re
import sys
import warnings
from collections import Counter
from math import prod
from typing import Literal

import pandas as pd
import torch
from fvcore.nn import FlopCountAnalysis
from fvcore.nn.jit_handles import get_shape
from torch import nn

import variants
from bench import plugins
from bench.model import TransformerLM
from variants.attention import Attention
from variants.mixing import GBMA, DynamicTalkingHeads

Span = Literal["full", "mean", "max"]

# Zero multiply-adds by design (the paper's #FLOPS counts contractions): element-wise arithmetic,
# softmax, LayerNorm (fvcore's default would add 5 D per norm), the embedding lookup and strided
# views. Registered, so that anything fvcore still reports as skipped is an op nobody decided on.
ZERO_OPS = ("aten::add", "aten::sub", "aten::mul", "aten::div", "aten::sum", "aten::sigmoid",
            "aten::softmax", "aten::layer_norm", "aten::embedding", "aten::as_strided",
            "aten::flip", "aten::numpy_T")
MATMUL_LIKE = re.compile(r"mm|matmul|linear|einsum|conv|attention|dot|mv$|outer|bilinear")


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
    if isinstance(mix, DynamicTalkingHeads):
        mixing += mix.dynamic_macs(D, s)
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


def _no_macs(inputs: list, outputs: list) -> int:
    return 0


CONTRACTIONS = ("aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::linear",
                "aten::einsum")


class StepHandles:
    """Exact fvcore handles for the contractions of one traced prediction step (batch 1, one new
    token), each split by role into Counter keys:

    - projection: a weight (any value computed from parameters alone: W_q / sqrt(d_k), fc1, P)
      applied to the features (last dim) of an activation laid out (..., rows, features);
    - cache_reprojection: the rows of such a projection beyond the first: in a one-token step
      those are cached states projected again (K and V of `mem`);
    - attention: every other contraction (q.k, q.p, the talking-heads maps, w.v, GBMA's X P Mem).

    The first `n_inputs` graph inputs are the model's (token ids, caches); the rest are
    parameters, so "computed from parameters alone" is decided by walking the graph back.
    """

    def __init__(self, n_inputs: int) -> None:
        self.n_inputs, self.memo = n_inputs, {}

    def weight(self, v: torch._C.Value) -> bool:
        """v depends on parameters only (iterative DFS; memoised over the whole graph)."""
        stack = [v]
        while stack:
            u = stack[-1]
            node = u.node()
            if node.kind() == "prim::Param":
                self.memo[u.unique()] = u.offset() >= self.n_inputs
            else:
                todo = [i for i in node.inputs() if i.unique() not in self.memo]
                if todo:
                    stack.extend(todo)
                    continue
                self.memo[u.unique()] = all(self.memo[i.unique()] for i in node.inputs())
            stack.pop()
        return self.memo[v.unique()]

    @staticmethod
    def _split(macs: int, rows: int) -> Counter:
        per = macs // rows
        return Counter({"projection": per, "cache_reprojection": macs - per})

    def matmul(self, inputs: list, outputs: list) -> Counter:
        """matmul / mm / bmm: |output| x contracted dim (broadcasting included)."""
        a, b = inputs[:2]
        sa = get_shape(a)
        macs = prod(get_shape(outputs[0])) * sa[-1]
        if self.weight(b) and not self.weight(a) and len(sa) <= 3:  # (B, rows, features) @ W
            return self._split(macs, sa[-2] if len(sa) > 1 else 1)
        return Counter({"attention": macs})

    def addmm(self, inputs: list, outputs: list) -> Counter:
        return self.matmul(inputs[1:3], outputs)  # addmm(bias, a, b, beta, alpha)

    def linear(self, inputs: list, outputs: list) -> Counter:
        """linear(x (..., rows, in), W (out, in))."""
        sx = get_shape(inputs[0])
        return self._split(prod(get_shape(outputs[0])) * sx[-1], sx[-2] if len(sx) > 1 else 1)

    def einsum(self, inputs: list, outputs: list) -> Counter:
        """Two operands, exactly: the product of every index size (fvcore's default rounds it to
        four significant digits). A projection when a weight contracts the other operand's last
        index; its rows are the index before that."""
        lhs = inputs[0].toIValue().replace(" ", "").split("->")[0].split(",")
        ops = list(inputs[1].node().inputs())
        if len(ops) != 2:
            raise NotImplementedError(f"einsum with {len(ops)} operands: count it by its path")
        size = {c: n for t, v in zip(lhs, ops, strict=True)
                for c, n in zip(t, get_shape(v), strict=True)}
        macs = prod(size.values())
        for x, w, tx, tw in ((ops[0], ops[1], *lhs), (ops[1], ops[0], *lhs[::-1])):
            if self.weight(w) and not self.weight(x) and tx[-1] in tw:
                rows = size[tx[-2]] if len(tx) > 1 and tx[-2] not in tw else 1
                return self._split(macs, rows)
        return Counter({"attention": macs})

    def handles(self) -> dict:
        return {"aten::matmul": self.matmul, "aten::mm": self.matmul, "aten::bmm": self.matmul,
                "aten::addmm": self.addmm, "aten::linear": self.linear,
                "aten::einsum": self.einsum}


def _step_inputs(model: nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One new token and, for every layer, a full cache of `cache_size` hidden states."""
    device = model.emb.weight.device
    idx = torch.zeros(1, 1, dtype=torch.long, device=device)
    D = model.emb.embedding_dim
    return idx, [torch.zeros(1, b.attn.cache_size, D, device=device) for b in model.blocks]


@torch.no_grad()
def counted_flops(model: nn.Module) -> dict:
    """fvcore count of one prediction step of a TransformerLM (trimmed windows, as executed).

    Returns flops_counted_executed (the raw graph), its split into attention (everything that
    scales with the window: q.k, q.p, talking-heads maps, w.v), projection (per-token: Q, K, V, O,
    feed-forward, output, span gates, GBMA's P and Q) and cache_reprojection (K and V of the W - 1
    cached states, again), flops_counted = executed - cache_reprojection (comparable with
    `analytic_flops(model, "max")`), and `skipped`: ops fvcore saw but counted nothing for.
    """
    was_training = model.training
    model.eval()
    idx, cache = _step_inputs(model)
    fca = FlopCountAnalysis(model, (idx, cache))
    fca.set_op_handle(**StepHandles(1 + len(cache)).handles(), **dict.fromkeys(ZERO_OPS, _no_macs))
    fca.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit deprecation notices on torch >= 2.9
        parts = fca.by_operator()
    model.train(was_training)
    skipped = dict(fca.unsupported_ops())
    if bad := sorted(op for op in skipped if MATMUL_LIKE.search(op)):
        raise RuntimeError(f"fvcore skipped matmul-like ops {bad}: add a handle to StepHandles")
    executed = sum(parts.values())
    return {"flops_counted": executed - parts["cache_reprojection"],
            "flops_counted_executed": executed, "attention": parts["attention"],
            "projection": parts["projection"], "cache_reprojection": parts["cache_reprojection"],
            "skipped": skipped}


def flops_report(model: nn.Module) -> dict:
    """Per-run cost: params (total, non-embedding), counted FLOPs, analytic FLOPs at full S, at
    the mean learned span (the paper's estimate) and at the layer-max window (what runs)."""
    counted = counted_flops(model)  # first: a dynamic span's window is that of this step
    return {"params": sum(p.numel() for p in model.parameters()),
            "params_non_embedding": sum(p.numel() for n, p in model.named_parameters()
                                        if not n.startswith(("emb.", "head."))),
            "flops_counted": counted["flops_counted"],
            "flops_counted_executed": counted["flops_counted_executed"],
            **{f"flops_{w}": analytic_flops(model, w) for w in ("full", "mean", "max")}}


# ---- CLI: counted vs analytic for every variant

CONFIGS = {  # name: (d_model, n_layers, n_heads, d_ff, S for fixed spans, S for learned spans, z)
    "tiny": (128, 4, 4, 512, 256, 256, None),
    "paper small": (512, 12, 8, 2048, 512, 8192, 314 - 32),  # mean span 314, as in AS Table 1
}


@torch.no_grad()
def set_spans(model: nn.Module, z: torch.Tensor | float) -> None:
    """Learned spans set directly: adaptive z_i (per head, or one value), dynamic z_t = z (a
    constant gate); the windows are then trimmed by the model itself."""
    for b in model.blocks:
        pol = b.attn.span_policy
        if hasattr(pol, "z_prime"):
            pol.z_prime.copy_(torch.as_tensor(z / pol.S).view(-1, 1, 1).expand_as(pol.z_prime))
        elif hasattr(pol, "gate"):
            zbar = torch.as_tensor(z, dtype=torch.float).mean().item()
            zbar = min(max(zbar, 1e-3), pol.S - 1e-3)  # a finite gate bias at z = 0 or S
            pol.gate.weight.zero_()
            pol.gate.bias.fill_(math.log(zbar / (pol.S - zbar)))
        b.attn.clamp_()


def compare(config: str, variant: str) -> dict:
    """One row of the counted-vs-analytic table."""
    D, L, H, F, s_fixed, s_learned, z = CONFIGS[config]
    learned = variant in ("adaptive", "dynamic")
    S = s_learned if learned else s_fixed
    torch.manual_seed(0)
    model = TransformerLM(256, D, L, H, F, span=S, variant=variant)
    if learned:
        set_spans(model, z if z is not None else torch.linspace(0, S / 2, H))
    c = counted_flops(model)
    max_ = analytic_flops(model, "max")
    windows = sorted({b.attn.span_policy.window for b in model.blocks})
    return {"config": config, "variant": variant, "S": S,
            "window": f"{windows[0]}-{windows[-1]}" if len(windows) > 1 else windows[0],
            "params": sum(p.numel() for p in model.parameters()),
            "analytic full": analytic_flops(model, "full"),
            "analytic mean": analytic_flops(model, "mean"), "analytic max": max_,
            "executed": c["flops_counted_executed"], "cache re-proj": c["cache_reprojection"],
            "counted": c["flops_counted"],
            "counted/max - 1 (%)": 100 * (c["flops_counted"] / max_ - 1),
            "skipped": ",".join(c["skipped"]) or "-"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.flops", description=__doc__.split("\n")[0])
    p.add_argument("--config", choices=sorted(CONFIGS), action="append",
                   help="repeatable; default: all")
    args = p.parse_args(argv)
    try:
        plugins.load()
    except plugins.PluginError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows = [compare(c, v) for c in args.config or CONFIGS for v in variants.names()]
    df = pd.DataFrame(rows)
    err = df.pop("counted/max - 1 (%)")
    table = df.map(lambda v: f"{v:,.0f}" if isinstance(v, float | int) else v)
    table.insert(len(df.columns) - 1, "counted/max - 1 (%)", err.map("{:+.4f}".format))
    align = ["left"] * 2 + ["right"] * (len(table.columns) - 3) + ["left"]
    print(table.to_markdown(index=False, disable_numparse=True, colalign=align))
    worst = err.abs().max()
    print(f"\nmultiply-adds per predicted token; worst |counted/analytic - 1| = {worst:.4f}%")
    return 0 if worst < 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
