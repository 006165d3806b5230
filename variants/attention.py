"""One attention layer = a span policy composed with a head-mixing policy."""

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import mixing as mix
from . import span as sp
from .band import distances, valid_keys
from .names import renamed
from .shape import Shape
from .typed import Option, check_api, declared, option, parse

SpanArg = str | type[sp.SpanPolicy]
MixingArg = str | type[mix.MixingPolicy]


@dataclass(frozen=True)
class Heads:
    """The layer's head options: heads h_k (queries and keys), h (softmax), h_v (values),
    default n_heads; widths d_k, d_v, default `width` over their heads, and `width` default
    d_model (talking-heads Table 1 keeps h d_k = h d_v = width as h grows)."""

    h_k: int | None = option(None, "query and key heads (default n_heads; != h needs P_l)")
    h: int | None = option(None, "softmax heads (default n_heads)")
    h_v: int | None = option(None, "value heads (default n_heads; != h needs P_w)")
    d_k: int | None = option(None, "query and key width per head (default width / h_k)")
    d_v: int | None = option(None, "value width per head (default width / h_v)")
    width: int | None = option(None, "the attention's width h_k d_k = h_v d_v (default "
                               "d_model)")


@dataclass(frozen=True)
class LayerOptions(Heads):
    """The layer's own options (model.attn.<option>), beside its policies': `span_policy` and
    `mixing` (registered names or policy classes), the heads (`Heads`) and the query `chunk`
    (None: the device's default)."""

    span_policy: SpanArg = option("fixed", "the span policy: a registered name or a class")
    mixing: MixingArg = option("none", "the head mixing: a registered name or a class")
    chunk: int | None = option(None, "queries per chunk (default: 64 on a CPU, the block on "
                               "a GPU)")


def _check(name: str, value, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"{name}={value!r} is invalid: expected {allowed}")


def policy_class(kind: str, value: SpanArg | MixingArg) -> tuple[type, dict]:
    """A span or mixing policy, by registered name or as a class -> (class, the constructor
    arguments the name fixes); a ValueError naming `kind` for anything else, and for a class
    of the earlier API (options as keyword-only constructor parameters), with the change."""
    names, base = (sp.POLICIES, sp.SpanPolicy) if kind == "span_policy" else (
        mix.POLICIES, mix.MixingPolicy)
    if isinstance(value, str) and value in names:
        found = names[value]
        return found if isinstance(found, tuple) else (found, {})
    _check(kind, value, isinstance(value, type) and issubclass(value, base),
           f"one of {tuple(names)}, or a subclass of {base.__name__}"
           + (renamed(kind, value) if isinstance(value, str) else ""))
    check_api(kind, value, "super().__init__(shape, options)  # shape.h, shape.span, "
              "shape.d_model, ...; options.<name>")
    return value, {}


def layer_options(span_policy: SpanArg = "fixed", mixing: MixingArg = "none"
                  ) -> dict[str, Option]:
    """Every option a layer of these policies takes, as their classes declare them: the
    layer's own (`LayerOptions`) and its span and mixing policies' (their `Options`)."""
    return (declared(LayerOptions)
            | declared(policy_class("span_policy", span_policy)[0].Options)
            | declared(policy_class("mixing", mixing)[0].Options))


def check_heads(d_model: int, n_heads: int, free: set[str], heads: Heads) -> tuple[int, ...]:
    """Validate the heads and widths before anything is allocated; return h_k, h, h_v, d_k,
    d_v with their defaults (`Heads`). h_k and h_v not in `free` (the mixing class's
    `free_heads`) must equal h."""
    h_k, h, h_v, d_k, d_v, width = (heads.h_k, heads.h, heads.h_v, heads.d_k, heads.d_v,
                                    heads.width)
    _check("width", width, width is None or isinstance(width, int) and width > 0,
           "a positive int, or None for d_model")
    width = width or d_model
    h_k, h, h_v = h_k or n_heads, h or n_heads, h_v or n_heads
    for name, heads, dim in (("h_k", h_k, d_k), ("h_v", h_v, d_v)):
        name = name if heads != n_heads else "n_heads"
        _check(name, heads, isinstance(heads, int) and heads > 0, "a positive int")
        if dim is None:
            _check(name, heads, width % heads == 0, f"a divisor of the width {width} "
                   "(model.attn.width, default d_model)")
    if "h_k" not in free:
        _check("h", h, h == h_k, f"h == h_k={h_k} without a logits projection")
    if "h_v" not in free:
        _check("h_v", h_v, h_v == h, f"h_v == h={h} without a weights projection")
    return h_k, h, h_v, d_k or width // h_k, d_v or width // h_v


