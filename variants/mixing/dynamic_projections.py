"""Talking-heads attention with dynamic projections (Shazeer et al. 2020, appendix A)."""

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bench.declare import option

from ..band import band, scores, unband
from ..typed import OptionError
from .base import Shape
from .talking import TalkingHeads


class DynamicTalkingHeads(TalkingHeads):
    """Talking heads whose P_l and P_w get terms that are learned linear functions of the inputs:

    R_Xl[n,hk,h] = X[n] . P_Xl[D,hk,h]      R_Ml[m,hk,h] = Mem[m] . P_Ml[D,hk,h]
    R_Xw[n,h,hv] = X[n] . P_Xw[D,h,hv]      R_Mw[m,h,hv] = Mem[m] . P_Mw[D,h,hv]
    L[n,m,h]  = sum_hk J[n,m,hk] (P_l[hk,h] + R_Xl[n,hk,h] + R_Ml[m,hk,h])
    U[n,m,hv] = sum_h  W[n,m,h]  (P_w[h,hv] + R_Xw[n,h,hv] + R_Mw[m,h,hv])

    X is the query side (the block), Mem the memory side ([cache; block]). The paper trained well
    only with small initial values of the four projection-generating parameters: they start
    N(0, dynamic_init^2 / D), so each generated entry has std `dynamic_init` at unit-variance
    inputs, small against P_l's and P_w's identity. At dynamic_init = 0 (or with those four at
    zero) the layer computes talking-heads attention exactly. The memory-side terms are applied
    key-major, to the c x (c + W - 1) products, so the option `banded` is refused.
    """

    @dataclass(frozen=True)
    class Options(TalkingHeads.Options):
        dynamic_init: float = option(0.01, "std of each generated entry of P_l's and P_w's "
                                     "input-dependent terms at the start (0: talking heads)")

        def __post_init__(self) -> None:
            if not self.dynamic_init >= 0:
                raise OptionError("dynamic_init", self.dynamic_init, "a std >= 0")
            if self.banded:
                raise OptionError("banded", self.banded, "false with dynamic projections (their "
                                  "memory-side terms need the unbanded products)")

    def __init__(self, shape: Shape, options: Options) -> None:
        super().__init__(shape, options)
        d_model, h_k, h, h_v = shape.d_model, shape.h_k, shape.h, shape.h_v
        std = options.dynamic_init / math.sqrt(d_model)
        self.P_Xl = nn.Parameter(torch.randn(d_model, h_k * h) * std)
        self.P_Ml = nn.Parameter(torch.randn(d_model, h_k * h) * std)
        self.P_Xw = nn.Parameter(torch.randn(d_model, h * h_v) * std)
        self.P_Mw = nn.Parameter(torch.randn(d_model, h * h_v) * std)

    @property
    def name(self) -> str:
        return "dynamic-projections"

    @classmethod
    def free_heads(cls, fixed: dict[str, Any]) -> set[str]:
        """Both: it always has P_l and P_w."""
        return {"h_k", "h_v"}

    def flops(self, s: float) -> float:
        """Talking heads' count plus generating the four terms (D per entry, query and memory
        side) and applying them (per key, both sides): 2 (D + s) (h_k h + h h_v)."""
        return super().flops(s) + 2 * (self.d_model + s) * (self.h_k * self.h + self.h * self.h_v)

    def query(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, M, D) -> q / sqrt(d_k) (B, h_k, M, d_k), R_Xl (B, h_k, M, h),
        R_Xw (B, h, M, h_v)."""
        B, M, _ = x.shape
        r_xl = (x @ self.P_Xl).view(B, M, self.h_k, self.h).transpose(1, 2)
        r_xw = (x @ self.P_Xw).view(B, M, self.h, self.h_v).transpose(1, 2)
        return super().query(x), r_xl, r_xw

    def memory(self, mem: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """mem (B, K, D) -> keys, values (as multi-head), R_Ml (B, K, h_k, h),
        R_Mw (B, K, h, h_v)."""
        B, K, _ = mem.shape
        k, v = super().memory(mem)
        r_ml = (mem @ self.P_Ml).view(B, K, self.h_k, self.h)
        r_mw = (mem @ self.P_Mw).view(B, K, self.h, self.h_v)
        return k, v, r_ml, r_mw

    def logits(self, q: tuple[Tensor, Tensor, Tensor], kv: tuple[Tensor, ...], start: int,
               window: int) -> Tensor:
        """Queries start..start+c-1 -> logits (B, h, c, W): J through P_l + R_Xl + R_Ml."""
        q, r_xl, _ = q
        c = q.size(2)
        keys = slice(start, start + c + window - 1)
        J = scores(q, kv[0][:, :, keys], window) + q @ self.key_pe[:window].flip(0).T
        L = self.P_l(J) + torch.einsum("bkiw,bkih->bhiw", J, r_xl)
        # the memory-side term varies along the keys: applied key-major (query i, key r = i + w)
        by_key = torch.einsum("bkir,brkh->bhir", unband(J, c + window - 1), kv[2][:, keys])
        return L + band(by_key.contiguous(), window)

    def attend(self, w: Tensor, q: tuple[Tensor, Tensor, Tensor], kv: tuple[Tensor, ...],
               start: int) -> Tensor:
        """Weights (B, h, c, W) -> per-head outputs (B, h_v, c, d_v) through P_w + R_Xw + R_Mw,
        R_Xw that of the chunk's queries q."""
        c, window = w.shape[-2:]
        keys = slice(start, start + c + window - 1)
        U = self.P_w(w) + torch.einsum("bhiw,bhiv->bviw", w, q[2])
        by_key = torch.einsum("bhir,brhv->bvir", unband(w, c + window - 1), kv[3][:, keys])
        return (unband(U, c + window - 1) + by_key) @ kv[1][:, :, keys]
