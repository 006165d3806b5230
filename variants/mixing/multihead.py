"""Multi-head attention projections (docs/variants.md); talking heads, which adds the learned
head-mixing maps P_l and P_w to it, is `talking.TalkingHeads`."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.declare import option

from .base import Heads, MixingPolicy, Shape


def _uniform(*shape: int, bound: float) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape).uniform_(-bound, bound))


class MultiHead(MixingPolicy):
    """Q, K (h_k heads of d_k), V (h_v heads of d_v), O; P_l: h_k -> h, P_w: h -> h_v.

    Relative positions (Shaw et al.): s_tr = q_t . (k_r + p_{t-r}) / sqrt(d_k), with one table
    `key_pe` (S, d_k) shared by all heads, N(0, 1) as in the paper: the caller's table when given
    (one for every layer of a model), else the layer's own.
    The attention layer calls `project` once per block, P_l and P_w per query chunk. Option
    `banded`: q.k and w.v computed over each query's window only (`variants.attention`), which
    pays where heads are 1 wide (d_k = d_v = 1); the same function to float rounding.
    """

    @dataclass(frozen=True)
    class Options:
        banded: bool = option(False, "q.k and w.v over each query's window only (faster where "
                              "heads are 1 wide; equal to float rounding)")

    def __init__(self, shape: Shape, options: Options) -> None:
        super().__init__(shape, options)
        d_model, span, h_k, h_v, d_k, d_v = (shape.d_model, shape.span, shape.h_k, shape.h_v,
                                             shape.d_k, shape.d_v)
        self.d_model, self.h_k, self.h, self.h_v = d_model, h_k, shape.h, h_v
        self.d_k, self.d_v, self.banded = d_k, d_v, options.banded
        b = 1 / math.sqrt(d_model)
        self.W_q = _uniform(d_model, h_k * d_k, bound=b)
        self.W_k = _uniform(d_model, h_k * d_k, bound=b)
        self.W_v = _uniform(d_model, h_v * d_v, bound=b)
        self.W_o = _uniform(h_v * d_v, d_model, bound=b)
        self.key_pe = shape.key_pe if shape.key_pe is not None else nn.Parameter(
            torch.randn(span, d_k))
        self.P_l: nn.Module | None = None  # talking heads' maps (`talking.HeadMix`)
        self.P_w: nn.Module | None = None

    @property
    def name(self) -> str:
        """none, logits (P_l), weights (P_w) or both (talking heads)."""
        return {(False, False): "none", (True, False): "logits", (False, True): "weights",
                (True, True): "both"}[self.P_l is not None, self.P_w is not None]

    def matrices(self) -> dict[str, Tensor]:
        return {k: m.P for k, m in (("P_l", self.P_l), ("P_w", self.P_w)) if m is not None}

    def flops(self, s: float) -> float:
        """Multiply-adds per query attending over s keys, in the adaptive-span paper's #FLOPS
        convention: projections 2 D (h_k d_k + h_v d_v) (4 D^2 by default), q.k and w.v
        s (h_k d_k + h_v d_v) (its 2 D s), talking-heads maps s (h_k h + h h_v)."""
        qk, vo = self.h_k * self.d_k, self.h_v * self.d_v
        mixing = (self.h_k * self.h if self.P_l is not None else 0) + (
            self.h * self.h_v if self.P_w is not None else 0)
        return 2 * self.d_model * (qk + vo) + s * (qk + vo + mixing)

    def position_flops(self, s: float) -> float:
        """The relative-position term q.p over s keys (h_k d_k s): executed, not in #FLOPS."""
        return s * self.h_k * self.d_k

    def project(self, x: Tensor, mem: Tensor) -> Heads:
        """x (B, M, D), mem (B, K, D) -> q / sqrt(d_k) (B, h_k, M, d_k), keys (B, h_k, K, d_k)
        and values (B, h_v, K, d_v), contiguous: every query chunk slices its keys, and a
        strided slice would be copied by each chunk's matmuls. q is also the position term's."""
        B, M, _ = x.shape
        K = mem.size(1)
        q = (x @ (self.W_q / math.sqrt(self.d_k))).view(B, M, self.h_k, self.d_k).transpose(1, 2)
        k = (mem @ self.W_k).view(B, K, self.h_k, self.d_k).transpose(1, 2).contiguous()
        v = (mem @ self.W_v).view(B, K, self.h_v, self.d_v).transpose(1, 2).contiguous()
        return Heads(q, k, v, q)

    def pre_softmax(self, J: Tensor, heads: Heads, rows: slice, keys: slice) -> Tensor:
        """P_l: (B, h_k, c, W) -> (B, h, c, W), where the policy has it."""
        return J if self.P_l is None else self.P_l(J)

    def post_softmax(self, w: Tensor, heads: Heads, rows: slice, keys: slice) -> Tensor:
        """P_w: (B, h, c, W) -> (B, h_v, c, W), where the policy has it."""
        return w if self.P_w is None else self.P_w(w)

    def output(self, o: Tensor) -> Tensor:
        """(B, h_v, M, d_v) -> (B, M, D)."""
        B, _, M, _ = o.shape
        return o.transpose(1, 2).reshape(B, M, -1) @ self.W_o
