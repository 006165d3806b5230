"""Talking heads (Shazeer et al. 2020): multi-head attention with learned linear maps across the
heads dim (`HeadMix`), P_l before the softmax and P_w after it (`TalkingHeads`)."""

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from bench.declare import option

from .base import Shape
from .multihead import MultiHead

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


class TalkingHeads(MultiHead):
    """Multi-head with P_l (h_k -> h, before the softmax: `mix_logits`) and P_w (h -> h_v, after
    it: `mix_weights`), Shazeer et al. 2020; both is talking heads, one alone is logits-only or
    weights-only (their Table 3). Options: the maps' start, `mix_init` (the identity, so a fresh
    layer is multi-head, or random) and `mix_noise` (std of noise added to it)."""

    @dataclass(frozen=True)
    class Options(MultiHead.Options):
        mix_init: Literal["identity", "random"] = option(
            "identity", "P_l and P_w start as the identity (a fresh layer is multi-head) or "
            "random, N(0, 1/h_in)")
        mix_noise: float = option(0.0, "std of the noise added to P_l's and P_w's start")

    def __init__(self, shape: Shape, options: Options, mix_logits: bool = True,
                 mix_weights: bool = True) -> None:
        super().__init__(shape, options)
        noise, init = options.mix_noise, options.mix_init
        self.P_l = HeadMix(shape.h_k, shape.h, noise, init) if mix_logits else None
        self.P_w = HeadMix(shape.h, shape.h_v, noise, init) if mix_weights else None

    @classmethod
    def free_heads(cls, fixed: dict[str, Any]) -> set[str]:
        """h_k with P_l (`mix_logits`), h_v with P_w (`mix_weights`)."""
        return {k for k, flag in (("h_k", "mix_logits"), ("h_v", "mix_weights"))
                if fixed.get(flag)}
