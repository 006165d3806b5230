"""Train and evaluate one character-level LM: consecutive blocks with the cache, dev evaluation
and checkpoints as it goes, then bpc on dev and test from the best checkpoint, and the run record
(`RunResult`, result.json; `summary.final_record`)."""

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from bench import data, provenance
from bench.config import Config, ConfigError, TrainConfig
from bench.model import TransformerLM, create_model
from bench.record import Evaluation, RunResult

from . import precision
from .checkpoint import load_checkpoint, rng_state, save_atomic, set_rng_state
from .evaluate import LN2, evaluate
from .graphs import make_step
from .memory import keep_heap, peak_memory_mb, start_run
from .state import LoopState, Run
from .step import Learner, make_optimizer, maybe_compile
from .summary import final_record

Report = Callable[[Evaluation, Path | None], None]


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
    amp = _precision(t.amp, device, planned)
    keep_heap()
    start_run(device)  # a reused Ray worker: this run's own peak memory
    corpus = cfg.corpus()
    _describe(cfg, out_dir, corpus, amp, device)
    torch.manual_seed(t.seed)  # dropout; the weights are drawn per (seed, name, shape)
    model = create_model(cfg.model, corpus.vocab_size, t.seed).to(device)
    run = Run(cfg, corpus, model, device, amp, out_dir)
    forward = maybe_compile(model, t.compile is True, torch.zeros(
        t.batch_size, t.block, dtype=torch.long, device=device))
    opt = make_optimizer(model, t)
    ckpt = out_dir / "checkpoint.pt"
    state, cache = _restore(ckpt, model, opt, device) if resume else (LoopState(), None)
    step = make_step(Learner(model, forward, opt, t, amp), device)  # captured after the restore
    batches = data.train_batches(corpus.train, t.batch_size, t.block, start=state.pos)
    onto = _onto(device)
    bar = tqdm(total=t.steps, initial=state.step, disable=not progress, dynamic_ncols=True,
               desc=cfg.model.variant)
    stopped_early = False
    pending, tic = [], time.perf_counter()  # losses are read (a wait for a GPU) at each record
    while state.step < t.steps and not stopped_early:
        pos, x, y, at = next(batches)
        x, y, at = onto(x), onto(y), onto(at)
        if pos == 0:
            cache = None  # start of the streams: no preceding text
        loss, lr, cache = step(x, y, cache, state.step, at)
        pending.append(loss.detach())
        state.advance(pos + t.block, x.numel())
        bar.update(1)
        evaluates = state.step % t.eval_every == 0 or state.step == t.steps
        if not (evaluates or state.step % t.checkpoint_every == 0):
            continue
        state.record(torch.stack(pending).tolist(), time.perf_counter() - tic)
        bar.set_postfix(bpc=f"{state.losses[-1] / LN2:.3f}", tok_s=f"{state.tokens_per_s:,.0f}")
        if evaluates:
            metrics, stopped_early = _evaluate(run, state, lr)
            if progress:
                bar.write(f"step {state.step}: dev bpc {metrics['dev_bpc']:.4f} ({reading(t)})")
            path = _checkpoint(ckpt, model, opt, state, cache, device)
            if report:
                report(metrics, path)
        else:
            _checkpoint(ckpt, model, opt, state, cache, device)
        pending, tic = [], time.perf_counter()
    bar.close()
    result = final_record(run, state, stopped_early)
    (out_dir / "result.json").write_text(result.to_json())
    return result


def reading(t: TrainConfig) -> str:
    """What a training-time dev reading covers: the first eval_tokens of dev (a sample; a run's
    dev_bpc is the whole split from its best checkpoint), or all of it."""
    return f"first {t.eval_tokens:,} chars of dev" if t.eval_tokens else "the whole dev split"


def _onto(device: torch.device) -> Callable[[torch.Tensor], torch.Tensor]:
    """How a batch (made on the CPU) reaches `device`: on CUDA from pinned memory without the
    host waiting (the step's kernels queue behind the copy on the same stream; a pageable copy
    would wait for each), elsewhere as it is."""
    if device.type != "cuda":
        return lambda batch: batch
    return lambda batch: batch.pin_memory().to(device, non_blocking=True)


def _precision(amp: precision.Amp, device: torch.device, planned: str | None) -> bool:
    """train.amp resolved on this device (bf16 autocast or not); ConfigError where a sweep
    planned the trial in the other precision."""
    enabled = precision.resolve(amp, device, say=True)
    if planned is not None and precision.name(enabled) != planned:
        rec = provenance.record(device)
        raise ConfigError(f"train.amp={str(amp).lower()}: the trial was planned in {planned}, "
                          f"but this worker ({rec['gpu'] or rec['cpu']}, {rec['cpu_capability']}) "
                          f"runs it in {precision.name(enabled)}; pin train.amp (true or false) "
                          "when the driver and the workers differ")
    return enabled


def _describe(cfg: Config, out_dir: Path, corpus: data.Corpus, amp: bool,
              device: torch.device) -> None:
    """config.json: the resolved config, seed, dataset, precision (and $ATTNBENCH_CPU_BF16, which
    decides it on a CPU) and provenance."""
    out_dir.mkdir(parents=True, exist_ok=True)
    info = {"config": cfg.model_dump(mode="json"), "seed": cfg.train.seed,
            "dataset": corpus.describe(), "precision": precision.name(amp),
            "cpu_bf16": precision.cpu_bf16(), **provenance.record(device)}
    (out_dir / "config.json").write_text(json.dumps(info, indent=2))


def _restore(ckpt: Path, model: TransformerLM, opt: torch.optim.Optimizer,
             device: torch.device) -> tuple[LoopState, list | None]:
    """The run's state and cache from its checkpoint, with the model, optimiser and RNG restored
    in place; a fresh state where there is none (or it is unreadable)."""
    if not ckpt.exists() or (saved := load_checkpoint(ckpt, device)) is None:
        return LoopState(), None
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["opt"])
    set_rng_state(saved["rng"], device)
    return LoopState(**saved["state"]), saved["cache"]


def _checkpoint(ckpt: Path, model: TransformerLM, opt: torch.optim.Optimizer, state: LoopState,
                cache: list | None, device: torch.device) -> Path:
    save_atomic({"model": model.state_dict(), "opt": opt.state_dict(), "state": asdict(state),
                 "cache": cache, "rng": rng_state(device)}, ckpt)
    return ckpt


def _evaluate(run: Run, state: LoopState, lr: float) -> tuple[Evaluation, bool]:
    """Dev bpc on the first eval_tokens: best.pt kept where it improved, the evaluation recorded
    in the state; returns it and whether patience ran out."""
    t = run.cfg.train
    dev = evaluate(run.model, run.corpus.dev, run.reading, t.eval_tokens,
                   run.corpus.targets("dev"))
    if dev.bpc < state.best_dev:
        state.best_dev, state.bad_evals = dev.bpc, 0
        save_atomic({"model": run.model.state_dict()}, run.out_dir / "best.pt")
    else:
        state.bad_evals += 1
    metrics = Evaluation(
        step=state.step, tokens=state.tokens,
        train_bpc=float(np.mean(state.losses[-t.eval_every:])) / LN2, dev_bpc=dev.bpc, lr=lr,
        tokens_per_s=state.tokens_per_s, train_time_s=state.train_time,
        mean_span=dev.mean_span, probe_bpc=dev.probes, **peak_memory_mb(run.device))
    state.history.append(metrics)
    return metrics, t.patience is not None and state.bad_evals >= t.patience
