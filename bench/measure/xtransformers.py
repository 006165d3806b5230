"""Talking heads against x-transformers: attnbench's `talking-heads` layer and x-transformers'
`Attention` with pre- and post-softmax talking heads, one layer each, timed side by side in one
process on the CPU on the same block x (B, M, D): forward and backward (a fixed random gradient of
the output), in fp32 or bf16 autocast, interleaved over rounds (medians).

The same work: ours with span S = M and no cache, so every query attends to itself and all the
queries before it, as x-transformers' causal mask lets it; the same heads, head width D / H and no
bias; its random head-mixing maps copied across with W_q, W_k, W_v and W_o, and its
relative-position table `key_pe` zeroed (x-transformers has none), so that the two compute the
same function: checked before anything is timed (the largest difference of the outputs and of
the input gradients, fp32), and nothing is timed when they differ by more than TOLERANCE.

What ours still computes beyond that is timed on its own, at the layer's shapes, query chunk by
query chunk as its forward runs (`extra_work`): the relative-position term q.p, the banding
(each chunk's logits copied out of its c x (c + W - 1) keys, its weights put back, and the c - 1
keys per query beyond x-transformers' M x M square in q.k and w.v) and the padding (W_k and W_v
of the W - 1 zero rows a block without a cache is padded with). Each piece is timed alone and
subtracted from ours round by round: an estimate of ours without that work, not a layer that
runs.

x-transformers is an optional extra (`pip install -e '.[anchors]'`), imported when a measurement
asks for it, never copied.
"""

import importlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from bench import provenance
from bench.training import precision
from variants import Attention, build
from variants.attention import band, unband

INSTALL = "pip install -e '.[anchors]' -c constraints.txt"
TOLERANCE = 1e-5  # largest difference (fp32) of outputs and input gradients that still agrees
XT, OURS, MINUS = "x-transformers", "attnbench", "attnbench - extra"
CPU = torch.device("cpu")
EXTRA = ("extra: position", "extra: banding", "extra: padding")


class THLayerError(RuntimeError):
    """x-transformers missing, or the two layers not computing the same function."""


def import_xformers() -> ModuleType:
    """The x_transformers module; THLayerError saying how to install it where it is absent."""
    try:
        return importlib.import_module("x_transformers")
    except ImportError as err:
        raise THLayerError(f"x-transformers is not installed ({err}); it is an optional "
                           f"extra: {INSTALL}") from None


def ours(dim: int, heads: int, tokens: int) -> Attention:
    """attnbench's talking-heads layer over blocks of `tokens`: span S = tokens (no cache: the
    whole causal block), random head-mixing maps (so that copying them is checked; the work is
    that of the identity start) and its relative-position table zeroed (the term is computed)."""
    layer = build("talking-heads", d_model=dim, n_heads=heads, span=tokens, mix_init="random")
    with torch.no_grad():
        layer.key_pe.zero_()
    return layer


def theirs(xt: ModuleType, dim: int, heads: int) -> nn.Module:
    """x-transformers' Attention: causal, `heads` heads of dim / heads, P_l before the softmax
    and P_w after it (1 x 1 convolutions over the heads), no bias, no flash (which talking heads
    cannot take), no dropout."""
    return xt.Attention(dim=dim, dim_head=dim // heads, heads=heads, causal=True,
                        pre_talking_heads=True, post_talking_heads=True)


@torch.no_grad()
def copy_weights(src: Attention, dst: nn.Module) -> None:
    """`src`'s weights into x-transformers' `dst`. Ours multiplies x @ W, W (in, out); an
    nn.Linear holds (out, in): W.T. Both split the projections head by head alike and scale q.k
    by 1 / sqrt(d_k) before the maps (ours folds it into q). A map P (h_in, h_out) gives head o
    sum_i P[i, o] a_i; a 1 x 1 Conv2d's weight is (out, in, 1, 1): P.T. x-transformers adds its
    pre-softmax map to the logits (sim + conv(sim)), so its weight is P_l.T - I; the post-softmax
    one replaces the weights: P_w.T."""
    m, attend = src.mixing, dst.attend
    for linear, w in ((dst.to_q, m.W_q), (dst.to_k, m.W_k), (dst.to_v, m.W_v),
                      (dst.to_out, m.W_o)):
        linear.weight.copy_(w.T)
    mats = m.matrices()
    eye = torch.eye(m.h, device=mats["P_l"].device)
    attend.pre_softmax_talking_heads.weight.copy_((mats["P_l"].T - eye)[..., None, None])
    attend.post_softmax_talking_heads.weight.copy_(mats["P_w"].T[..., None, None])


