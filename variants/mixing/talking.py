"""Talking-heads projection (Shazeer et al. 2020): a learned linear map across the heads dim."""

import math

import torch
from torch import Tensor, nn

INITS = ("identity", "random")


class HeadMix(nn.Module):
    """P[h_in, h_out] applied to (B, h_in, M, W) logits (P_l) or weights (P_w) -> (B, h_out, M, W).

    init "identity" (the default): the identity (rectangular when h_in != h_out), plus optional
    small noise: a fresh talking-heads layer then computes exactly multi-head attention, so it
    starts from the baseline it is compared with and keeps the logits' scale. init "random":
    N(0, 1/h_in) entries, which keep the scale on average but start from no head structure, so
    whether trained matrices end up "not diagonal or sparse" (the paper's Figure 1) can be told
    apart from where the identity start leaves them. The map replaces the logits rather than
    adding to them: a residual logits + mix(logits) would double the logits at the identity.
    """

    def __init__(self, h_in: int, h_out: int, noise: float, init: str) -> None:
        super().__init__()
        if init not in INITS:
            raise ValueError(f"mix_init={init!r} is invalid: expected one of {INITS}")
        start = torch.eye(h_in, h_out) if init == "identity" else (
            torch.randn(h_in, h_out) / math.sqrt(h_in))
        self.P = nn.Parameter(start + noise * torch.randn(h_in, h_out))

    def forward(self, a: Tensor) -> Tensor:
        B, h_in, M, W = a.shape
        # An explicit bmm over B: `P.T @ a` broadcasts by transposing a into (B * M * W, h_in)
        # rows, which costs two strided copies of the whole tensor (2-7x slower on CPU).
        P = self.P.T.expand(B, -1, -1)
        return torch.bmm(P, a.reshape(B, h_in, M * W)).view(B, -1, M, W)
