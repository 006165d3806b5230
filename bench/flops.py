"""Multiply-adds per predicted token (the adaptive-span paper's "#FLOPS"), SPEC section 6.

Analytic, in the paper's convention (its 4 D^2 + 2 D F + 2 D s per layer and token): each layer
reports its own cost per query at s keys (`Attention.flops`: projections 2 D (h_k d_k + h_v d_v),
q.k and w.v s (h_k d_k + h_v d_v), talking-heads maps s (h_k h + h h_v), span gates D h; GBMA
2 D^2 h + 2 D h s), plus the feed-forward 2 D F; the output layer adds D V. This is `#FLOPS`.
Two costs are real work but not in it, and are reported under their own names: the relative-
position term q.p (`position`: h_k d_k s per query, GBMA D d h + d h s) and the Transformer-XL
re-projection of cached states (`cache_reprojection`).

Counted: fvcore on one step of prediction (one new token, every layer's cache full), with exact
handles for the contractions. The model caches hidden states (Transformer-XL), so that step also
re-projects the W - 1 cached states through W_k and W_v; a key/value cache (and the paper's
count) projects each token once. `counted_flops` reports the executed graph and the graph minus
that re-projection, which equals #FLOPS plus the position term at the executed windows.

python -m bench.flops   prints the counted-vs-analytic table for every variant.
"""

import argparse
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

Span = Literal["full", "mean", "max"]

# Zero multiply-adds by design (the paper's #FLOPS counts contractions): element-wise arithmetic,
# softmax, LayerNorm (fvcore's default would add 5 D per norm), the embedding lookup and strided
# views. Registered, so that anything fvcore still reports as skipped is an op nobody decided on.
ZERO_OPS = ("aten::add", "aten::sub", "aten::mul", "aten::div", "aten::sum", "aten::sigmoid",
            "aten::softmax", "aten::layer_norm", "aten::embedding", "aten::as_strided",
            "aten::flip", "aten::numpy_T")
MATMUL_LIKE = re.compile(r"mm|matmul|linear|einsum|conv|attention|dot|mv$|outer|bilinear")


def layer_span(attn: Attention, which: Span) -> float:
    """Keys per query: S ("full"), mean of the heads' z + R ("mean", the paper's estimate) or the
    layer's computed window ("max", what a batched implementation executes)."""
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


def analytic_flops(model: nn.Module, which: Span = "max", position: bool = False,
                   spans: list[float] | None = None) -> float:
    """#FLOPS: multiply-adds per predicted token of a TransformerLM at its current spans, in the
    paper's convention; `position` adds the q.p term (what the executed graph computes)."""
    p = flops_parts(model, which, spans)
    return p["attention"] + p["feed_forward"] + p["output"] + (p["position"] if position else 0)


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
    cached states, again), flops_counted = executed - cache_reprojection (= #FLOPS plus the q.p
    term at the executed windows, `analytic_flops(model, "max", position=True)`), and `skipped`:
    ops fvcore saw but counted nothing for.
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
    """Per-run cost: params (total, non-embedding); #FLOPS (paper convention) at full S, at the
    mean learned span (the paper's estimate) and at the layer-max window (what runs); the q.p
    position term at those windows; fvcore's executed count and its cache re-projection."""
    counted = counted_flops(model)
    return {"params": sum(p.numel() for p in model.parameters()),
            "params_non_embedding": sum(p.numel() for n, p in model.named_parameters()
                                        if not n.startswith(("emb.", "head."))),
            **{f"flops_{w}": analytic_flops(model, w) for w in ("full", "mean", "max")},
            "flops_position": flops_parts(model, "max")["position"],
            "flops_executed": counted["flops_counted_executed"],
            "flops_cache_reprojection": counted["cache_reprojection"]}


# ---- CLI: counted vs analytic for every variant

CONFIGS = {  # name: (d_model, n_layers, n_heads, d_ff, S for fixed spans, S for learned spans,
    #                  learned effective span z + R)
    "tiny": (128, 4, 4, 512, 256, 256, None),
    "paper small": (512, 12, 8, 2048, 512, 8192, 314),  # mean span 314, as in AS Table 1
}


def set_spans(model: nn.Module, spans: torch.Tensor | float) -> None:
    """Every layer's effective spans (z + R) set as if learned (`Attention.set_spans`): one
    value, or one per head; the layers trim their windows to them."""
    for b in model.blocks:
        b.attn.set_spans(spans)


def compare(config: str, variant: str) -> dict:
    """One row of the counted-vs-analytic table."""
    D, L, H, F, s_fixed, s_learned, spans = CONFIGS[config]
    learned = variants.build(variant, d_model=D, n_heads=H, span=s_learned).describe()[
        "learned_spans"]
    S = s_learned if learned else s_fixed
    torch.manual_seed(0)
    model = TransformerLM(256, D, L, H, F, span=S, variant=variant)
    spans = torch.as_tensor(spans if spans is not None else torch.linspace(32, 32 + S / 2, H),
                            dtype=torch.float)
    if learned:
        set_spans(model, spans)
    c = counted_flops(model)
    max_ = analytic_flops(model, "max")
    executed = analytic_flops(model, "max", position=True)
    windows = sorted({b.attn.window for b in model.blocks})
    return {"config": config, "variant": variant, "S": S,
            "window": f"{windows[0]}-{windows[-1]}" if len(windows) > 1 else windows[0],
            "params": sum(p.numel() for p in model.parameters()),
            "analytic full": analytic_flops(model, "full"),
            "analytic mean": analytic_flops(model, spans=[spans.mean().item()] * L) if learned
            else analytic_flops(model, "mean"), "analytic max": max_,
            "position q.p": executed - max_, "executed": c["flops_counted_executed"],
            "cache re-proj": c["cache_reprojection"], "counted": c["flops_counted"],
            "counted/(max + q.p) - 1 (%)": 100 * (c["flops_counted"] / executed - 1),
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
    err = df.pop("counted/(max + q.p) - 1 (%)")
    table = df.map(lambda v: f"{v:,.0f}" if isinstance(v, float | int) else v)
    table.insert(len(df.columns) - 1, "counted/(max + q.p) - 1 (%)", err.map("{:+.4f}".format))
    align = ["left"] * 2 + ["right"] * (len(table.columns) - 3) + ["left"]
    print(table.to_markdown(index=False, disable_numparse=True, colalign=align))
    worst = err.abs().max()
    print("\nmultiply-adds per predicted token; analytic: the paper's #FLOPS convention (4 D^2 + "
          "2 D F + 2 D s per layer); q.p and the cache re-projection are executed on top; "
          f"worst |counted/(analytic max + q.p) - 1| = {worst:.4f}%")
    return 0 if worst < 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
