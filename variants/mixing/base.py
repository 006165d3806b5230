"""The mixing-policy interface: what happens across the heads dimension, as the layer calls it."""

from typing import Any

from torch import Tensor, nn

from ..shape import Shape
from ..typed import NoOptions


class MixingPolicy(nn.Module):
    """Projections and head mixing of one attention layer (docs/variants.md).

    The layer calls `query(x)` and `memory(mem)` once per block, then, per chunk of queries
    start..start+c-1 over a band of W keys, `logits(q, kv, start, W)` -> (B, h, c, W) (the span
    mask and softmax are the layer's), `attend(w, q, kv, start)` on the weights (B, h, c, W) and
    the same chunk's queries, and `output(...)` -> (B, M, D) on the concatenated chunks. The
    intermediate types are the policy's own, and a policy keeps no state between the calls. A
    policy states its heads h_k, h, h_v and widths d_k, d_v, holds a relative-position table
    `key_pe` (S, d) (its own, or the caller's shared one), and reports its cost: `flops(s)` (the
    paper's #FLOPS convention) and `position_flops(s)` (the q.p term), per query over s keys.
    The constructor takes the layer's `Shape` and the policy's options, an instance of its
    `Options` (a frozen dataclass: model.attn.<option>, `variants.options`), and any argument a
    registered name fixes (`variants.register_policy`). `heads` names the head options it reads
    (the layer refuses the others).
    """

    Options: type = NoOptions
    heads: tuple[str, ...] = ("h_k", "h", "h_v", "d_k", "d_v")

    h_k: int
    h: int
    h_v: int
    d_k: int
    d_v: int
    key_pe: nn.Parameter

    def __init__(self, shape: Shape, options: NoOptions) -> None:
        super().__init__()
        self.options = options  # what it was built with, as `describe()` reports it

    @property
    def name(self) -> str:
        """How tables and reports name the policy (the built-in ones: none, logits, weights,
        both, gbma)."""
        return type(self).__name__

    @classmethod
    def free_heads(cls, fixed: dict[str, Any]) -> set[str]:
        """Which of h_k and h_v may differ from h when built with the constructor arguments
        `fixed` (those a registered name fixes): the layer refuses the others unless equal to
        h, before anything is allocated. By default those it does not read (`heads`); a policy
        whose projection maps heads (talking-heads P_l: h_k -> h, P_w: h -> h_v) adds them."""
        return {k for k in ("h_k", "h_v") if k not in cls.heads}

    def query(self, x: Tensor):
        """x (B, M, D) -> the queries, once per block."""
        raise NotImplementedError

    def memory(self, mem: Tensor):
        """mem (B, K, D), [cache; block] padded to a full window -> keys and values."""
        raise NotImplementedError

    def logits(self, q, kv, start: int, window: int) -> Tensor:
        """Queries start..start+c-1 -> unmasked logits (B, h, c, window)."""
        raise NotImplementedError

    def attend(self, w: Tensor, q, kv, start: int) -> Tensor:
        """Attention weights (B, h, c, W) of the queries q (as `logits` got them) start.. ->
        per-head outputs."""
        raise NotImplementedError

    def output(self, o: Tensor) -> Tensor:
        """The chunks' per-head outputs, concatenated over queries -> (B, M, D)."""
        raise NotImplementedError

    def flops(self, s: float) -> float:
        """Multiply-adds per query over s keys, the adaptive-span paper's #FLOPS convention."""
        raise NotImplementedError

    def position_flops(self, s: float) -> float:
        """Multiply-adds per query of the relative-position term over s keys (not in #FLOPS)."""
        raise NotImplementedError

    def matrices(self) -> dict[str, Tensor]:
        """The learned head-mixing matrices, by name (talking-heads P_l, P_w); {} for none."""
        return {}
