"""Paired initialisation: seed k gives every variant the same initial weights wherever it can.

Modules draw their initial weights from the global RNG in the order they are built, so a variant
that builds one extra tensor (a talking-heads P_l, a dynamic-span gate) shifts every draw after
it, and `fixed` and `talking-heads` at the same seed would start from unrelated feed-forward
weights. `build_paired` builds the model as usual while recording, for every tensor, the last
random draw that wrote it (the init function and its arguments), then redraws each such tensor
with that same call from a generator seeded by (seed, parameter name, shape). So:

- every same-named, same-shaped parameter is identical across variants (and across grid values
  that leave it alone, e.g. the embedding at any number of heads) at one seed;
- each tensor keeps its own init distribution: the redraw is the module's own call
  (`uniform_(-b, b)`, `normal_()`, `randn(...)`), only its random stream changes;
- deterministic inits (LayerNorm ones, span z, constant biases, an identity mixing matrix) are
  kept, and so is a tensor computed from a draw (GBMA's scaled uniforms, I + noise * N for a
  noisy talking-heads matrix): those exist in one family of variants only.

The build runs on a fork of the global RNG, so after it every variant's dropout stream is the
same too (the trainer seeds it).
"""

import hashlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

# random in-place inits: Tensor methods, and the torch.nn.init functions (which dispatch as one
# call with the tensor as `tensor=`); each takes a `generator`
RANDOM = ("uniform_", "normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
          "xavier_normal_", "trunc_normal_", "orthogonal_")
FACTORIES = ("randn", "rand")  # tensor factories the variants draw parameters with
Redraw = Callable[[torch.Tensor, torch.Generator], object]


class _Draws(TorchFunctionMode):
    """Records, by storage address and shape, how to redraw the last random call that wrote each
    tensor. A later non-random in-place write (fill_, zero_, copy_, constant_) forgets it, and so
    does any new tensor at that address (a freed draw's memory reused by a computed tensor)."""

    def __init__(self) -> None:
        super().__init__()
        self.redraw: dict[int, tuple[torch.Size, Redraw]] = {}

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        target = args[0] if args else kwargs.get("tensor")
        if name.endswith("_") and not name.endswith("__") and isinstance(target, torch.Tensor):
            if name not in RANDOM:
                self.redraw.pop(target.data_ptr(), None)
            elif args:
                self.redraw[target.data_ptr()] = (target.shape, lambda t, gen: func(
                    t, *args[1:], **{**kwargs, "generator": gen}))
            else:
                self.redraw[target.data_ptr()] = (target.shape, lambda t, gen: func(
                    **{**kwargs, "tensor": t, "generator": gen}))
        elif isinstance(out, torch.Tensor) and not any(
                isinstance(a, torch.Tensor) and a.data_ptr() == out.data_ptr() for a in args):
            self.redraw.pop(out.data_ptr(), None)  # a new tensor (not a view of an argument)
            if name in FACTORIES:
                self.redraw[out.data_ptr()] = (out.shape, lambda t, gen: t.copy_(
                    func(*args, **{**kwargs, "generator": gen})))
        return out


def tensor_seed(seed: int, name: str, shape: torch.Size) -> int:
    """A 63-bit seed from (seed, parameter name, shape), the same in every process."""
    text = f"{seed}:{name}:{tuple(shape)}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") >> 1


@torch.no_grad()
def build_paired(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    """build() on a fork of the global RNG, then every randomly initialised parameter redrawn by
    its own init call from a generator seeded by (seed, name, shape). See the module doc."""
    draws = _Draws()
    with torch.random.fork_rng(devices=[]), draws:
        model = build()
    for name, p in model.named_parameters():
        shape, redraw = draws.redraw.get(p.data_ptr(), (None, None))
        if shape == p.shape:  # else deterministic, or computed from a draw: kept as built
            redraw(p.data, torch.Generator(p.device).manual_seed(tensor_seed(seed, name, p.shape)))
    return model