def agreement(a: nn.Module, b: nn.Module, x: Tensor) -> dict[str, float]:
    """Largest absolute difference of the two layers' outputs on x (B, M, D) and of the
    gradients they send back to x for one fixed random output gradient."""
    grad = torch.randn_like(x)
    outs, grads = [], []
    for layer in (a, b):
        xi = x.detach().requires_grad_()
        out = layer(xi)
        out.backward(grad)
        outs.append(out.detach())
        grads.append(xi.grad)
    return {"output": (outs[0] - outs[1]).abs().max().item(),
            "input_grad": (grads[0] - grads[1]).abs().max().item()}


class Work:
    """A forward (-> its outputs) in fp32 or bf16 autocast, and backward from fixed random output
    gradients; `leaves` (what the gradients reach) have theirs cleared first."""

    def __init__(self, forward: Callable[[], list[Tensor]], leaves: list[Tensor],
                 bf16: bool) -> None:
        self.forward, self.leaves, self.bf16 = forward, leaves, bf16
        with precision.autocast(CPU, bf16):
            self.grads = [torch.randn_like(o) for o in forward()]

    def __call__(self) -> float:
        """Seconds of one forward and backward."""
        tic = time.perf_counter()
        for t in self.leaves:
            t.grad = None
        with precision.autocast(CPU, self.bf16):
            outs = self.forward()
        torch.autograd.backward(outs, self.grads)
        return time.perf_counter() - tic

    def flops(self) -> int:
        """FLOPs of one forward and backward as FlopCounterMode counts them: matmuls and
        convolutions, 2 per multiply-add."""
        with FlopCounterMode(display=False) as counter:
            self()
        return counter.get_total_flops()


def layer_work(layer: nn.Module, x: Tensor, bf16: bool) -> Work:
    """The layer's forward and backward on x (B, M, D), which needs a gradient as a layer inside
    a model does."""
    x = x.detach().requires_grad_()
    return Work(lambda: [layer(x)], [*layer.parameters(), x], bf16)


def extra_work(layer: Attention, x: Tensor, bf16: bool) -> dict[str, Work]:
    """The work `layer` (ours, span S = M, no cache) does on x (B, M, D) beyond x-transformers',
    each piece timed alone at the layer's shapes, chunk by chunk as its forward runs (n <= c
    queries a chunk, window W = S), on inputs of the dtypes the layer would feed it:

    position: q.p, each chunk's q (B, h, n, d_k) @ key_pe[:W] reversed (d_k, W) (the add that
      joins it to the banded q.k stands in for the copy `banding` counts, not counted twice);
    banding: each chunk's q.k (B, h, n, n + W - 1) copied out of its band to (B, h, n, W), its
      weights (B, h, n, W) put back (unband), and q.k and w.v over the n + W - 1 - M keys per
      query beyond x-transformers' M;
    padding: the block padded with W - 1 zero rows, and those rows through W_k and W_v.
    """
    B, M, D = x.shape
    m, W = layer.mixing, layer.window
    c = layer.chunk or 64  # Attention.forward's chunk on a CPU

    def leaf(t: Tensor) -> Tensor:
        return t.detach().clone().requires_grad_()

    chunks = []  # per chunk: q, q.k over its keys, weights, the keys and weights beyond M, values
    with torch.no_grad(), precision.autocast(CPU, bf16):
        q = m.query(x)
        k, v = m.memory(F.pad(x, (0, 0, W - 1, 0)))
        for i in range(0, M, c):
            qi = q[:, :, i:i + c]
            n = qi.size(2)
            s = qi @ k[:, :, i:i + n + W - 1].transpose(-1, -2)
            beyond = max(n + W - 1 - M, 0)
            chunks.append(tuple(map(leaf, (qi, s, band(s, W), k[:, :, :beyond],
                                           s[..., :beyond], v[:, :, :beyond]))))
    xe, pad = leaf(x), leaf(x.new_zeros(B, W - 1, D))

    def position() -> list[Tensor]:
        pe = layer.key_pe[:W].flip(0).T
        return [qi @ pe for qi, *_ in chunks]

    def banding() -> list[Tensor]:
        out = []
        for qi, s, w, ke, we, ve in chunks:
            out += [band(s, W).contiguous(), unband(w, s.size(-1))]
            if ke.size(2):
                out += [qi @ ke.transpose(-1, -2), we @ ve]
        return out

    def padding() -> list[Tensor]:
        return [F.pad(xe, (0, 0, W - 1, 0)), *m.memory(pad)]

    return dict(zip(EXTRA, (Work(position, [t[0] for t in chunks] + [layer.key_pe], bf16),
                            Work(banding, [t for ts in chunks for t in ts], bf16),
                            Work(padding, [xe, pad, m.W_k, m.W_v], bf16)), strict=True))


def run(works: dict[str, Work], repeats: int) -> dict[str, list[float]]:
    """Seconds of each work per round: every one once a round, in turn (interleaved), after one
    untimed round."""
    times: dict[str, list[float]] = {name: [] for name in works}
    for r in range(repeats + 1):
        for name, work in works.items():
            seconds = work()
            if r:
                times[name].append(seconds)
    return times


