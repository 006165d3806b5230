"""Anchors: attnbench's `fixed` and `adaptive` models against nanoGPT and the adaptive-span
reference, trained side by side in one process at one setting (the tiny preset: 4 layers, D 128,
4 heads, F 512, block 256, batch 16, S 256, dropout 0) on the same enwik8-prefix batches, in
interleaved rounds; with `amp`, every system again in bf16 autocast (rows suffixed " bf16") in
the same rounds. Per system: ms/step, tokens/s and the FLOP rate it executes; attnbench against
each anchor in the same precision (fp32 / fp32, bf16 / bf16), bf16 over fp32 per system and
attnbench's MFU, against the speed targets.

Executed FLOPs are counted one way for every system: torch's FlopCounterMode over one whole
training step (the last warm-up step, untimed; adaptive spans as they are then), which counts
the matmuls of forward and backward at the shapes each implementation executes, 2 FLOPs per
multiply-add (attnbench's re-projection of the cached block and the extra keys of its query
bands included, and scores that are computed and then masked, wherever they are). Fused
attention (nanoGPT's causal `scaled_dot_product_attention`) counts as torch counts its CUDA
kernels, over the whole score matrix, 2 products forward and 5 backward (it recomputes the
scores); torch has no formula for the CPU kernel, so `CPU_SDPA` registers that one. The FLOP
rate is that count over the median seconds per step; attnbench does more work per token than
nanoGPT (its cached block doubles the keys), which tokens/s alone would hide. MFU stays
analytic: 6 x `executed_flops` x tokens/s over the matmul peak of the row's precision.

The two external checkouts are imported by path (nanoGPT's model.py, the reference's
models.py), never copied.
"""

import contextlib
import statistics
import sys
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from types import ModuleType
from typing import Protocol

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from bench import data, provenance
from bench.config import Config, drop_untaken, merge, parse_sets, resolve
from bench.model import create_model
from bench.plugins import exec_file
from bench.provenance import device as pick_device
from bench.training import precision
from bench.training.step import Learner, make_optimizer, train_step

from .throughput import bf16_fallback, matmul_peak, mfu, sync

DATA = provenance.ROOT.parent / "shared" / "data" / "enwik8.head"
WARMUP_STEPS = 3  # untimed, per system, before the first round; the last one is counted
REFERENCE_LR, REFERENCE_CLIP = 0.07, 0.03  # its enwik8 script's Adagrad lr and per-tensor clip
BF16 = " bf16"  # the suffix of every system's row in bf16 autocast (--amp)
METRICS = {"tok_s": "tokens/s", "gflop_s": "GFLOP/s"}
# (attnbench row, anchor row, metric, threshold by precision suffix): each precision against
# the same precision; None: a ratio reported without a target (the fp32 thresholds are the
# retired fp32 targets, docs/speed.md)
COMPARISONS = (("attnbench fixed", "nanoGPT", "tok_s", {"": 0.8, BF16: None}),
               ("attnbench fixed", "nanoGPT", "gflop_s", {"": None, BF16: 1.0}),
               ("attnbench fixed", "reference fixed", "tok_s", {"": 1.6, BF16: None}),
               ("attnbench adaptive", "reference adaptive", "tok_s", {"": 1.5, BF16: 2.0}))
AMP_GAINS = {"attnbench fixed": 1.5, "attnbench adaptive": 1.5}  # bf16 / fp32 tokens/s targets
MFU_TARGETS = {"attnbench fixed": 0.5, f"attnbench fixed{BF16}": 0.45}


def _sdpa_flops(query: torch.Size, key: torch.Size, value: torch.Size, *args,
                out_shape: torch.Size | None = None, **kwargs) -> int:
    """torch's CPU flash attention, forward: torch's formula for its CUDA kernels."""
    return sdpa_flop_count(query, key, value)


def _sdpa_backward_flops(grad_out: torch.Size, query: torch.Size, key: torch.Size,
                         value: torch.Size, *args, out_shape: torch.Size | None = None,
                         **kwargs) -> int:
    """torch's CPU flash attention, backward: torch's formula for its CUDA kernels."""
    return sdpa_backward_flop_count(grad_out, query, key, value)


# FlopCounterMode formulas for the CPU kernel of scaled_dot_product_attention (torch has none)
CPU_SDPA = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _sdpa_flops,
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward:
            _sdpa_backward_flops}


class AnchorError(ValueError):
    """A checkout or setting the anchors cannot be built from: names the file or key."""


