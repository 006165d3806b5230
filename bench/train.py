"""Train and evaluate one character-level LM: consecutive blocks with the cache, bpc on dev/test.

python -m bench.train --variant adaptive --data enwik8 --preset tiny --set train.steps=500
"""

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from . import data, plugins, precision, provenance, synthetic
from .config import PRESETS, Config, ConfigError, TrainConfig, parse_sets, resolve, set_dotted
from .flops import analytic_flops, counted_flops, flops_parts
from .memory import keep_heap, peak_memory_mb, start_run
from .model import TransformerLM
from .pairing import build_paired
from .record import Evaluation, RunResult, SpanTrace

LN2 = math.log(2)
Report = Callable[[Evaluation, Path | None], None]


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


def build_model(cfg: Config, vocab_size: int) -> TransformerLM:
    m = cfg.model
    return TransformerLM(vocab_size, m.d_model, m.n_layers, m.n_heads, m.d_ff, m.span,
                         m.variant, m.dropout, m.norm, m.attn, m.shared_pe)


def load_corpus(cfg: Config) -> data.Corpus:
    d, t = cfg.data, cfg.train
    corpus = data.load(d.name, path=d.path, fractions=d.fractions, data_dir=d.data_dir,
                       download=d.download, **d.synthetic)
    need = t.batch_size * (t.block + 1)
    if len(corpus.train) < need:
        raise data.DataError(f"train.block={t.block} x train.batch_size={t.batch_size} needs "
                             f"{need} training tokens; the {d.name} train split has "
                             f"{len(corpus.train)}")
    for split in ("dev", "test"):
        if len(getattr(corpus, split)) <= t.block:
            raise data.DataError(f"train.block={t.block} is longer than the {d.name} {split} "
                                 f"split ({len(getattr(corpus, split))} tokens)")
    return corpus


@dataclass
class SplitScore:
    """bpc over a split, and the spans measured over its scored characters."""

    bpc: float
    head_spans: list[list[float]]  # per layer, per head: mean effective span (z + R, <= S)
    layer_max_span: list[int]  # per layer: the widest window a forward computed

    @property
    def mean_span(self) -> float:
        return float(np.mean([v for layer in self.head_spans for v in layer]))


@torch.no_grad()
def evaluate(model: TransformerLM, split: np.ndarray, batch_size: int, block: int,
             device: torch.device, max_tokens: int | None = None, amp: bool = False
             ) -> SplitScore:
    """bpc over a split (or its first max_tokens), every character once, with the cache; each
    stream first reads the model's reach of preceding text unscored, so the bpc does not depend
    on `batch_size`. Spans are averaged over the scored characters: a dynamic span's z_t + R is
    read from each forward as it runs (adaptive-span Table 3: the mean over the dev set).
    `amp`: in bf16 autocast, the precision the model trained in."""
    was_training = model.training
    model.eval()
    split = split if max_tokens is None else split[: max_tokens + 1]
    total, count, cache = torch.zeros((), device=device, dtype=torch.float64), 0, None
    span_sum = [torch.zeros(b.attn.spans().numel(), device=device, dtype=torch.float64)
                for b in model.blocks]
    widest = [0] * len(model.blocks)
    for x, y in data.eval_batches(split, batch_size, block, model.reach, device=device):
        with precision.autocast(device, amp):
            logits, cache = model(x, cache)
        scored = y != -100
        total += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), ignore_index=-100,
                                 reduction="sum")
        count += int(scored.sum())
        for layer, b in enumerate(model.blocks):
            trace = b.attn.span_trace()  # (B, h, M), or None: the same spans at every position
            if trace is None:
                span_sum[layer] += b.attn.spans().to(device) * scored.sum()
            else:
                span_sum[layer] += (trace * scored[:, None]).sum(dim=(0, 2))
            widest[layer] = max(widest[layer], b.attn.window)
    model.train(was_training)
    return SplitScore(total.item() / count / LN2,
                      [(s / count).tolist() for s in span_sum], widest)


