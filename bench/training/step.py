"""One training step as the paper takes it: loss plus the span penalty, per-tensor clipping of
the step, Adagrad (or AdamW) with linear warm-up (then train.schedule), the span clamp; and
torch.compile of a model with a fallback to eager. `bench.measure` times exactly this step
(`graphs` replays it)."""

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

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
    bit for bit, in half the time of a group each (docs/speed.md). For a step captured as a CUDA
    graph (train.compile=graphs on CUDA), AdamW is `capturable` with its lr a device tensor."""
    params = list(model.parameters())
    per_tensor = clips_per_tensor(t)
    groups = [{"params": [p]} for p in params] if per_tensor else [{"params": params}]
    foreach = None if per_tensor else True  # None: torch's default, one tensor at a time on CPU
    if t.optimizer == "adagrad":
        return torch.optim.Adagrad(groups, lr=t.lr, weight_decay=t.weight_decay, foreach=foreach)
    if t.compile == "graphs" and params[0].is_cuda:
        return torch.optim.AdamW(groups, lr=torch.tensor(t.lr, device=params[0].device),
                                 weight_decay=t.weight_decay, foreach=True, capturable=True)
    return torch.optim.AdamW(groups, lr=t.lr, weight_decay=t.weight_decay, foreach=foreach)


def scheduled_lr(t: TrainConfig, step: int) -> float:
    """Linear warm-up from 0 to lr over train.warmup steps; then lr (schedule "constant"), or
    (schedule "cosine") lr * (1 + cos(pi * f)) / 2, f the fraction of the steps after warm-up
    taken: lr at the end of warm-up, 0 after the last step."""
    lr = t.lr * min(1.0, (step + 1) / max(1, t.warmup))
    if t.schedule == "cosine" and step >= t.warmup:
        lr *= (1 + math.cos(math.pi * (step - t.warmup) / max(1, t.steps - t.warmup))) / 2
    return lr


def clip_(opt: torch.optim.Optimizer, t: TrainConfig) -> list[float]:
    """Clip the step (after backward); returns each param group's lr scale.

    clip_mode "param" is the paper's per-module clipping as the adaptive-span reference implements
    it: a tensor whose gradient norm exceeds `clip` has its step scaled by clip / norm (for
    Adagrad this is not gradient clipping, whose scale the accumulator would undo), so the
    scales are read on the host. "global" clips the gradient's total norm with torch's
    clip_grad_norm_ on the device (a CUDA graph can hold it)."""
    params = [p for g in opt.param_groups for p in g["params"]]
    if clips_per_tensor(t):  # a group per tensor (make_optimizer)
        norms = torch.stack([torch.linalg.vector_norm(p.grad) if p.grad is not None else
                             torch.zeros((), device=p.device) for p in params]).tolist()
        return [min(1.0, t.clip / (n + 1e-10)) for n in norms]
    if t.clip > 0:
        torch.nn.utils.clip_grad_norm_(params, t.clip)
    return [1.0] * len(opt.param_groups)


def set_lr(opt: torch.optim.Optimizer, t: TrainConfig, step: int) -> float:
    """Clip the step and set each group's learning rate (the scheduled lr times its clip scale);
    returns the un-clipped learning rate."""
    lr = scheduled_lr(t, step)
    for g, s in zip(opt.param_groups, clip_(opt, t), strict=True):
        if torch.is_tensor(g["lr"]):  # a capturable optimiser's (make_optimizer)
            g["lr"].fill_(lr * s)
        else:
            g["lr"] = lr * s
    return lr


@dataclass(frozen=True)
class Learner:
    """What a training step updates and how: the model, the forward it runs (the model, or its
    torch.compile'd self: `maybe_compile`), its optimiser, the training config and whether the
    forward runs in bf16 autocast (`amp`, bench.training.precision)."""

    model: TransformerLM
    forward: Callable
    opt: torch.optim.Optimizer
    t: TrainConfig
    amp: bool = False


def train_step(lrn: Learner, x: torch.Tensor, y: torch.Tensor, cache: list | None,
               step: int, at: torch.Tensor | None = None) -> tuple[torch.Tensor, float, list]:
    """One optimiser step on x (B, M) -> y after `cache` (at (B,): the text position of
    x[:, 0]): loss plus span penalty, backward, the clipped step, the span clamp. Returns the LM
    loss (fp32, unsynced), learning rate, new cache."""
    with precision.autocast(x.device, lrn.amp):
        logits, cache = lrn.forward(x, cache, at)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
    lrn.opt.zero_grad(set_to_none=True)
    (loss + lrn.model.span_penalty()).backward()
    lr = set_lr(lrn.opt, lrn.t, step)
    lrn.opt.step()
    lrn.model.clamp_()
    return loss, lr, cache


def maybe_compile(model: TransformerLM, mode: bool, x: torch.Tensor) -> Callable:
    """torch.compile'd model (`mode` True), tried on one forward and backward of x (compilation
    is lazy, so that is where an unsupported backend fails); the eager model (`mode` False, or
    with the reason where compiling fails)."""
    if not mode:
        return model
    try:
        fn = torch.compile(model, dynamic=True)
        logits, _ = fn(x, None)
        logits.float().mean().backward()
        model.zero_grad(set_to_none=True)
        return fn
    except Exception as err:  # noqa: BLE001  (any backend failure falls back to eager)
        print(f"torch.compile unavailable ({type(err).__name__}: {str(err).splitlines()[0]}); "
              "running eagerly", file=sys.stderr)
        return model
