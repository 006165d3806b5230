"""The whole training step as one CUDA graph (`train.compile=graphs`).

A main-job model on a GPU launches a few hundred small kernels per step (forward, backward,
clip, optimiser) and its step takes as long as the launches. Here the step (forward, loss, span
penalty, backward, the global clip, the AdamW step and the span clamp) is recorded once with
`torch.cuda.graph` and replayed every step: one launch per step. What a replay needs to stay
the same step:

- static shapes: the batch is copied into a static (B, M) buffer, and the cache into static
  (B, C_l, D) buffers that the graph itself updates with the step's new cache. Steps whose
  cache has another shape (a stream's first blocks, while the cache fills) run eagerly; a
  learned span that trims its window is refused by the config (`Config._static_shapes`).
- an optimiser whose step reads nothing on the host: AdamW with `capturable=True` and its
  learning rate a device tensor, filled before each replay (train.schedule); the global
  clip's norm stays on the device. Adagrad's step and per-tensor clipping read values on the
  host, so the config refuses them (`Config._static_shapes`).
- warm-up before capture: the first steps at the steady shape run eagerly on a side stream
  (cuBLAS and the optimiser's state are set up lazily), as torch's CUDA graph notes ask.

On a CPU it says why and runs the eager step, the same run to the last digit.
"""

import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from . import precision
from .step import Learner, clip_, scheduled_lr, train_step

Step = Callable[[torch.Tensor, torch.Tensor, list | None, int, torch.Tensor | None],
                tuple[torch.Tensor, float, list]]
WARMUP = 3  # eager steps at the steady shape before capture


def make_step(lrn: Learner, device: torch.device) -> Step:
    """The trainer's step, `(x, y, cache, step, at) -> (loss, lr, new cache)`: captured as a CUDA
    graph where train.compile is "graphs" and the device is CUDA, else the eager `train_step`
    (saying why where graphs were asked for)."""
    if lrn.t.compile == "graphs" and device.type == "cuda":
        return CapturedStep(lrn)
    if lrn.t.compile == "graphs":
        print(f"train.compile=graphs: CUDA graphs need a CUDA device, not {device.type}; "
              "running eagerly", file=sys.stderr)

    def eager(x: torch.Tensor, y: torch.Tensor, cache: list | None, step: int,
              at: torch.Tensor | None = None):
        return train_step(lrn, x, y, cache, step, at)

    return eager


class CapturedStep:
    """One training step replayed from a CUDA graph once the cache's shape is steady.

    x, y: (B, M) token ids; cache: per layer (B, C_l, D) or None; at (B,): the text position of
    x[:, 0] (a positional mask's; a static buffer like x). Returns the step's loss (a
    device scalar, not read: the trainer reads a span of steps' losses at once), the scheduled
    learning rate, and the new cache (the graph's own buffers: hand them back unchanged, or any
    other cache, which is copied in)."""

    def __init__(self, lrn: Learner) -> None:
        self.lrn = lrn
        self.model, self.opt, self.t, self.amp = lrn.model, lrn.opt, lrn.t, lrn.amp
        self.graph: torch.cuda.CUDAGraph | None = None
        self.shape: tuple | None = None  # the steady cache shapes: a step's in equals its out
        self.warm = 0

    def __call__(self, x: torch.Tensor, y: torch.Tensor, cache: list | None,
                 step: int, at: torch.Tensor | None = None) -> tuple[torch.Tensor, float, list]:
        lr = scheduled_lr(self.t, step)
        shape = None if cache is None else tuple(c.shape for c in cache)
        if self.graph is None and shape is not None and shape == self.shape and \
                self.warm >= WARMUP:
            self._capture(x, y, cache, at)
        if self.graph is not None and shape == self.shape:
            return self._replay(x, y, cache, lr, at)
        loss, new = self._eager(x, y, cache, step, at)
        if self.graph is None:  # count the eager steps at a steady shape (in = out)
            steady = shape is not None and shape == tuple(c.shape for c in new)
            self.warm = self.warm + 1 if steady and shape == self.shape else int(steady)
            self.shape = shape if steady else None
        return loss, lr, new

    def _eager(self, x, y, cache, step, at):
        """The eager step, on a side stream (torch's warm-up before capture)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            loss, _, new = train_step(self.lrn, x, y, cache, step, at)
        torch.cuda.current_stream().wait_stream(side)
        return loss, new

    def _capture(self, x, y, cache, at) -> None:
        """Record the step on static buffers; nothing runs until the first replay."""
        for g in self.opt.param_groups:  # a restored optimiser may hold its lr as a float
            if not torch.is_tensor(g["lr"]):
                g["lr"] = torch.tensor(g["lr"], device=x.device)
        self.x, self.y = torch.empty_like(x), torch.empty_like(y)
        self.at = None if at is None else torch.empty_like(at)
        self.cache = [torch.empty_like(c) for c in cache]
        self.opt.zero_grad(set_to_none=True)  # the graph's backward allocates the grads
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            with precision.autocast(x.device, self.amp, cache=False):
                logits, new = self.model(self.x, self.cache, self.at)
                self.loss = F.cross_entropy(logits.flatten(0, 1).float(), self.y.flatten())
            (self.loss + self.model.span_penalty()).backward()
            clip_(self.opt, self.t)
            self.opt.step()
            self.model.clamp_()
            for c, n in zip(self.cache, new, strict=True):
                c.copy_(n)

    def _replay(self, x, y, cache, lr, at):
        self.x.copy_(x)
        self.y.copy_(y)
        if self.at is not None:
            self.at.copy_(at)
        if cache is not self.cache:
            for c, n in zip(self.cache, cache, strict=True):
                c.copy_(n)
        for g in self.opt.param_groups:
            g["lr"].fill_(lr)
        self.graph.replay()
        return self.loss.clone(), lr, self.cache  # the next replay overwrites self.loss