class Attention(nn.Module):
    """Causal windowed attention over [cache; x] with relative positions.

    Query t attends to itself and the S - 1 positions before it (distances 0..S-1), so no row is
    ever empty. forward(x (B, M, D), cache (B, C, D) | None) -> (B, M, D); the caller keeps the
    last `cache_size` inputs as the next block's cache (Transformer-XL, no gradient through it).
    Masks are applied after the pre-softmax mixing P_l, so mixing never sees -inf.

    The positional arguments are the body's (d_model, heads, span limit, dropout, and `key_pe`
    (S, d_k), a relative-position table the body shares between layers; None: the layer's own).
    The keyword arguments are options: the layer's own (`LayerOptions`: `span_policy` and
    `mixing`, registered names or policy classes; heads h_k, h, h_v; widths d_k, d_v, by default
    `width` over their heads, d_model unless set; query `chunk`), and every other option goes to
    the policy whose `Options` class declares it (`layer_options` lists them). An option no
    part takes is refused. The layer describes itself (`describe`, `flops`, `spans`,
    `span_trace`) and sets learned spans (`set_spans`), so tools never probe its policies.
    """

    def __init__(self, d_model: int, n_heads: int, span: int, dropout: float = 0.0,
                 key_pe: nn.Parameter | None = None, **options) -> None:
        super().__init__()
        own = LayerOptions(**{k: options.pop(k) for k in declared(LayerOptions) if k in options})
        span_cls, span_fixed = policy_class("span_policy", own.span_policy)
        mix_cls, mix_fixed = policy_class("mixing", own.mixing)
        for name, v in (("d_model", d_model), ("n_heads", n_heads), ("span", span)):
            _check(name, v, isinstance(v, int) and v > 0, "a positive int")
        _check("chunk", own.chunk, own.chunk is None or isinstance(own.chunk, int)
               and own.chunk > 0, "a positive int, or None for the device's default")
        _check("dropout", dropout, 0 <= dropout < 1, "a value in [0, 1)")
        takes = {"span": declared(span_cls.Options), "mixing": declared(mix_cls.Options)}
        called = {part: v if isinstance(v, str) else v.__name__  # as messages name them
                 for part, v in (("span policy", own.span_policy), ("mixing", own.mixing))}
        if unknown := sorted(set(options) - set(takes["span"]) - set(takes["mixing"])):
            taken = sorted({*declared(LayerOptions), *takes["span"], *takes["mixing"]})
            raise ValueError(f"{unknown[0]}={options[unknown[0]]!r} is not an option of this "
                             f"layer (span policy {called['span policy']}, mixing "
                             f"{called['mixing']}); it takes: {', '.join(taken)}")
        named = {"h", *mix_cls.heads}  # the span policy takes h heads
        if unused := [k for k in declared(Heads) if k != "width" and k not in named
                      and getattr(own, k) is not None]:
            raise ValueError(f"{unused[0]}={getattr(own, unused[0])!r} is not an option of mixing "
                             f"{called['mixing']}")
        h_k, h, h_v, d_k, d_v = check_heads(d_model, n_heads, mix_cls.free_heads(mix_fixed), own)
        if key_pe is not None:
            _check("key_pe", tuple(key_pe.shape), tuple(key_pe.shape) == (span, d_k),
                   f"a relative-position table of shape (span, d_k) = ({span}, {d_k})")
        self.S, self.chunk = span, own.chunk
        parts = {part: parse(cls.Options, {k: v for k, v in options.items() if k in takes[part]},
                             f"{kind} {called[kind]}")
                 for part, kind, cls in (("span", "span policy", span_cls),
                                         ("mixing", "mixing", mix_cls))}
        shape = Shape(d_model, span, h_k, h, h_v, d_k, d_v, key_pe)
        self.span_policy = span_cls(shape, parts["span"], **span_fixed)
        self.mixing = mix_cls(shape, parts["mixing"], **mix_fixed)
        self.drop = nn.Dropout(dropout)
        self.width = own.width  # None: d_model (describe())

    @property
    def key_pe(self) -> nn.Parameter:
        """(S, d_k) relative-position table p_x of distance x, shared by the heads (key side)."""
        return self.mixing.key_pe

    @property
    def window(self) -> int:
        """Distances the layer computes: S, or trimmed to what its learned spans use (for an
        input-dependent span, that of the last forward)."""
        return self.span_policy.window

    @property
    def cache_size(self) -> int:
        return self.span_policy.cache_size

    def forward(self, x: Tensor, cache: Tensor | None = None) -> Tensor:
        M = x.size(1)
        W = self.span_policy.prepare(x)
        cached = 0 if cache is None else min(cache.size(1), W - 1)
        mem = x if cached == 0 else torch.cat([cache[:, cache.size(1) - cached:], x], dim=1)
        if cached < W - 1:  # start of a stream: pad to a full window, mask the missing keys
            mem = F.pad(mem, (0, 0, W - 1 - cached, 0))
        valid = valid_keys(M, W, cached, x.device) if cached < W - 1 else None
        dist = distances(W, x.device).to(x.dtype)
        q, kv = self.mixing.query(x), self.mixing.memory(mem)
        # Queries in chunks of c: a chunk computes only its c x (c + W - 1) band of keys, not the
        # block's M x (M + W - 1), and on a CPU its intermediates stay small enough for the
        # caches. A GPU is bound by kernel launches at these sizes: one chunk for the block.
        c = self.chunk or (64 if x.device.type == "cpu" else M)
        outs = []
        for i in range(0, M, c):
            rows = slice(i, i + c)
            qi = tuple(t[:, :, rows] for t in q) if isinstance(q, tuple) else q[:, :, rows]
            logits = self.mixing.logits(qi, kv, i, W)
            if valid is not None:
                logits = logits.masked_fill(~valid[rows], float("-inf"))
            m = self.span_policy.mask(dist, rows)
            outs.append(self.mixing.attend(self.drop(self._weights(logits, m)), qi, kv, i))
        return self.mixing.output(torch.cat(outs, dim=2))

    @staticmethod
    def _weights(logits: Tensor, m: Tensor | None) -> Tensor:
        """Softmax over the window, with the span mask when there is one; in fp32 whatever the
        logits' precision (bf16 under autocast): the normalisation is where bf16 loses most."""
        logits = logits.float()
        if m is None:
            return logits.softmax(dim=-1)
        # a = m e^s / sum m e^s: the reference's softmax, times the mask, renormalised. Keys with
        # m = 0 are also set to -inf first: the same weights, but no epsilon, so they get exactly
        # zero gradient and a trimmed window gives the same result.
        w = logits.masked_fill(m == 0, float("-inf")).softmax(dim=-1) * m
        return w / w.sum(dim=-1, keepdim=True)

    def flops(self, s: float, position: bool = False) -> float:
        """Multiply-adds per query attending over s keys, in the adaptive-span paper's #FLOPS
        convention (4 D^2 + 2 D s by default, + talking-heads maps and span gates); `position`
        adds the relative-position term q.p, which the layer executes but #FLOPS leaves out."""
        extra = self.mixing.position_flops(s) if position else 0.0
        return self.span_policy.flops() + self.mixing.flops(s) + extra

    def describe(self) -> dict:
        """What the layer is, as tables and reports name it: span policy, mixing (and whether it
        learns P_l, P_w), heads (h_k query/key, h softmax, h_v value), widths d_k, d_v, the span
        limit S, whether the spans are learned, and `options`: the layer's width and chunk and
        every option of its parts, as each part holds them (`options`, defaults included). Its
        cost per query at s keys is `flops(s)`."""
        m = self.mixing
        mats = m.matrices()
        return {"span_policy": self.span_policy.name, "mixing": m.name, "P_l": "P_l" in mats,
                "P_w": "P_w" in mats, "h_k": m.h_k, "h": m.h, "h_v": m.h_v, "d_k": m.d_k,
                "d_v": m.d_v, "S": self.S, "learned_spans": self.span_policy.learned,
                "options": {"width": self.width, "chunk": self.chunk,
                            **asdict(self.span_policy.options), **asdict(m.options)}}

    def set_spans(self, spans: Tensor | float) -> None:
        """Set the effective spans (z + R, at most S; one value or one per softmax head) as if
        learned, and trim the window to them. A ValueError where the spans are not learned."""
        self.span_policy.set_spans(spans)

    def span_penalty(self) -> Tensor:
        """The span policy's penalty on its spans, lambda (the option `span_loss`) times their
        mean: added to the language-modelling loss."""
        return self.span_policy.loss()

    def spans(self) -> Tensor:
        """(h,) effective span per softmax head (NaN where the span depends on the input)."""
        return self.span_policy.spans()

    def span_trace(self) -> Tensor | None:
        """(B, h, M) effective span of every query of the forward just run, where the span
        depends on the input (dynamic); None otherwise."""
        return self.span_policy.trace()

    def clamp_(self) -> None:
        self.span_policy.clamp_()