class System(Protocol):
    model: torch.nn.Module

    def step(self, x: torch.Tensor, y: torch.Tensor, start: bool) -> None:
        """One training step on x -> y, (B, M) ids; `start`: the streams begin (no history)."""


class NanoGPT:
    """nanoGPT's GPT, AdamW; no cache: each block is seen alone. Its forward and loss in bf16
    autocast where `amp`, as its train.py runs them on a GPU (on a CPU it runs fp32)."""

    def __init__(self, module: ModuleType, cfg: Config, vocab: int, dev: torch.device,
                 amp: bool = False) -> None:
        m = cfg.model
        conf = module.GPTConfig(block_size=cfg.train.block, vocab_size=vocab, n_layer=m.n_layers,
                                n_head=m.n_heads, n_embd=m.d_model, dropout=m.dropout,
                                bias=False)  # its train.py default
        torch.manual_seed(0)
        with contextlib.redirect_stdout(sys.stderr):  # it prints its parameter count
            self.model = module.GPT(conf).to(dev)
        # nanoGPT train.py's AdamW settings; fused on CUDA as its configure_optimizers chooses
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=6e-4, betas=(0.9, 0.95),
                                     weight_decay=0.1, fused=dev.type == "cuda")
        self.amp = amp

    def step(self, x: torch.Tensor, y: torch.Tensor, start: bool) -> None:
        self.opt.zero_grad(set_to_none=True)
        with precision.autocast(x.device, self.amp):
            _, loss = self.model(x, y)
        loss.backward()
        self.opt.step()


@dataclass(frozen=True)
class ReferenceSpan:
    """The reference's span: adaptive (its own module, with the ramp and span loss of
    attnbench's `adaptive` layer and the cache trimmed to the spans) or a fixed window S."""

    adaptive: bool
    ramp: float
    loss: float


@dataclass(frozen=True)
class Timing:
    """How the anchors are timed: `steps` per round, `rounds` interleaved (the median), and
    bf16 autocast beside fp32 (`amp`)."""

    steps: int
    rounds: int
    amp: bool = False


class Reference:
    """The adaptive-span reference's TransformerSeq stepping as its trainer does: forward with the
    carried h_cache (per layer (B, cache, D), zeros at the start, as its main.py makes it), NLL
    plus the span loss, backward, its own Adagrad with per-tensor gradient clipping at 0.03, span
    clamp. `sp`: its adaptive span (initial span ratio 0, the cache trimmed to the spans:
    `--adapt-span-cache`, as its enwik8 script runs it), or a fixed span S. `reference`: its
    models and optimiser modules. `amp`: the forward and loss in bf16 autocast (its own trainer
    has no mixed precision)."""

    def __init__(self, reference: tuple[ModuleType, ModuleType], cfg: Config, vocab: int,
                 dev: torch.device, sp: ReferenceSpan, amp: bool = False) -> None:
        (module, optim), m, self.dev, self.amp = reference, cfg.model, dev, amp
        self.shape = (cfg.train.batch_size, m.d_model)  # (B, D) of every cache
        adaptive = sp.adaptive
        span = {"adapt_span_enabled": adaptive, "adapt_span_ramp": sp.ramp,
                "adapt_span_loss": sp.loss, "adapt_span_init": 0.0,
                "adapt_span_cache": adaptive}
        torch.manual_seed(0)
        self.model = module.TransformerSeq(
            vocab_size=vocab, hidden_size=m.d_model, nb_heads=m.n_heads, nb_layers=m.n_layers,
            attn_span=m.span, emb_dropout=0.0, inner_hidden_size=m.d_ff, dropout=m.dropout,
            adapt_io_params={"adapt_io_enabled": False}, adapt_span_params=span,
            pers_mem_params={"pers_mem_size": 0}).to(dev)
        self.opt = optim.AdagradWithGradClip(self.model.parameters(), lr=REFERENCE_LR,
                                             grad_clip=REFERENCE_CLIP)
        self.spans = [la.attn.attn.adaptive_span for la in self.model.layers] if adaptive else []
        self.cache = self.empty_cache()

    def empty_cache(self) -> list[torch.Tensor]:
        """Per layer, (B, cache size, D) zeros."""
        B, D = self.shape
        return [torch.zeros(B, la.attn.attn.get_cache_size(), D, device=self.dev)
                for la in self.model.layers]

    def step(self, x: torch.Tensor, y: torch.Tensor, start: bool) -> None:
        if start:
            self.cache = self.empty_cache()
        self.opt.zero_grad()
        with precision.autocast(x.device, self.amp):
            out, self.cache, _ = self.model(x, self.cache)
            loss = F.nll_loss(out.flatten(0, 1), y.flatten())
            loss = loss + sum(s.get_loss() for s in self.spans)
        loss.backward()
        self.opt.step()
        for s in self.spans:
            s.clamp_param()


