"""The span-policy interface: which distances each softmax head may attend over, and how much,
stated once as a mask (`SpanPolicy.mask`), from which the rest is read (`read.read_mask`)."""

import torch
from torch import Tensor, nn

from ..typed import NoOptions, Shape
from .read import Kept, read_mask


class SpanPolicy(nn.Module):
    """Per-head span over distances x = 0..S-1 (x = 0 is the query itself).

    A policy states its mask once: `mask(dist, pos)`, the soft mask m(x, p) of a key at
    distance x (dist: (W,) the band's distances W-1..0) and at position p in the text (pos:
    (B, 1, rows, W) int64, each key's index in the split, negative before the text),
    broadcastable to (B, h, rows, W); None for a hard window of S. A mask that does not read
    `pos` is the same at every position (the layer computes no positions for it and may pass
    None). Everything else is read off that mask (`read_mask`), when the layer is built and
    again after each optimiser step where the mask has parameters: each head's span (1 + the
    largest distance it keeps nonzero at any position), the window the layer computes (the
    widest head's), whether the mask reads positions, and from those the layer's cache, reach
    and cost (`Attention.cache_size`, `widest`, `flops`). A mask that keeps nothing at distance
    0 for some head or position is refused when it is read (a query that starts a stream has
    no other key, so its row would be empty).

    Learned spans (`LearnedSpan`: adaptive, dynamic) say more: spans finer than whole distances
    (z + R: `spans`, which must agree with the mask), a mask computed from the input (`prepare`
    and `trace`; not read off), a penalty (`loss`), a cost of their own (`flops`), spans set on
    request (`set_spans`), the window they trim to, and the states cached beyond it (`growth`).
    The constructor takes the layer's `Shape` (a policy reads its softmax heads `h`, the span
    limit S = `span`, and `d_model`) and the policy's options, an instance of its `Options` (a
    frozen dataclass: model.attn.<option>).
    """

    Options: type = NoOptions
    learned = False  # are the spans trained (adaptive, dynamic)?
    growth: int | None = None  # states cached beyond the window; None: S where the mask moves

    def __init__(self, shape: Shape, options: NoOptions) -> None:
        super().__init__()
        self.n_heads, self.S = shape.h, shape.span
        self.options = options  # what it was built with, as `describe()` reports it
        self._kept: Kept | None = None  # what its mask keeps (`read_mask`)

    @property
    def name(self) -> str:
        """How tables and reports name the policy (the built-in ones: fixed, adaptive,
        dynamic-span)."""
        return type(self).__name__

    def mask(self, dist: Tensor, pos: Tensor | None) -> Tensor | None:
        """The mask of the band's keys: dist (W,), pos (B, 1, rows, W) -> broadcastable to
        (B, h, rows, W), or None for a hard window of S."""
        return None

    def prepare(self, x: Tensor) -> int:
        """Called at the start of a forward on x (B, M, D); returns the window W to compute. A
        mask computed from the input computes it here."""
        return self.window

    @property
    def window(self) -> int:
        """Distances the layer computes: those its widest head keeps (`spans`), at least 1."""
        return max(1, int(self.kept.spans.max()))

    @property
    def kept(self) -> Kept:
        """What its mask keeps (`read_mask`): spans, whether it reads key positions, and what it
        keeps at any position; read when first asked, and again by `clamp_`."""
        if self._kept is None:  # a policy built outside a layer, never clamped
            self._kept = self._read_mask()
        return self._kept

    @property
    def moves(self) -> bool:
        """Has the policy parameters, which may move its mask at each optimiser step?"""
        return any(True for _ in self.parameters())

    def spans(self) -> Tensor:
        """(h,) effective span of each head: 1 + the largest distance its mask keeps nonzero
        (S for a hard window), as the layer computes it."""
        return self.kept.spans

    def trace(self) -> Tensor | None:
        """(B, h, M) effective span of every query of the forward just run, for policies whose
        spans depend on the input; None for the others (their spans are `spans()`)."""
        return None

    def loss(self) -> Tensor:
        return torch.zeros(())

    def flops(self) -> float:
        """Multiply-adds per query the policy itself spends (a dynamic span's gate)."""
        return 0.0

    def set_spans(self, spans: Tensor | float) -> None:
        """Set the effective spans (what `spans()` reports: z + R, at most S) to `spans`, one
        value or one per head, as if learned (benchmarks, FLOPs at a given span)."""
        raise ValueError(f"span_policy={self.name!r}: its spans are not learned, so they cannot "
                         "be set (learned: adaptive, dynamic)")

    def clamp_(self) -> None:
        """Project parameters back to their domain; the layer calls it once built, the trainer
        after every step. By default: the mask is read, once, and again after each step where
        it has parameters (not inside a captured CUDA graph, whose shapes are fixed)."""
        capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
        if self._kept is None or self.moves and not capturing:
            self._kept = self._read_mask()

    def _read_mask(self) -> Kept:
        """The mask read (`read_mask`); a mask computed from the input (`prepare`) is not read:
        its spans are its own, and it reads no positions."""
        if type(self).prepare is not SpanPolicy.prepare:
            return Kept(self.spans(), False, None)
        return read_mask(self)

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self.clamp_()  # new parameters: spans and window follow them


class FixedSpan(SpanPolicy):
    """Every head attends over distances 0..S-1 with weight 1 (the baseline of both papers)."""

    name = "fixed"


def check(policy: SpanPolicy) -> None:
    """Refuse (ValueError) a policy whose mask leaves a query without a key (`read_mask`), or
    whose `spans()` disagree with its mask, naming both: each head's span s must keep the
    distances x < s and no other (s within one distance above the largest distance the mask
    keeps nonzero, at most S). A policy whose mask depends on the input (`prepare`) must say
    its spans with `spans()` and `trace()`, which are not read off a mask."""
    cls = type(policy)
    name = f"span_policy={cls.__name__}"
    if cls.prepare is not SpanPolicy.prepare:
        if cls.spans is SpanPolicy.spans or cls.trace is SpanPolicy.trace:
            raise ValueError(f"{name}: its mask depends on the input (it overrides prepare), so "
                             "its spans cannot be read off the mask: add spans() (per head, or "
                             "NaN as DynamicSpan) and trace() (per query of the last forward)")
        return
    kept = read_mask(policy).spans
    said = policy.spans().float().cpu()
    eps = 1e-4  # float rounding of z + R against the mask's R + z - x
    if not (said.shape == kept.shape and bool(((said > kept - 1 - eps) & (said <= kept + eps))
                                              .all())):
        raise ValueError(
            f"{name}: its mask keeps per head the distances x < {_listed(kept)} (S = "
            f"{policy.S}), but its spans() say {_listed(said)}: each span must be 1 + the "
            "largest distance its head's mask keeps nonzero (or finer, within one distance). "
            "Fix one, or leave spans() out: by default it is read off the mask")


def _listed(t: Tensor) -> str:
    return ", ".join(f"{v:g}" for v in t.tolist())
