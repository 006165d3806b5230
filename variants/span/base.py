"""The span-policy interface: which distances each softmax head may attend over, and how much."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from bench.declare import option

from ..band import distances
from ..shape import Shape
from ..typed import NoOptions, OptionError


class SpanPolicy(nn.Module):
    """Per-head span over distances x = 0..S-1 (x = 0 is the query itself).

    A policy says which distances each head may use: `mask(dist, rows)`, the soft mask m(x) of
    the queries `rows` of the block, broadcastable to (B, h, len(rows), W), or None for a hard
    window of S. Its cost follows from that mask: by default each head's span (`spans()`) is
    1 + the largest distance its mask keeps nonzero, the layer computes the widest head's span
    (`window`) and caches what the next block can need (`cache_size`), so mean span, #FLOPS and
    the cache are those of what it computes. A policy whose spans are finer than whole
    distances (adaptive: z + R) or depend on the input (dynamic: `prepare`, `trace`) says so by
    overriding `spans`, and its spans must agree with its mask (`check_spans`, when it is
    registered). A policy whose spans are learned says so (`learned`) and sets them on request
    (`set_spans`). The constructor takes the layer's `Shape` (a policy reads its softmax heads
    `h`, the span limit S = `span`, and `d_model`) and the policy's options, an instance of its
    `Options` (a frozen dataclass: model.attn.<option>).

    A mask that depends on where a key lies in the text (global tokens, a text's first symbols
    kept as sinks) overrides `mask_at(dist, rows, pos)`, which sees each key's absolute
    position; its `mask` is then what any position may keep (spans, window and cost are read
    off it), and `mask_at` keeps a subset of it (`positional`). Keys further than the window
    are never computed: such a token is seen from at most S - 1 positions on.
    """

    Options: type = NoOptions
    learned = False  # are the spans trained (adaptive, dynamic)?

    def __init__(self, shape: Shape, options: NoOptions) -> None:
        super().__init__()
        self.n_heads, self.S = shape.h, shape.span
        self.options = options  # what it was built with, as `describe()` reports it
        self._kept: tuple[Tensor, int, int] | None = None  # spans, window, cache: the mask's

    @property
    def name(self) -> str:
        """How tables and reports name the policy (the built-in ones: fixed, adaptive,
        dynamic)."""
        return type(self).__name__

    @property
    def window(self) -> int:
        """Distances the layer computes: those its widest head keeps (`spans`), at least 1."""
        return self._read_mask()[1]

    @property
    def cache_size(self) -> int:
        """Hidden states of the previous block this layer's next forward can need: the window's
        (W - 1); S - 1 where the mask has parameters, which may widen it at the next step."""
        return self._read_mask()[2]

    @property
    def widest(self) -> int:
        """The widest window this policy can ever compute: S where its spans are learned or its
        mask has parameters (either may widen it), else the distances its mask keeps. What a
        run can see through it: its floors are taken there, and a probe that needs more is
        refused before a run."""
        if self.learned or any(True for _ in self.parameters()):
            return self.S
        return self.window

    def prepare(self, x: Tensor) -> int:
        """Called at the start of a forward on x (B, M, D); returns the window W to compute."""
        return self.window

    def mask(self, dist: Tensor, rows: slice) -> Tensor | None:
        return None

    def mask_at(self, dist: Tensor, rows: slice, pos: Tensor) -> Tensor | None:
        """The mask of the queries `rows` where pos (B, 1, len(rows), W) int64 is each band
        key's position in the text (its index in the split; negative: before the text).
        By default positions do not matter: `mask(dist, rows)`."""
        return self.mask(dist, rows)

    @property
    def positional(self) -> bool:
        """Does the mask read absolute positions (`mask_at` overridden)? Then the layer
        computes each key's position and a forward needs the text position of its block."""
        return type(self).mask_at is not SpanPolicy.mask_at

    def loss(self) -> Tensor:
        return torch.zeros(())

    def flops(self) -> float:
        """Multiply-adds per query the policy itself spends (a dynamic span's gate)."""
        return 0.0

    def spans(self) -> Tensor:
        """(h,) effective span of each head: 1 + the largest distance its mask keeps nonzero
        (S for a hard window), as the layer computes it."""
        return self._read_mask()[0]

    def trace(self) -> Tensor | None:
        """(B, h, M) effective span of every query of the forward just run, for policies whose
        spans depend on the input; None for the others (their spans are `spans()`)."""
        return None

    def set_spans(self, spans: Tensor | float) -> None:
        """Set the effective spans (what `spans()` reports: z + R, at most S) to `spans`, one
        value or one per head, as if learned (benchmarks, FLOPs at a given span)."""
        raise ValueError(f"span_policy={self.name!r}: its spans are not learned, so they cannot "
                         "be set (learned: adaptive, dynamic)")

    def clamp_(self) -> None:
        """Project parameters back to their domain; the layer calls it once built, the trainer
        after every step. By default: spans, window and cache are read off the mask, here,
        outside any forward, where the mask does not depend on the input: once, and again
        after each step where it has parameters (not inside a captured CUDA graph, whose
        shapes are fixed)."""
        if type(self).prepare is not SpanPolicy.prepare:
            return
        capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
        if self._kept is None or any(True for _ in self.parameters()) and not capturing:
            self._kept = self._measure()

    def _read_mask(self) -> tuple[Tensor, int, int]:
        if self._kept is None:  # a policy built outside a layer, never clamped
            self._kept = self._measure()
        return self._kept

    def _measure(self) -> tuple[Tensor, int, int]:
        """(spans, window, cache size) read off the mask over distances 0..S-1."""
        device = next(self.parameters(), torch.zeros(())).device
        with torch.no_grad():
            m = self.mask(distances(self.S, device).float(), slice(None))
        if m is None:  # a hard window of S (no tensor read: a model on the meta device too)
            return kept_spans(m, self.n_heads, self.S), self.S, self.S - 1
        spans = kept_spans(m, self.n_heads, self.S).cpu()
        window = max(1, int(spans.max()))
        moves = any(True for _ in self.parameters())
        return spans, window, self.S - 1 if moves else window - 1

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self.clamp_()  # new parameters: spans and window follow them