class Attnbench:
    """An attnbench model with its cache, stepping through the trainer's own `train_step` (span
    penalty, per-tensor clipping, the preset's optimiser, span clamp) as bench.speed does; in
    bf16 autocast where `amp`."""

    def __init__(self, cfg: Config, vocab: int, dev: torch.device, amp: bool = False) -> None:
        torch.manual_seed(0)
        self.model = create_model(cfg.model, vocab).to(dev)
        self.opt = make_optimizer(self.model, cfg.train)
        self.t, self.cache, self.amp = cfg.train, None, amp
        self.learner = Learner(self.model, self.model, self.opt, cfg.train, amp)

    def step(self, x: torch.Tensor, y: torch.Tensor, start: bool) -> None:
        if start:
            self.cache = None
        _, _, self.cache = train_step(self.learner, x, y, self.cache, self.t.warmup)


def import_file(file: Path, name: str, needs: tuple[str, ...]) -> ModuleType:
    """`file` executed as module `name`, with its own directory on sys.path while it runs (for
    its sibling imports); AnchorError unless it imports and defines every one of `needs`."""
    try:
        module = exec_file(file, name, beside=True)
    except ImportError as err:
        raise AnchorError(f"{file}: import failed: {err}") from None
    missing = [n for n in needs if not hasattr(module, n)]
    if missing:
        raise AnchorError(f"{file}: defines no {', '.join(missing)}")
    return module


def configs(data_path: Path, sets: list[str]) -> dict[str, Config]:
    """attnbench's `fixed` and `adaptive` configs: the tiny preset, the enwik8 prefix split
    90/5/5, `sets` on top. ConfigError names a bad key; AnchorError a size nanoGPT cannot take."""
    tree = merge({"data": {"name": "enwik8", "path": str(data_path)}}, parse_sets(sets))
    out = {}
    for variant in ("fixed", "adaptive"):  # a span option in `sets` sizes the adaptive span
        one = merge(tree, {"model": {"variant": variant}})
        drop_untaken(one, "tiny")
        out[variant] = resolve(one, "tiny")
    m = out["fixed"].model
    if m.d_ff != 4 * m.d_model:
        raise AnchorError(f"model.d_ff={m.d_ff}: nanoGPT's MLP is 4 x n_embd, so d_ff must be "
                          f"4 x model.d_model = {4 * m.d_model}")
    return out


def systems(cfgs: dict[str, Config], nanogpt: ModuleType, reference: tuple[ModuleType, ...],
            vocab: int, dev: torch.device, modes: tuple[bool, ...] = (False,)
            ) -> dict[str, System]:
    """Every system, fresh from torch.manual_seed(0), in the order they run in each round: the
    fp32 ones, then, where `modes` holds True, the same again in bf16 autocast (names suffixed
    BF16), so that each precision is compared with itself; `reference` is its (models,
    adagrad_with_grad_clip) modules."""
    found: dict[str, System] = {}
    for bf16 in modes:
        one = precision_systems(cfgs, nanogpt, reference, vocab, dev, bf16)
        found |= {name + BF16 * bf16: system for name, system in one.items()}
    return found


def precision_systems(cfgs: dict[str, Config], nanogpt: ModuleType,
                      reference: tuple[ModuleType, ...], vocab: int, dev: torch.device,
                      amp: bool) -> dict[str, System]:
    """nanoGPT, the reference (fixed, adaptive), attnbench (fixed, adaptive), all in one
    precision: bf16 autocast where `amp`, else fp32."""
    fixed = cfgs["fixed"]
    ours = {f"attnbench {v}": Attnbench(cfgs[v], vocab, dev, amp) for v in ("fixed", "adaptive")}
    o = ours["attnbench adaptive"].model.blocks[0].attn.describe()["options"]
    return {"nanoGPT": NanoGPT(nanogpt, fixed, vocab, dev, amp),
            "reference fixed": Reference(reference, fixed, vocab, dev,
                                         ReferenceSpan(False, o["ramp"], o["span_loss"]), amp),
            "reference adaptive": Reference(reference, cfgs["adaptive"], vocab, dev,
                                            ReferenceSpan(True, o["ramp"], o["span_loss"]), amp),
            **ours}