def results(times: dict[str, list[float]], flops: dict[str, int]
            ) -> tuple[list[dict], list[dict]]:
    """One row per work: GFLOP and ms per forward+backward (median over rounds), its share of
    ours' ms (`of_ours`) and, for the layers, x-transformers' ms over its ms (`vs_xt`, >= 1: at
    least as fast); `attnbench - extra` is ours minus the extra pieces (ms: the median of their
    difference round by round; its GFLOP equal x-transformers' when the pieces are all of ours'
    extra matmuls).
    The targets: ours against x-transformers (>= 1.0), and ours without its extra work (no
    target)."""
    minus = [t - sum(times[e][i] for e in EXTRA) for i, t in enumerate(times[OURS])]
    ms = {name: 1e3 * statistics.median(t) for name, t in (*times.items(), (MINUS, minus))}
    flops = flops | {MINUS: flops[OURS] - sum(flops[e] for e in EXTRA)}
    rows = [{"system": name, "gflop": flops[name] / 1e9, "ms": v, "of_ours": v / ms[OURS],
             "vs_xt": ms[XT] / v if name in (XT, OURS, MINUS) else None}
            for name, v in ms.items()]
    targets = [{"target": f"{OURS} / {XT} (speed, forward+backward)",
                "value": ms[XT] / ms[OURS], "threshold": 1.0},
               {"target": f"{OURS} without its extra work / {XT} (speed, estimate)",
                "value": ms[XT] / ms[MINUS], "threshold": None}]
    return rows, [
        t | {"pass": None if t["threshold"] is None else bool(t["value"] >= t["threshold"])}
        for t in targets]


@dataclass(frozen=True)
class Shape:
    """What both layers are timed on: B blocks of M tokens, width D, `heads` heads."""

    batch: int
    tokens: int
    dim: int
    heads: int


def measure(xt: ModuleType, shape: Shape, repeats: int, bf16: bool = False) -> dict:
    """Build both layers from torch.manual_seed(0), copy the weights across, check that they
    agree (THLayerError if not: nothing is timed), count and time them and our extra work, and
    return the setting, the agreement, the rows and the targets (JSON-able)."""
    torch.manual_seed(0)
    a = ours(shape.dim, shape.heads, shape.tokens)
    b = theirs(xt, shape.dim, shape.heads)
    copy_weights(a, b)
    x = torch.randn(shape.batch, shape.tokens, shape.dim)
    agree = agreement(a, b, x)
    if max(agree.values()) > TOLERANCE:
        raise THLayerError(f"the layers disagree (largest difference: output {agree['output']:.3g}"
                           f", input gradient {agree['input_grad']:.3g}; tolerance "
                           f"{TOLERANCE:g}): nothing timed")
    works = {XT: layer_work(b, x, bf16), OURS: layer_work(a, x, bf16),
             **extra_work(a, x, bf16)}
    flops = {name: work.flops() for name, work in works.items()}  # untimed
    rows, targets = results(run(works, repeats), flops)
    return {"setting": setting(a, shape, repeats, bf16),
            "agreement": agree, "rows": rows, "targets": targets}


def setting(layer: Attention, shape: Shape, repeats: int, bf16: bool) -> dict:
    """What was measured, where and how (JSON-able)."""
    return {"cpu": provenance.cpu_name(),
            "cpu_capability": provenance.kernels(CPU)["cpu_capability"],
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "x_transformers": metadata.version("x-transformers"),
            "precision": precision.name(bf16), "batch": shape.batch, "tokens": shape.tokens,
            "dim": shape.dim, "heads": shape.heads, "window": layer.window,
            "chunk": min(layer.chunk or 64, shape.tokens),
            "repeats": repeats, "tolerance": TOLERANCE}


def show(out: dict) -> None:
    """The setting, the agreement, the table and the targets with PASS/FAIL, as text."""
    s, agree = out["setting"], out["agreement"]
    print(f"{s['cpu']} ({s['cpu_capability']} kernels), {s['threads']} torch threads; torch "
          f"{s['torch']}, x-transformers {s['x_transformers']}; {s['precision']}; B "
          f"{s['batch']}, M {s['tokens']}, D {s['dim']}, {s['heads']} heads, window "
          f"{s['window']}, chunk {s['chunk']}; per forward+backward: GFLOP counted by "
          f"FlopCounterMode, ms the median of {s['repeats']} interleaved rounds")
    print(f"agreement (fp32, weights copied, key_pe zeroed): output {agree['output']:.2g}, "
          f"input gradient {agree['input_grad']:.2g} (tolerance {s['tolerance']:g})")
    print(pd.DataFrame(out["rows"]).fillna("").to_markdown(index=False, floatfmt=".4g"))
    print()
    for t in out["targets"]:
        verdict = "(no target)" if t["threshold"] is None else (
            f"(target >= {t['threshold']:g}) {'PASS' if t['pass'] else 'FAIL'}")
        print(f"{t['target']}: {t['value']:.3g} {verdict}")