def make_optimizer(model: torch.nn.Module, t: TrainConfig) -> torch.optim.Optimizer:
    """One param group per tensor, so each tensor's step can be scaled on its own (clipping)."""
    groups = [{"params": [p]} for p in model.parameters()]
    if t.optimizer == "adagrad":
        return torch.optim.Adagrad(groups, lr=t.lr)
    return torch.optim.AdamW(groups, lr=t.lr, weight_decay=t.weight_decay)


def set_lr(opt: torch.optim.Optimizer, t: TrainConfig, step: int) -> float:
    """Linear warm-up from 0 to lr, then clipping; returns the un-clipped learning rate.

    clip_mode "param" is the paper's per-module clipping as the adaptive-span reference implements
    it: a tensor whose gradient norm exceeds `clip` has its step scaled by clip / norm (for
    Adagrad this is not gradient clipping, whose scale the accumulator would undo).
    "global" clips the gradient's total norm with torch's clip_grad_norm_.
    """
    lr = t.lr * min(1.0, (step + 1) / max(1, t.warmup))
    params = [g["params"][0] for g in opt.param_groups]
    scale = [1.0] * len(params)
    if t.clip > 0 and t.clip_mode == "param":
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
    (loss + model.span_loss()).backward()
    lr = set_lr(opt, t, step)
    opt.step()
    model.clamp_()
    return loss, lr, cache


def run_peaks(history: list[Evaluation], device: torch.device) -> dict[str, float | None]:
    """The whole run's peaks: the largest of every evaluation window's (resumed processes
    included) and of the window since the last evaluation; peak_cuda_mb None off CUDA."""
    now = peak_memory_mb(device)
    peaks = {k: max([v, *(h[k] for h in history if k in h)]) for k, v in now.items()}
    return {"peak_rss_mb": peaks["peak_rss_mb"], "peak_cuda_mb": peaks.get("peak_cuda_mb")}


def load_checkpoint(path: Path, device: torch.device) -> dict | None:
    """checkpoint.pt, or None with a warning when it cannot be read (a truncated or corrupted
    file is moved aside to checkpoint.pt.corrupt and the run starts fresh, rather than failing
    at every retry)."""
    try:
        saved = torch.load(path, map_location=device, weights_only=True)
        if not isinstance(saved, dict) or not {"model", "opt", "state", "rng"} <= saved.keys():
            raise ValueError("not a bench.train checkpoint")
        return saved
    except Exception as err:  # noqa: BLE001  (garbage raises anything: IndexError, EOFError...)
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        print(f"warning: {path} is unreadable ({type(err).__name__}: "
              f"{str(err).splitlines()[0] if str(err) else ''}); moved to {aside.name}, "
              "training starts fresh", file=sys.stderr, flush=True)
        return None


def count_flops(model: TransformerLM) -> dict:
    """counted_flops()'s counts (flops_counted, flops_executed, flops_cache_reprojection), or
    None for each and flops_error with the reason: a counting failure (an op fvcore's tracer or
    our handles reject) is recorded, never allowed to lose a trained run."""
    try:
        c = counted_flops(model)
        return {"flops_counted": c["flops_counted"], "flops_executed": c["flops_counted_executed"],
                "flops_cache_reprojection": c["cache_reprojection"], "flops_error": None}
    except Exception as err:  # noqa: BLE001  (any tracer failure: the results are kept)
        print(f"warning: counting FLOPs failed ({type(err).__name__}: {err})", file=sys.stderr)
        return {"flops_counted": None, "flops_executed": None, "flops_cache_reprojection": None,
                "flops_error": f"{type(err).__name__}: {err}"}


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