def batches(corpus: data.Corpus, cfg: Config, n: int, dev: torch.device
            ) -> list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The first n (pos, x, y, at) training batches, x and y (B, M) on `dev`, made before
    timing (`at`, the text positions, unread: no outside model has a positional mask)."""
    t = cfg.train
    return list(islice(data.train_batches(corpus.train, t.batch_size, t.block, device=dev), n))


def time_steps(system: System, chunk: list, dev: torch.device) -> float:
    """Seconds for `system` to step through `chunk` (the device synced at both ends)."""
    sync(dev)
    tic = time.perf_counter()
    for pos, x, y, _ in chunk:
        system.step(x, y, pos == 0)
    sync(dev)
    return time.perf_counter() - tic


def step_flops(system: System, batch: tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]
               ) -> int:
    """FLOPs of one training step of `system` on `batch` (pos, x, y, at), as FlopCounterMode counts
    them: the matmuls of forward and backward, fused attention included (`CPU_SDPA`), 2 FLOPs per
    multiply-add; the step is taken (the weights move)."""
    pos, x, y, _ = batch
    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
        system.step(x, y, pos == 0)
    return counter.get_total_flops()


def warm_up(found: dict[str, System], chunk: list, dev: torch.device) -> dict[str, int]:
    """Each system steps through `chunk` untimed, its last step counted (`step_flops`), so
    that the counter's overhead stays out of the timed steps. Returns FLOPs per step."""
    *untimed, counted = chunk
    flops = {}
    for name, system in found.items():
        time_steps(system, untimed, dev)
        flops[name] = step_flops(system, counted)
    return flops


def run(found: dict[str, System], chunks: list[list], dev: torch.device,
        dtypes: tuple[torch.dtype, ...] = (torch.float32,)
        ) -> tuple[dict[str, float], dict[torch.dtype, float]]:
    """Median seconds per step of each system, and the median matmul peak in each of `dtypes`:
    each round (a chunk) measures the peaks and every system steps through the round's chunk in
    turn (interleaved), so the peaks are taken under the same conditions as the steps they
    divide, not once at start (on a shared machine they move by 20% between runs)."""
    times: dict[str, list[float]] = {name: [] for name in found}
    peaks: dict[torch.dtype, list[float]] = {d: [] for d in dtypes}
    for chunk in chunks:
        for d in dtypes:
            peaks[d].append(matmul_peak(dev, d))
        for name, system in found.items():
            times[name].append(time_steps(system, chunk, dev) / len(chunk))
    return ({name: statistics.median(t) for name, t in times.items()},
            {d: statistics.median(p) for d, p in peaks.items()})


def comparisons(rows: dict[str, dict]) -> list[dict]:
    """attnbench against the anchors (COMPARISONS), fp32 rows with fp32 rows, then bf16 rows with
    bf16 rows where there are any: value and threshold of each."""
    return [{"target": f"{ours}{suffix} / {anchor}{suffix} ({METRICS[metric]})",
             "value": rows[ours + suffix][metric] / rows[anchor + suffix][metric],
             "threshold": thresholds[suffix]}
            for suffix in ("", BF16) for ours, anchor, metric, thresholds in COMPARISONS
            if ours + suffix in rows]


def amp_gains(rows: dict[str, dict]) -> list[dict]:
    """bf16 over fp32 tokens/s of every system timed in both; targets for attnbench's."""
    return [{"target": f"{name}{BF16} / fp32 (tokens/s)",
             "value": rows[name + BF16]["tok_s"] / row["tok_s"], "threshold": AMP_GAINS.get(name)}
            for name, row in rows.items() if name + BF16 in rows]


def results(seconds: dict[str, float], flops: dict[str, int], tokens: int,
            mfu: dict[str, float]) -> tuple[pd.DataFrame, list]:
    """One row per system (ms/step, tokens/s, GFLOP executed per step and per second) and the
    targets: attnbench against the anchors in each precision, bf16 over fp32, MFU; each with its
    value, threshold and whether it passes (None where it has no target)."""
    rows = {name: {"system": name, "ms_step": 1e3 * s, "tok_s": tokens / s,
                   "gflop_step": flops[name] / 1e9, "gflop_s": flops[name] / s / 1e9}
            for name, s in seconds.items()}
    targets = [*comparisons(rows), *amp_gains(rows),
               *({"target": f"{system} MFU", "value": v, "threshold": MFU_TARGETS.get(system)}
                 for system, v in mfu.items())]
    return pd.DataFrame(rows.values()), [
        t | {"pass": None if t["threshold"] is None else bool(t["value"] >= t["threshold"])}
        for t in targets]


