"""General bilinear multihead attention, GBMA (Shazeer et al. 2020, section 5)."""

import math

import torch
from torch import Tensor, nn

from ..band import band, unband


class GBMA(nn.Module):
    """Per head a full bilinear form for the logits and a full D x D map for the values.

    L[n,m,h] = sum_ab X[n,a] Mem[m,b] P[a,b,h] + (X P_pos)[n,:,h] . p_{n-m}
    Y[n,c]   = sum_{m,b,h} W[n,m,h] Mem[m,b] Q[b,c,h]
    P and Q hold the paper's 2 D^2 h parameters; P_pos (D, d, h) is the query side of the
    relative position term shared with the other variants, so that a multi-head or talking-heads
    layer folds into GBMA exactly (P = Pq Pk [Pl], P_pos = Pq [Pl], Q = Pv Po [Pw]).
    """

    def __init__(self, d_model: int, span: int, h: int, d_pos: int) -> None:
        super().__init__()
        D = d_model
        # scales chosen so logits and outputs start with the variance multi-head starts with
        self.P = nn.Parameter(torch.empty(D, D, h).uniform_(-1, 1) * math.sqrt(3 / (D * D)))
        self.Q = nn.Parameter(torch.empty(D, D, h).uniform_(-1, 1) * math.sqrt(1 / (D * h)))
        self.P_pos = nn.Parameter(torch.empty(D, d_pos, h).uniform_(-1, 1) / math.sqrt(D * d_pos))
        self.key_pe = nn.Parameter(torch.randn(span, d_pos))

    def logits(self, x: Tensor, mem: Tensor, window: int) -> Tensor:
        """x (B, M, D), mem (B, W-1+M, D) -> logits (B, h, M, W)."""
        xp = torch.einsum("bna,ach->bhnc", x, self.P)
        xpos = torch.einsum("bna,adh->bhnd", x, self.P_pos)
        pos = xpos @ self.key_pe[:window].flip(0).T
        return band(xp @ mem.transpose(1, 2).unsqueeze(1), window) + pos

    def output(self, w: Tensor, mem: Tensor) -> Tensor:
        """Weights w (B, h, M, W) over mem (B, K, D) -> (B, M, D)."""
        u = unband(w, mem.size(1)) @ mem.unsqueeze(1)  # (B, h, M, D)
        return torch.einsum("bhnc,cdh->bnd", u, self.Q)
