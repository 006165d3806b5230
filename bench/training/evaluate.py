"""Scoring a model on a split: bpc over every character once, with the cache and each stream's
preceding context, and the spans measured over the scored characters; what a run records about
its layers (mixing matrices, the dynamic-span trace)."""

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from bench import data
from bench.model import TransformerLM
from bench.record import SpanTrace

from . import precision

LN2 = math.log(2)


@dataclass
class SplitScore:
    """bpc over a split (and over each probe's target symbols), and the spans measured over its
    scored characters."""

    bpc: float
    head_spans: list[list[float]]  # per layer, per head: mean effective span (z + R, <= S)
    layer_max_span: list[int]  # per layer: the widest window a forward computed
    probes: dict[str, float]  # per target set of the corpus (`rest` included): its bpc

    @property
    def mean_span(self) -> float:
        return float(np.mean([v for layer in self.head_spans for v in layer]))


@dataclass(frozen=True)
class Reading:
    """How a split is read for scoring: `batch_size` streams in blocks of `block`, on `device`,
    in bf16 autocast where `amp` (the precision the model trained in)."""

    batch_size: int
    block: int
    device: torch.device
    amp: bool = False


@torch.no_grad()
def evaluate(model: TransformerLM, split: np.ndarray, how: Reading,
             max_tokens: int | None = None,
             targets: dict[str, np.ndarray] | None = None) -> SplitScore:
    """bpc over a split (or its first max_tokens), every character once, with the cache; each
    stream first reads the model's reach of preceding text unscored, so the bpc does not depend
    on `batch_size`. `targets` (a corpus's `targets(split)`: per target set, a bool mask over
    the split; sets may overlap) also scores each set's symbols apart, batched exactly as the
    text. Spans are
    averaged over the scored characters: a dynamic span's z_t + R is read from each forward as
    it runs (adaptive-span Table 3: the mean over the dev set)."""
    batch_size, block, device, amp = how.batch_size, how.block, how.device, how.amp
    was_training = model.training
    model.eval()
    split = split if max_tokens is None else split[: max_tokens + 1]
    names = list(targets or {})
    label = np.zeros(len(split), np.int64)  # bit i: the symbol is in target set i
    for i, name in enumerate(names):
        label[targets[name][: len(split)]] |= 1 << i
    bit = torch.arange(len(names), device=device)
    probe_nll = torch.zeros(len(names), device=device, dtype=torch.float64)
    probe_count = torch.zeros(len(names), device=device, dtype=torch.float64)
    labels = data.eval_batches(label, batch_size, block, model.reach, device=device)
    total, count, cache = torch.zeros((), device=device, dtype=torch.float64), 0, None
    span_sum = [torch.zeros(b.attn.spans().numel(), device=device, dtype=torch.float64)
                for b in model.blocks]
    widest = [0] * len(model.blocks)
    for x, y, at in data.eval_batches(split, batch_size, block, model.reach, device=device):
        with precision.autocast(device, amp):
            logits, cache = model(x, cache, at)
        scored = y != -100
        nll = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), ignore_index=-100,
                              reduction="none").double()
        total += nll.sum()
        count += int(scored.sum())
        lab = next(labels)[1].flatten()
        if names:
            at = lab != -100
            member = ((lab[at, None] >> bit) & 1).double()  # (scored, sets)
            probe_nll += nll[at] @ member
            probe_count += member.sum(0)
        for layer, b in enumerate(model.blocks):
            trace = b.attn.span_trace()  # (B, h, M), or None: the same spans at every position
            if trace is None:
                span_sum[layer] += b.attn.spans().to(device) * scored.sum()
            else:
                span_sum[layer] += (trace * scored[:, None]).sum(dim=(0, 2))
            widest[layer] = max(widest[layer], b.attn.window)
    model.train(was_training)
    probes = (probe_nll / probe_count / LN2).tolist()
    return SplitScore(total.item() / count / LN2, [(s / count).tolist() for s in span_sum],
                      widest, dict(zip(names, probes, strict=True)))


def mixing_matrices(model: TransformerLM) -> list[dict]:
    """Per layer, the head-mixing matrices its mixing policy learns (talking-heads P_l (h_k, h)
    and P_w (h, h_v))."""
    return [{k: P.detach().cpu().tolist() for k, P in b.attn.mixing.matrices().items()}
            for b in model.blocks]


@torch.no_grad()
def dynamic_trace(model: TransformerLM, split: np.ndarray, symbols: str | None,
                  device: torch.device, n: int = 300) -> SpanTrace | None:
    """Effective span z_t + R along the first n characters of a split, averaged over layers and
    heads (adaptive-span Figure 5); None for models whose spans do not depend on the input."""
    was_training = model.training
    model.eval()
    ids = np.asarray(split[:n], dtype=np.int64)
    model(torch.from_numpy(ids)[None].to(device))
    traces = [b.attn.span_trace() for b in model.blocks]
    model.train(was_training)
    if any(t is None for t in traces):
        return None
    z = torch.stack([t[0].mean(dim=0) for t in traces]).mean(0)  # (n,)
    text = "".join(symbols[i] for i in ids) if symbols else bytes(ids.tolist()).decode("latin-1")
    return SpanTrace(text=text, z=z.cpu().tolist())