def kept_spans(m: Tensor | None, heads: int, span: int) -> Tensor:
    """(heads,) 1 + the largest distance a mask m keeps nonzero, per head, over any batch row and
    query: m broadcastable to (B, heads, rows, W), its last dim distances W-1..0 (`distances`);
    None, a hard window: S."""
    if m is None:
        return torch.full((heads,), float(span))
    keep = torch.as_tensor(m) != 0
    keep = keep.reshape((1,) * (4 - keep.dim()) + tuple(keep.shape)).any(2).any(0)  # (h | 1, W)
    reach = (distances(keep.size(-1), keep.device) + 1) * keep
    return reach.amax(-1).float().expand(heads).clone()


def check_spans(policy: SpanPolicy) -> None:
    """Refuse a policy whose `spans()` disagree with its mask, naming both: each head's span s
    must keep the distances x < s and no other (s within one distance above the largest distance
    the mask keeps nonzero, at most S); a positional policy's `mask_at` may keep no key its
    `mask` does not. A policy whose spans depend on the input (`prepare`) must say so with
    `spans()` and `trace()`, which are not read off a mask."""
    cls = type(policy)
    name = f"span_policy={cls.__name__}"
    if cls.prepare is not SpanPolicy.prepare:
        if cls.spans is SpanPolicy.spans or cls.trace is SpanPolicy.trace:
            raise ValueError(f"{name}: its mask depends on the input (it overrides prepare), so "
                             "its spans cannot be read off the mask: add spans() (per head, or "
                             "NaN as DynamicSpan) and trace() (per query of the last forward)")
        return
    if policy.positional:
        _check_positions(policy)
    with torch.no_grad():
        said = policy.spans().float().cpu()
        m = policy.mask(distances(policy.S).float(), slice(None))
    kept = kept_spans(m, policy.n_heads, policy.S)
    eps = 1e-4  # float rounding of z + R against the mask's R + z - x
    if not (said.shape == kept.shape and bool(((said > kept - 1 - eps) & (said <= kept + eps))
                                              .all())):
        raise ValueError(
            f"{name}: its mask keeps per head the distances x < {_listed(kept)} (S = "
            f"{policy.S}), but its spans() say {_listed(said)}: each span must be 1 + the "
            "largest distance its head's mask keeps nonzero (or finer, within one distance). "
            "Fix one, or leave spans() out: by default it is read off the mask")


