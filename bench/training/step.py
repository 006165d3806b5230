"""One training step as the paper takes it: loss plus the span penalty, per-tensor clipping of
the step, Adagrad (or AdamW) with linear warm-up, the span clamp; and torch.compile of a model
with a fallback to eager. `bench.measure` times exactly this step."""

import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bench.config import TrainConfig
from bench.model import TransformerLM

from . import precision


def clips_per_tensor(t: TrainConfig) -> bool:
    """clip_mode "param" with a clip: each tensor's step is scaled on its own (`set_lr`)."""
    return t.clip > 0 and t.clip_mode == "param"


def make_optimizer(model: torch.nn.Module, t: TrainConfig) -> torch.optim.Optimizer:
    """Adagrad or AdamW. Where each tensor's step is clipped on its own, one param group per
    tensor; otherwise one group, stepped as one `foreach` pass: per tensor the same arithmetic,
    bit for bit, in half the time of a group each (docs/speed.md)."""
    params = list(model.parameters())
    per_tensor = clips_per_tensor(t)
    groups = [{"params": [p]} for p in params] if per_tensor else [{"params": params}]
    foreach = None if per_tensor else True  # None: torch's default, one tensor at a time on CPU
    if t.optimizer == "adagrad":
        return torch.optim.Adagrad(groups, lr=t.lr, weight_decay=t.weight_decay, foreach=foreach)
    return torch.optim.AdamW(groups, lr=t.lr, weight_decay=t.weight_decay, foreach=foreach)


def set_lr(opt: torch.optim.Optimizer, t: TrainConfig, step: int) -> float:
    """Linear warm-up from 0 to lr, then clipping; returns the un-clipped learning rate.

    clip_mode "param" is the paper's per-module clipping as the adaptive-span reference implements
    it: a tensor whose gradient norm exceeds `clip` has its step scaled by clip / norm (for
    Adagrad this is not gradient clipping, whose scale the accumulator would undo).
    "global" clips the gradient's total norm with torch's clip_grad_norm_.
    """
    lr = t.lr * min(1.0, (step + 1) / max(1, t.warmup))
    params = [p for g in opt.param_groups for p in g["params"]]
    scale = [1.0] * len(opt.param_groups)
    if clips_per_tensor(t):  # a group per tensor (make_optimizer)
        norms = torch.stack([torch.linalg.vector_norm(p.grad) if p.grad is not None else
                             torch.zeros((), device=p.device) for p in params]).tolist()
        scale = [min(1.0, t.clip / (n + 1e-10)) for n in norms]
    elif t.clip > 0:
        torch.nn.utils.clip_grad_norm_(params, t.clip)
    for g, s in zip(opt.param_groups, scale, strict=True):
        g["lr"] = lr * s
    return lr


def train_step(model: TransformerLM, step_fn: Callable, opt: torch.optim.Optimizer,
               t: TrainConfig, x: torch.Tensor, y: torch.Tensor, cache: list | None,
               step: int, amp: bool = False) -> tuple[torch.Tensor, float, list]:
    """One optimiser step on x (B, M) -> y after `cache`: loss plus span penalty, backward, the
    clipped step, the span clamp; the forward in bf16 autocast where `amp` (bench.precision).
    Returns the LM loss (fp32, unsynced), learning rate, new cache."""
    with precision.autocast(x.device, amp):
        logits, cache = step_fn(x, cache)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
    opt.zero_grad(set_to_none=True)
    (loss + model.span_penalty()).backward()
    lr = set_lr(opt, t, step)
    opt.step()
    model.clamp_()
    return loss, lr, cache


def maybe_compile(model: TransformerLM, mode: bool | str, x: torch.Tensor) -> Callable:
    """torch.compile'd model (`mode` True), tried on one forward and backward of x (compilation
    is lazy, so that is where an unsupported backend fails); the eager model (`mode` False, or
    with the reason where compiling fails).

    "graphs": the forward and backward captured as CUDA graphs (torch.compile's
    "reduce-overhead" mode, static shapes), replayed at every step, so a small model's step is
    not bound by kernel launches. Each step marks a new iteration and copies out the cache it
    hands to the next (a replay overwrites its outputs); a stream's first block, which has no
    cache, is captured once more. CUDA only: elsewhere it runs eagerly and says why."""
    if not mode:
        return model
    graphs = mode == "graphs"
    if graphs and x.device.type != "cuda":
        print(f"train.compile=graphs: CUDA graphs need a CUDA device, not {x.device.type}; "
              "running eagerly", file=sys.stderr)
        return model
    try:
        fn = torch.compile(model, mode="reduce-overhead", dynamic=False) if graphs else \
            torch.compile(model, dynamic=True)
        step = _replayed(fn) if graphs else fn
        logits, _ = step(x, None)
        logits.float().mean().backward()
        model.zero_grad(set_to_none=True)
        return step
    except Exception as err:  # noqa: BLE001  (any backend failure falls back to eager)
        what = "CUDA graph capture" if graphs else "torch.compile"
        print(f"{what} unavailable ({type(err).__name__}: {str(err).splitlines()[0]}); "
              "running eagerly", file=sys.stderr)
        return model


def _replayed(fn: Callable) -> Callable:
    """A captured model's step: a new iteration for CUDA graph trees, and the cache copied out
    of the graph's output buffers, which the next replay overwrites."""
    def step(x: torch.Tensor, cache: list | None) -> tuple[torch.Tensor, list]:
        torch.compiler.cudagraph_mark_step_begin()
        logits, new_cache = fn(x, cache)
        return logits, [c.clone() for c in new_cache]

    return step
