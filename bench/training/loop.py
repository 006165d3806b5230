"""Train and evaluate one character-level LM: consecutive blocks with the cache, dev evaluation
and checkpoints as it goes, then bpc on dev and test from the best checkpoint, and the run record
(`RunResult`, result.json)."""

import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from bench import data, provenance
from bench.config import Config, ConfigError, ModelConfig
from bench.model import TransformerLM, create_model
from bench.model.body import reach
from bench.model.cost import cost
from bench.model.count import counted_flops
from bench.record import Evaluation, RunResult

from . import precision
from .checkpoint import load_checkpoint, rng_state, save_atomic, set_rng_state
from .evaluate import LN2, dynamic_trace, evaluate, mixing_matrices
from .memory import keep_heap, peak_memory_mb, start_run
from .step import make_optimizer, maybe_compile, train_step

Report = Callable[[Evaluation, Path | None], None]


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


def load_corpus(cfg: Config) -> data.Corpus:
    """The config's corpus (`bench.data.build`), checked against the model and the training
    sizes: a DataError when a probe's episodes outgrow the span or a split cannot fill the
    blocks."""
    d, t = cfg.data, cfg.train
    corpus = data.build(d.name, **d.options)
    need = t.batch_size * (t.block + 1)
    if len(corpus.train) < need:
        raise data.DataError(f"train.block={t.block} x train.batch_size={t.batch_size} needs "
                             f"{need} training tokens; the {d.name} train split has "
                             f"{len(corpus.train)}")
    for key, need in corpus.needs_span().items():
        if cfg.model.span < need:
            raise data.DataError(f"{key}: an episode needs model.span >= {need} (one head's "
                                 "window must hold it from its last answer back to its "
                                 f"delimiter); model.span is {cfg.model.span}: fewer keys or "
                                 "queries, or a longer span")
    for split in ("dev", "test"):
        if len(corpus.split(split)) <= t.block:
            raise data.DataError(f"train.block={t.block} is longer than the {d.name} {split} "
                                 f"split ({len(corpus.split(split))} tokens)")
    return corpus


def limit_reach(m: ModelConfig) -> int:
    """`bench.model.reach` at the span limit S, every layer caching S - 1 states: L (S - 1).
    A run's floors are those of its architecture, whatever windows its learned spans trim to."""
    return reach([m.span - 1] * m.n_layers)


def run_peaks(history: list[Evaluation], device: torch.device) -> dict[str, float | None]:
    """The whole run's peaks: the largest of every evaluation window's (resumed processes
    included) and of the window since the last evaluation; peak_cuda_mb None off CUDA."""
    now = peak_memory_mb(device)
    peaks = {k: max([v, *(h[k] for h in history if k in h)]) for k, v in now.items()}
    return {"peak_rss_mb": peaks["peak_rss_mb"], "peak_cuda_mb": peaks.get("peak_cuda_mb")}


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


def train(cfg: Config, out_dir: Path, *, report: Report | None = None, progress: bool = True,
          resume: bool = True, planned: str | None = None) -> RunResult:
    """Train `cfg` in out_dir (config.json, checkpoint.pt, best.pt, result.json); return the run
    record (result.json is its JSON).

    `report(metrics, checkpoint_path | None)` is called after every evaluation. An existing
    checkpoint.pt is resumed exactly: model, optimiser, schedule, RNG, data position, cache.
    `planned`: the precision the run's identity holds (a sweep's trial hash); a device that
    resolves train.amp to another refuses the run (ConfigError) before anything is written.
    """
    t = cfg.train
    device = provenance.device(t.device)
    amp = precision.resolve(t.amp, device, say=True)
    if planned is not None and precision.name(amp) != planned:
        rec = provenance.record(device)
        raise ConfigError(f"train.amp={str(t.amp).lower()}: the trial was planned in {planned}, "
                          f"but this worker ({rec['gpu'] or rec['cpu']}, {rec['cpu_capability']}) "
                          f"runs it in {precision.name(amp)}; pin train.amp (true or false) "
                          "when the driver and the workers differ")
    keep_heap()
    start_run(device)  # a reused Ray worker: this run's own peak memory
    corpus = load_corpus(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = {"config": cfg.model_dump(mode="json"), "seed": t.seed, "dataset": corpus.describe(),
            "precision": precision.name(amp), **provenance.record(device)}
    (out_dir / "config.json").write_text(json.dumps(info, indent=2))

    torch.manual_seed(t.seed)  # dropout; the weights are drawn per (seed, name, shape)
    model = create_model(cfg.model, corpus.vocab_size, t.seed).to(device)
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
            dev = evaluate(model, corpus.dev, eval_bs, t.block, device, t.eval_tokens, amp,
                           corpus.targets("dev"))
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
                mean_span=dev.mean_span, probe_bpc=dev.probes, **peak_memory_mb(device))
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
    dev, test = (evaluate(model, corpus.split(split), eval_bs, t.block, device, amp=amp,
                          targets=corpus.targets(split)) for split in ("dev", "test"))
    counted = count_flops(model)
    seen = limit_reach(cfg.model) + 1  # the floor of what this model can see: its reach and itself
    # spans and #FLOPS as measured over the dev split: for a dynamic span, the mean z_t + R and
    # the widest window its forwards computed (for the others, their spans and windows)
    mean_spans = [float(np.mean(h)) for h in dev.head_spans]
    result = RunResult(
        dev_bpc=dev.bpc, test_bpc=test.bpc,
        steps=state["step"], tokens=state["tokens"], stopped_early=stopped_early,
        tokens_per_s=state["tokens"] / max(state["train_time"], 1e-9),
        **run_peaks(state["history"], device),
        **cost(model, mean_spans, dev.layer_max_span), **counted,
        mean_span=dev.mean_span, layer_max_span=dev.layer_max_span, head_spans=dev.head_spans,
        floor_bpc=corpus.floor_bpc(seen), probe_bpc=dev.probes, probe_bpc_test=test.probes,
        probe_floor=corpus.target_floors(seen),
        entropy_rate=corpus.floor_bpc(), prefix=corpus.meta.get("prefix", False),
        layer=model.blocks[0].attn.describe(),  # what the variant is, for tables and reports
        mixing=mixing_matrices(model),
        dynamic_trace=dynamic_trace(model, corpus.dev, corpus.meta.get("symbols"), device),
        history=state["history"],
    )
    (out_dir / "result.json").write_text(result.to_json())
    return result


