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

    def query(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, M, D) -> (X P) (B, h, M, D) and (X P_pos) (B, h, M, d)."""
        return (torch.einsum("bna,ach->bhnc", x, self.P),
                torch.einsum("bna,adh->bhnd", x, self.P_pos))

    def memory(self, mem: Tensor) -> tuple[Tensor, Tensor]:
        """GBMA attends over the raw hidden states: (B, 1, K, D) as keys and values."""
        m = mem.unsqueeze(1)
        return m, m

    def logits(self, q: tuple[Tensor, Tensor], kv: tuple[Tensor, Tensor], start: int,
               window: int) -> Tensor:
        """Queries start..start+c-1 -> logits (B, h, c, W)."""
        xp, xpos = q
        m = kv[0][:, :, start : start + xp.size(2) + window - 1]
        return band(xp @ m.transpose(-1, -2), window) + xpos @ self.key_pe[:window].flip(0).T

    def attend(self, w: Tensor, kv: tuple[Tensor, Tensor], start: int) -> Tensor:
        """Weights (B, h, c, W) -> sum_m W[n,m,h] Mem[m] (B, h, c, D)."""
        c, window = w.shape[-2:]
        return unband(w, c + window - 1) @ kv[1][:, :, start : start + c + window - 1]

    def output(self, u: Tensor) -> Tensor:
        """(B, h, M, D) -> (B, M, D) through Q."""
        return torch.einsum("bhnc,cdh->bnd", u, self.Q)
