"""The mixing-policy interface: what happens across the heads dimension, as the layer calls it."""

from typing import Any, NamedTuple

from torch import Tensor, nn

from ..typed import NoOptions, Shape


class Heads(NamedTuple):
    """What a mixing policy projects once per block (`MixingPolicy.project`), over the block's
    M queries and the K = W - 1 + M keys of [cache; block]: queries q (B, h_k, M, d) scaled by
    1/sqrt(d_k), keys k (B, h_k | 1, K, d), values v (B, h_v | 1, K, d_v), the query side of
    the relative-position term q_pos (B, h_k, M, d_p) (q itself for multi-head), and the
    policy's own per-block tensors (`extra`, read by its `pre_softmax` and `post_softmax`)."""

    q: Tensor
    k: Tensor
    v: Tensor
    q_pos: Tensor
    extra: tuple[Tensor, ...] = ()


class MixingPolicy(nn.Module):
    """Projections and head mixing of one attention layer (docs/variants.md).

    The layer calls `project(x, mem)` once per block -> `Heads`, then per chunk of queries
    `rows` over their band of keys `keys` (a slice of K) computes the logits J = q.k + q_pos.p
    (B, h_k, c, W), calls `pre_softmax(J, heads, rows, keys)` -> (B, h, c, W) (talking-heads
    P_l), applies the span mask and the softmax, calls `post_softmax(w, heads, rows, keys)` ->
    (B, h_v, c, W) (P_w) and sums the values over the band; `output(o)` maps the chunks'
    per-head outputs (B, h_v, M, d_v) to (B, M, D). A policy keeps no state between the calls.
    It states its heads h_k, h, h_v and widths d_k, d_v, holds a relative-position table
    `key_pe` (S, d) (its own, or the caller's shared one), says whether q.k and w.v are
    `banded` (computed over each query's window only), and reports its cost: `flops(s)` (the
    paper's #FLOPS convention) and `position_flops(s)` (the q.p term), per query over s keys.
    The constructor takes the layer's `Shape` and the policy's options, an instance of its
    `Options` (a frozen dataclass: model.attn.<option>, `variants.options`), and any argument a
    registered name fixes (`variants.register_policy`). `heads` names the head options it reads
    (the layer refuses the others).
    """

    Options: type = NoOptions
    heads: tuple[str, ...] = ("h_k", "h", "h_v", "d_k", "d_v")
    banded = False

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
        both, dynamic-projections, gbma)."""
        return type(self).__name__

    @classmethod
    def free_heads(cls, fixed: dict[str, Any]) -> set[str]:
        """Which of h_k and h_v may differ from h when built with the constructor arguments
        `fixed` (those a registered name fixes): the layer refuses the others unless equal to
        h, before anything is allocated. By default those it does not read (`heads`); a policy
        whose projection maps heads (talking-heads P_l: h_k -> h, P_w: h -> h_v) adds them."""
        return {k for k in ("h_k", "h_v") if k not in cls.heads}

    def project(self, x: Tensor, mem: Tensor) -> Heads:
        """x (B, M, D), the block; mem (B, K, D), [cache; block] padded to a full band -> the
        queries, keys and values, once per block."""
        raise NotImplementedError

    def pre_softmax(self, J: Tensor, heads: Heads, rows: slice, keys: slice) -> Tensor:
        """The logits J (B, h_k, c, W) of the queries `rows` -> (B, h, c, W): the identity."""
        return J

    def post_softmax(self, w: Tensor, heads: Heads, rows: slice, keys: slice) -> Tensor:
        """The weights w (B, h, c, W) of the queries `rows` -> (B, h_v, c, W): the identity."""
        return w

    def output(self, o: Tensor) -> Tensor:
        """The chunks' per-head outputs (B, h_v, M, d_v), concatenated over queries -> (B, M, D)."""
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