def _check_positions(policy: SpanPolicy) -> None:
    """Refuse a positional policy whose `mask_at` keeps a key its `mask` (what any position
    may keep, which its spans and cost are read off) does not: at query positions 0 .. 3S."""
    dist = distances(policy.S)
    q = torch.arange(3 * policy.S + 1)[None, None, :, None]
    with torch.no_grad():
        at = policy.mask_at(dist.float(), slice(None), q - dist)  # (1, 1, 3S + 1, S)
        m = policy.mask(dist.float(), slice(None))
    kept = torch.ones((), dtype=torch.bool) if at is None else torch.as_tensor(at) != 0
    if m is not None and bool((kept & (torch.as_tensor(m) == 0)).any()):
        raise ValueError(f"span_policy={type(policy).__name__}: its mask_at keeps keys its mask "
                         "does not; mask must keep what any position may keep (spans, window "
                         "and cost are read off it)")


def _listed(t: Tensor) -> str:
    return ", ".join(f"{v:g}" for v in t.tolist())


class LearnedSpan(SpanPolicy):
    """What the adaptive and dynamic spans share (Sukhbaatar et al. 2019, section 3.2): the soft
    mask m_z(x) with ramp R, the penalty lambda (`span_loss`) on the spans, and trimming the
    window to what the widest head can use, in steps of `trim_step` distances."""

    @dataclass(frozen=True)
    class Options:
        ramp: float = option(32.0, "R, the soft mask's ramp: weight 1 up to z, 0 at z + R")
        span_loss: float = option(2e-6, "lambda, the penalty per unit of mean span, added to "
                                  "the loss")
        trim: bool = option(True, "compute only the distances the widest head can use")
        trim_step: int = option(64, "round the trimmed window up to a multiple of this")

        def __post_init__(self) -> None:
            if not self.ramp > 0:
                raise OptionError("ramp", self.ramp, "R > 0")
            if not (isinstance(self.trim_step, int) and self.trim_step > 0):
                raise OptionError("trim_step", self.trim_step, "a positive int")

    learned = True

    def __init__(self, shape: Shape, options: Options) -> None:
        super().__init__(shape, options)
        self.ramp, self.lam = options.ramp, options.span_loss
        self.trim, self.trim_step = options.trim, options.trim_step
        self._window = shape.span  # trimmed as the spans are learned

    @property
    def window(self) -> int:
        """Distances the layer computes: S, or trimmed to the widest span's z + R (`trimmed`)."""
        return self._window

    def trimmed(self, max_z: float) -> int:
        """The window for a widest span z: trimmed to z + R (`trim`), else S."""
        return trimmed_window(max_z, self.ramp, self.S, self.trim_step) if self.trim else self.S


def soft_mask(z: Tensor, dist: Tensor, ramp: float) -> Tensor:
    """m_z(x) = clamp((R + z - x) / R, 0, 1): 1 up to distance z, linear ramp to 0 at z + R."""
    return ((ramp + z - dist) / ramp).clamp(0, 1)


def trimmed_window(max_z: float, ramp: float, span: int, step: int) -> int:
    """Distances a layer must compute: ceil(max z + R) rounded up to a multiple of `step`, <= S."""
    need = math.ceil(max_z + ramp)
    return min(span, step * math.ceil(need / step))