def save_atomic(obj: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def rng_state(device: torch.device) -> dict:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def maybe_compile(model: TransformerLM, enabled: bool, x: torch.Tensor) -> Callable:
    """torch.compile'd model, tried on one forward and backward of x (compilation is lazy, so
    that is where an unsupported backend fails); the eager model, with the reason, otherwise."""
    if not enabled:
        return model
    try:
        fn = torch.compile(model, dynamic=True)
        logits, _ = fn(x)
        logits.float().mean().backward()
        model.zero_grad(set_to_none=True)
        return fn
    except Exception as err:  # noqa: BLE001  (any backend failure falls back to eager)
        print(f"torch.compile unavailable ({type(err).__name__}: {str(err).splitlines()[0]}); "
              "running eagerly", file=sys.stderr)
        return model


def train(cfg: Config, out_dir: Path, *, report: Report | None = None, progress: bool = True,
          resume: bool = True) -> RunResult:
    """Train `cfg` in out_dir (config.json, checkpoint.pt, best.pt, result.json); return the run
    record (result.json is its JSON).

    `report(metrics, checkpoint_path | None)` is called after every evaluation. An existing
    checkpoint.pt is resumed exactly: model, optimiser, schedule, RNG, data position, cache.
    """
    t = cfg.train
    device = provenance.device(t.device)
    keep_heap()
    start_run(device)  # a reused Ray worker: this run's own peak memory
    amp = precision.use_amp(t.amp, device)
    corpus = load_corpus(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = {"config": cfg.model_dump(mode="json"), "seed": t.seed, "dataset": corpus.meta,
            "precision": precision.name(amp), **provenance.record()}
    (out_dir / "config.json").write_text(json.dumps(info, indent=2))

    torch.manual_seed(t.seed)  # dropout; the weights are drawn per (seed, name, shape)
    model = build_paired(lambda: build_model(cfg, corpus.vocab_size), t.seed).to(device)
    step_fn = maybe_compile(model, t.compile, torch.zeros(t.batch_size, t.block, dtype=torch.long,
                                                       device=device))
    opt = make_optimizer(model, t)
    eval_bs = t.eval_batch_size or t.batch_size

    state = {"step": 0, "pos": 0, "tokens": 0, "train_time": 0.0, "best_dev": math.inf,
             "bad_evals": 0, "losses": [], "history": []}
    cache = None
    ckpt = out_dir / "checkpoint.pt"
    if resume and ckpt.exists() and (saved := load_checkpoint(ckpt, device)) is not None:
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        state, cache = saved["state"], saved["cache"]
        set_rng_state(saved["rng"], device)

    def checkpoint() -> Path:
        save_atomic({"model": model.state_dict(), "opt": opt.state_dict(),
                     "state": state, "cache": cache,
                     "rng": rng_state(device)}, ckpt)
        return ckpt

    batches = data.train_batches(corpus.train, t.batch_size, t.block, start=state["pos"],
                                 device=device)
    bar = tqdm(total=t.steps, initial=state["step"], disable=not progress, dynamic_ncols=True,
               desc=f"{cfg.model.variant}")
    stopped_early = False
    while state["step"] < t.steps and not stopped_early:
        tic = time.perf_counter()
        pos, x, y = next(batches)
        if pos == 0:
            cache = None  # start of the streams: no preceding text
        loss, lr, cache = train_step(model, step_fn, opt, t, x, y, cache, state["step"], amp)
        loss_v = loss.item()
        if not math.isfinite(loss_v):
            raise Diverged(f"training loss is {loss_v} at step {state['step'] + 1}")
        state["train_time"] += time.perf_counter() - tic
        state["step"] += 1
        state["pos"] = pos + t.block
        state["tokens"] += x.numel()
        state["losses"].append(loss_v)
        tok_s = state["tokens"] / state["train_time"]
        bar.update(1)
        bar.set_postfix(bpc=f"{loss_v / LN2:.3f}", tok_s=f"{tok_s:,.0f}")

        last = state["step"] == t.steps
        if state["step"] % t.eval_every == 0 or last:
            dev = evaluate(model, corpus.dev, eval_bs, t.block, device, t.eval_tokens, amp)
            dev_bpc = dev.bpc
            improved = dev_bpc < state["best_dev"]
            if improved:
                state["best_dev"], state["bad_evals"] = dev_bpc, 0
                save_atomic({"model": model.state_dict()}, out_dir / "best.pt")
            else:
                state["bad_evals"] += 1
            stopped_early = t.patience is not None and state["bad_evals"] >= t.patience
            metrics = Evaluation(
                step=state["step"], tokens=state["tokens"],
                train_bpc=float(np.mean(state["losses"][-t.eval_every:])) / LN2,
                dev_bpc=dev_bpc, lr=lr, tokens_per_s=tok_s, train_time_s=state["train_time"],
                mean_span=dev.mean_span, **peak_memory_mb(device))
            state["history"].append(metrics)
            if progress:
                bar.write(f"step {state['step']}: dev bpc {dev_bpc:.4f}")
            path = checkpoint()
            if report:
                report(metrics, path)
        elif state["step"] % t.checkpoint_every == 0:
            checkpoint()
    bar.close()

    best = torch.load(out_dir / "best.pt", map_location=device, weights_only=True)
    model.load_state_dict(best["model"])
    dev, test = (evaluate(model, split, eval_bs, t.block, device, amp=amp)
                 for split in (corpus.dev, corpus.test))
    counted = count_flops(model)
    # spans and #FLOPS as measured over the dev split: for a dynamic span, the mean z_t + R and
    # the widest window its forwards computed (for the others, their spans and windows)
    mean_spans = [float(np.mean(h)) for h in dev.head_spans]
    result = RunResult(
        dev_bpc=dev.bpc, test_bpc=test.bpc,
        steps=state["step"], tokens=state["tokens"], stopped_early=stopped_early,
        tokens_per_s=state["tokens"] / max(state["train_time"], 1e-9),
        **run_peaks(state["history"], device),
        params=sum(p.numel() for p in model.parameters()),
        params_non_embedding=sum(p.numel() for n, p in model.named_parameters()
                                 if not n.startswith(("emb.", "head."))),
        flops_full=analytic_flops(model, "full"),
        flops_mean=analytic_flops(model, spans=mean_spans),
        flops_max=analytic_flops(model, spans=dev.layer_max_span),
        flops_position=flops_parts(model, spans=dev.layer_max_span)["position"],
        **counted,
        mean_span=dev.mean_span, layer_max_span=dev.layer_max_span, head_spans=dev.head_spans,
        # the floor of what this model can see: L layers of span S reach L (S - 1) + 1 back
        floor_bpc=synthetic.floor_at(corpus.meta, cfg.model.n_layers * (cfg.model.span - 1) + 1),
        entropy_rate=corpus.meta.get("floor_bpc"), prefix=corpus.meta.get("prefix", False),
        layer=model.blocks[0].attn.describe(),  # what the variant is, for tables and reports
        mixing=mixing_matrices(model),
        dynamic_trace=dynamic_trace(model, corpus.dev, corpus.meta.get("symbols"), device),
        history=state["history"],
    )
    (out_dir / "result.json").write_text(result.to_json())
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.train", description=__doc__.split("\n")[0])
    p.add_argument("--variant", help="registered variant name (model.variant)")
    p.add_argument("--data", help="dataset: synthetic, enwik8, text8, file (data.name)")
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. train.steps=500 (repeatable)")
    p.add_argument("--out", type=Path, help="run directory (default results/runs/<variant>-<time>)")
    p.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    try:
        plugins.load()
        tree = parse_sets(args.sets)
        if args.variant:
            set_dotted(tree, "model.variant", args.variant)
        if args.data:
            set_dotted(tree, "data.name", args.data)
        cfg = resolve(tree, args.preset)
        out = args.out or provenance.ROOT / "results" / "runs" / (
            f"{cfg.model.variant}-{time.strftime('%Y%m%d-%H%M%S')}")
        r = train(cfg, out, progress=not args.no_progress, resume=not args.fresh)
    except (ConfigError, data.DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Diverged as err:
        print(f"diverged: {err}", file=sys.stderr)
        return 1
    label = " (on a prefix of the dataset: not comparable with full-dataset bpc)" if r.prefix \
        else ""
    floor = f"  floor {r.floor_bpc:.4f}" if r.floor_bpc else ""
    print(f"dev bpc {r.dev_bpc:.4f}  test bpc {r.test_bpc:.4f}{floor}{label}\n"
          f"mean span {r.mean_span:.1f}  params {r.params:,}  "
          f"tokens/s {r.tokens_per_s:,.0f}  flops/token {r.flops_max:,.0f}\nrun dir {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
