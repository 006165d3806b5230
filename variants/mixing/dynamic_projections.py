"""Talking-heads attention with dynamic projections (Shazeer et al. 2020, appendix A)."""

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bench.declare import option

from ..typed import OptionError
from .base import Heads, Shape
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
    zero) the layer computes talking-heads attention exactly. The memory-side terms vary along
    the keys: each band column reads its key's (an `unfold` view of R_Ml and R_Mw). The option
    `banded` is refused (not implemented for these terms).
    """

    @dataclass(frozen=True)
    class Options(TalkingHeads.Options):
        dynamic_init: float = option(0.01, "std of each generated entry of P_l's and P_w's "
                                     "input-dependent terms at the start (0: talking heads)")

        def __post_init__(self) -> None:
            if not self.dynamic_init >= 0:
                raise OptionError("dynamic_init", self.dynamic_init, "a std >= 0")
            if self.banded:
                raise OptionError("banded", self.banded, "false with dynamic projections (not "
                                  "implemented for their memory-side terms)")

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

    def project(self, x: Tensor, mem: Tensor) -> Heads:
        """x (B, M, D), mem (B, K, D) -> multi-head's queries, keys and values, and as `extra`
        R_Xl (B, h_k, M, h), R_Xw (B, h, M, h_v), R_Ml (B, K, h_k, h), R_Mw (B, K, h, h_v)."""
        B, M, _ = x.shape
        K = mem.size(1)
        heads = super().project(x, mem)
        r_xl = (x @ self.P_Xl).view(B, M, self.h_k, self.h).transpose(1, 2)
        r_xw = (x @ self.P_Xw).view(B, M, self.h, self.h_v).transpose(1, 2)
        r_ml = (mem @ self.P_Ml).view(B, K, self.h_k, self.h)
        r_mw = (mem @ self.P_Mw).view(B, K, self.h, self.h_v)
        return heads._replace(extra=(r_xl, r_xw, r_ml, r_mw))

    def pre_softmax(self, J: Tensor, heads: Heads, rows: slice, keys: slice) -> Tensor:
        """J (B, h_k, c, W) -> L (B, h, c, W) through P_l + R_Xl (of each query) + R_Ml (of
        each band column's key: (B, c, h_k, h, W))."""
        r_xl, _, r_ml, _ = heads.extra
        by_key = r_ml[:, keys].unfold(1, J.size(-1), 1)
        return (self.P_l(J) + torch.einsum("bkiw,bkih->bhiw", J, r_xl[:, :, rows])
                + torch.einsum("bkiw,bikhw->bhiw", J, by_key))

    def post_softmax(self, w: Tensor, heads: Heads, rows: slice, keys: slice) -> Tensor:
        """w (B, h, c, W) -> U (B, h_v, c, W) through P_w + R_Xw (of each query) + R_Mw (of
        each band column's key)."""
        _, r_xw, _, r_mw = heads.extra
        by_key = r_mw[:, keys].unfold(1, w.size(-1), 1)
        return (self.P_w(w) + torch.einsum("bhiw,bhiv->bviw", w, r_xw[:, :, rows])
                + torch.einsum("bhiw,bihvw->bviw", w, by_key))
