"""General bilinear multihead attention, GBMA (Shazeer et al. 2020, section 5)."""

import math

import torch
from torch import Tensor, nn

from .base import Heads, MixingPolicy, Shape


def _uniform(*shape: int, var: float) -> Tensor:
    """U(-b, b) with variance b^2 / 3 = var."""
    return torch.empty(*shape).uniform_(-1, 1) * math.sqrt(3 * var)


class GBMA(MixingPolicy):
    """Per head a full bilinear form for the logits and a full D x D map for the values.

    L[n,m,h] = sum_ab X[n,a] Mem[m,b] P[a,b,h] + (X P_pos)[n,:,h] . p_{n-m}
    Y[n,c]   = sum_{m,b,h} W[n,m,h] Mem[m,b] Q[b,c,h]
    P and Q hold the paper's 2 D^2 h parameters; P_pos (D, d, h) is the query side of the
    relative position term shared with the other variants, so that a multi-head or talking-heads
    layer folds into GBMA exactly (P = Pq Pk [Pl], P_pos = Pq [Pl], Q = Pv Po [Pw]).
    """

    name = "gbma"
    heads = ("h", "d_k")

    def __init__(self, shape: Shape, options: MixingPolicy.Options) -> None:
        super().__init__(shape, options)
        D, h, d_k = shape.d_model, shape.h, shape.d_k
        self.h_k = self.h_v = h
        self.d_k = self.d_v = D  # a full D x D bilinear form and value map per head
        d_pos = d_k  # the position table's width: the d_k of the multi-head layer it generalises
        # Each entry gets the variance of the product it replaces in a folded multi-head layer
        # (P = Pq Pk / sqrt(d_k), Q = Pv Po, P_pos = Pq / sqrt(d_k), with the projections
        # U(-1/sqrt(D), 1/sqrt(D)), variance 1/(3D)): Var P = 1/(9 D^2), Var Q = d_v/(9 D^2) with
        # d_v = D/h, Var P_pos = 1/(3 D d_k). Logits and outputs then start with the variance
        # multi-head and talking-heads start with (tests/test_variants.py).
        self.P = nn.Parameter(_uniform(D, D, h, var=1 / (9 * D * D)))
        self.Q = nn.Parameter(_uniform(D, D, h, var=1 / (9 * D * h)))
        self.P_pos = nn.Parameter(_uniform(D, d_pos, h, var=1 / (3 * D * d_pos)))
        self.d_model, self.h, self.d_pos = D, h, d_pos
        self.key_pe = shape.key_pe if shape.key_pe is not None else nn.Parameter(
            torch.randn(shape.span, d_pos))

    def flops(self, s: float) -> float:
        """Multiply-adds per query over s keys (#FLOPS convention): X P and Q (2 D^2 h), then
        (X P) . Mem and W . Mem over the s keys (2 D h s)."""
        return 2 * self.d_model**2 * self.h + 2 * self.d_model * self.h * s

    def position_flops(self, s: float) -> float:
        """The relative-position term: X P_pos (D d h) and its product with p (d h s)."""
        return self.d_model * self.d_pos * self.h + self.d_pos * self.h * s

    def project(self, x: Tensor, mem: Tensor) -> Heads:
        """x (B, M, D), mem (B, K, D) -> queries X P (B, h, M, D), the raw hidden states
        (B, 1, K, D) as keys and values (GBMA attends over them), and X P_pos (B, h, M, d), the
        query side of the position term."""
        m = mem.unsqueeze(1)
        return Heads(torch.einsum("bna,ach->bhnc", x, self.P), m, m,
                     torch.einsum("bna,adh->bhnd", x, self.P_pos))

    def output(self, u: Tensor) -> Tensor:
        """(B, h, M, D) -> (B, M, D) through Q."""
        return torch.einsum("bhnc,cdh->bnd", u, self.Q)