def measure(cfgs: dict[str, Config], corpus: data.Corpus, nanogpt: ModuleType,
            reference: tuple[ModuleType, ModuleType], timing: Timing) -> dict:
    """Build every system, count and time them, and return the rows, targets and setting
    (JSON-able). `amp`: every system in bf16 autocast too, attnbench fixed's MFU against the
    bf16 matmul peak; where the device has no native bf16, the setting says why and only fp32
    is timed."""
    fixed, steps, rounds, amp = cfgs["fixed"], timing.steps, timing.rounds, timing.amp
    dev = pick_device(fixed.train.device)
    why = bf16_fallback(dev, amp)
    modes = (False, True) if amp and not why else (False,)  # bf16 autocast or not
    found = systems(cfgs, nanogpt, reference, corpus.vocab_size, dev, modes)
    todo = batches(corpus, fixed, WARMUP_STEPS + steps * rounds, dev)
    starts = [WARMUP_STEPS + r * steps for r in range(rounds)]
    flops = warm_up(found, todo[:WARMUP_STEPS], dev)
    dtype = {False: torch.float32, True: torch.bfloat16}
    seconds, peaks = run(found, [todo[a:a + steps] for a in starts], dev,
                         tuple(dtype[m] for m in modes))
    t = fixed.train
    tokens = t.batch_size * t.block
    model = found["attnbench fixed"].model
    utilisation = {}
    for bf16 in modes:
        name = f"attnbench fixed{BF16 * bf16}"
        utilisation[name] = mfu(model, tokens, seconds[name], peaks[dtype[bf16]])
    df, targets = results(seconds, flops, tokens, utilisation)
    return {"setting": setting(fixed, corpus, dev, peaks, why, timing),
            "rows": df.to_dict("records"), "targets": targets}


def setting(cfg: Config, corpus: data.Corpus, dev: torch.device,
            peaks: dict[torch.dtype, float], why: str | None, timing: Timing) -> dict:
    """What was measured, where and how (JSON-able): the machine, the matmul peaks, whether bf16
    was timed (or why not), the timing and the model's sizes."""
    t, m, bf16 = cfg.train, cfg.model, peaks.get(torch.bfloat16)
    return {"device": str(dev), "cpu": provenance.cpu_name(),
            "cpu_capability": provenance.kernels(dev)["cpu_capability"],
            "threads": torch.get_num_threads(), "matmul_gflops": peaks[torch.float32] / 1e9,
            "bf16_matmul_gflops": bf16 / 1e9 if bf16 else None,
            "bf16": "timed" if bf16 else why or "not asked (--amp)",
            "steps": timing.steps, "rounds": timing.rounds,
            "warmup_steps": WARMUP_STEPS, "data": corpus.meta["source"],
            "prefix": corpus.meta["prefix"], "n_layers": m.n_layers, "d_model": m.d_model,
            "n_heads": m.n_heads, "d_ff": m.d_ff, "span": m.span, "block": t.block,
            "batch_size": t.batch_size, "dropout": m.dropout}


def show(out: dict) -> None:
    """The setting, the table of systems and the targets with PASS/FAIL, as text."""
    s = out["setting"]
    bf16 = s["bf16_matmul_gflops"]
    print(f"{s['cpu']} ({s['cpu_capability']} kernels), {s['device']}, {s['threads']} threads; "
          f"matmul peak (median of the rounds) float32 {s['matmul_gflops']:.0f} GFLOP/s"
          + (f", bfloat16 {bf16:.0f}" if bf16 else f"; bf16: {s['bf16']}")
          + f"; {s['n_layers']} layers, D {s['d_model']}, {s['n_heads']} heads, "
          f"F {s['d_ff']}, S {s['span']}, block {s['block']}, batch {s['batch_size']}; "
          f"median of {s['rounds']} x {s['steps']} steps on {s['data']}"
          + (" (a prefix)" if s["prefix"] else "")
          + "; gflop_step: FLOPs of one training step counted by FlopCounterMode")
    print(pd.DataFrame(out["rows"]).to_markdown(index=False, floatfmt=".4g"))
    print()
    for t in out["targets"]:
        verdict = "(no target)" if t["threshold"] is None else (
            f"(target >= {t['threshold']:g}) {'PASS' if t['pass'] else 'FAIL'}")
        print(f"{t['target']}: {t['value']:.3g} {verdict}")
