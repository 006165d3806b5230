"""Anchors: attnbench's `fixed` and `adaptive` models against nanoGPT and the adaptive-span
reference, trained side by side in one process at one setting (the tiny preset: 4 layers, D 128,
4 heads, F 512, block 256, batch 16, S 256, dropout 0) on the same enwik8-prefix batches, in
interleaved rounds; tokens/s ratios and attnbench's MFU against the speed targets.

The two external checkouts are imported by path (nanoGPT's model.py, the reference's
models.py), never copied.
"""

import contextlib
import statistics
import sys
import time
from itertools import islice
from pathlib import Path
from types import ModuleType
from typing import Protocol

import pandas as pd
import torch
import torch.nn.functional as F

from bench import data, provenance
from bench.config import Config, drop_untaken, merge, parse_sets, resolve
from bench.model import create_model
from bench.model.cost import executed_flops
from bench.plugins import exec_file
from bench.provenance import device as pick_device
from bench.training.step import make_optimizer, train_step

from .speed import bf16_fallback, matmul_peak, sync

DATA = provenance.ROOT.parent / "shared" / "data" / "enwik8.head"
WARMUP_STEPS = 3  # untimed, per system, before the first round
REFERENCE_LR, REFERENCE_CLIP = 0.07, 0.03  # its enwik8 script's Adagrad lr and per-tensor clip
# (target, numerator row, denominator row, threshold): tokens/s ratios
TARGETS = (("attnbench fixed / nanoGPT", "attnbench fixed", "nanoGPT", 0.8),
           ("attnbench fixed / reference fixed", "attnbench fixed", "reference fixed", 1.6),
           ("attnbench adaptive / reference adaptive", "attnbench adaptive",
            "reference adaptive", 1.5))
BF16 = " bf16"  # the suffix of attnbench's rows in bf16 autocast (--amp)
BF16_TARGETS = (("attnbench fixed bf16 / nanoGPT", f"attnbench fixed{BF16}", "nanoGPT", 1.2),
                ("attnbench adaptive bf16 / reference adaptive", f"attnbench adaptive{BF16}",
                 "reference adaptive", 2.0),
                ("attnbench fixed bf16 / fp32", f"attnbench fixed{BF16}", "attnbench fixed", 1.5),
                ("attnbench adaptive bf16 / fp32", f"attnbench adaptive{BF16}",
                 "attnbench adaptive", 1.5))
MFU_TARGETS = {"attnbench fixed": 0.5}  # of the fp32 row; the bf16 row's MFU is reported


class AnchorError(ValueError):
    """A checkout or setting the anchors cannot be built from: names the file or key."""


class System(Protocol):
    model: torch.nn.Module

    def step(self, x: torch.Tensor, y: torch.Tensor, start: bool) -> None:
        """One training step on x -> y, (B, M) ids; `start`: the streams begin (no history)."""


class NanoGPT:
    """nanoGPT's GPT, fp32, AdamW; no cache: each block is seen alone."""

    def __init__(self, module: ModuleType, cfg: Config, vocab: int, dev: torch.device) -> None:
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

    def step(self, x: torch.Tensor, y: torch.Tensor, start: bool) -> None:
        self.opt.zero_grad(set_to_none=True)
        _, loss = self.model(x, y)
        loss.backward()
        self.opt.step()


class Reference:
    """The adaptive-span reference's TransformerSeq stepping as its trainer does: forward with the
    carried h_cache (per layer (B, cache, D), zeros at the start, as its main.py makes it), NLL
    plus the span loss, backward, its own Adagrad with per-tensor gradient clipping at 0.03, span
    clamp. `adaptive`: its adaptive span with the ramp and loss of attnbench's `adaptive` layer
    (`options`, as that layer describes them; initial span ratio 0) and its cache trimmed to the
    spans (`--adapt-span-cache`, as its enwik8 script runs it), else a fixed span S."""

    def __init__(self, module: ModuleType, optim: ModuleType, cfg: Config, vocab: int,
                 dev: torch.device, options: dict, adaptive: bool) -> None:
        m, self.dev = cfg.model, dev
        self.shape = (cfg.train.batch_size, m.d_model)  # (B, D) of every cache
        span = {"adapt_span_enabled": adaptive, "adapt_span_ramp": options["ramp"],
                "adapt_span_loss": options["span_loss"], "adapt_span_init": 0.0,
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

    def step(self, x: torch.Tensor, y: torch.Tensor, start: bool) -> None:
        if start:
            self.cache = None
        _, _, self.cache = train_step(self.model, self.model, self.opt, self.t, x, y, self.cache,
                                      self.t.warmup, self.amp)


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
            vocab: int, dev: torch.device, amp: bool = False) -> dict[str, System]:
    """Every system, fresh from torch.manual_seed(0), in the order they run in each round;
    `reference` is its (models, adagrad_with_grad_clip) modules. `amp`: attnbench's models in
    bf16 autocast too, as rows of their own (the anchors stay fp32: nanoGPT has no bf16 path on
    a CPU, and the reference none at all)."""
    fixed = cfgs["fixed"]
    ours = {f"attnbench {v}{suffix}": Attnbench(cfgs[v], vocab, dev, bf16)
            for suffix, bf16 in (("", False), *((BF16, True),) * amp) for v in ("fixed",
                                                                               "adaptive")}
    span = ours["attnbench adaptive"].model.blocks[0].attn.describe()["options"]
    return {"nanoGPT": NanoGPT(nanogpt, fixed, vocab, dev),
            "reference fixed": Reference(*reference, fixed, vocab, dev, span, adaptive=False),
            "reference adaptive": Reference(*reference, cfgs["adaptive"], vocab, dev, span,
                                            adaptive=True),
            **ours}


def batches(corpus: data.Corpus, cfg: Config, n: int, dev: torch.device
            ) -> list[tuple[int, torch.Tensor, torch.Tensor]]:
    """The first n (pos, x, y) training batches, x and y (B, M) on `dev`, made before timing."""
    t = cfg.train
    return list(islice(data.train_batches(corpus.train, t.batch_size, t.block, device=dev), n))


def time_steps(system: System, chunk: list, dev: torch.device) -> float:
    """Seconds for `system` to step through `chunk` (the device synced at both ends)."""
    sync(dev)
    tic = time.perf_counter()
    for pos, x, y in chunk:
        system.step(x, y, pos == 0)
    sync(dev)
    return time.perf_counter() - tic


def run(found: dict[str, System], chunks: list[list], dev: torch.device,
        dtypes: tuple[torch.dtype, ...] = (torch.float32,)
        ) -> tuple[dict[str, float], dict[torch.dtype, float]]:
    """Median seconds per step of each system, and the median matmul peak in each of `dtypes`:
    chunks[0] untimed (warm-up), then each round measures the peaks and every system steps
    through the round's chunk in turn (interleaved), so the peaks are taken under the same
    conditions as the steps they divide, not once at start (on a shared machine they move by
    20% between runs)."""
    for system in found.values():
        time_steps(system, chunks[0], dev)
    times: dict[str, list[float]] = {name: [] for name in found}
    peaks: dict[torch.dtype, list[float]] = {d: [] for d in dtypes}
    for chunk in chunks[1:]:
        for d in dtypes:
            peaks[d].append(matmul_peak(dev, d))
        for name, system in found.items():
            times[name].append(time_steps(system, chunk, dev) / len(chunk))
    return ({name: statistics.median(t) for name, t in times.items()},
            {d: statistics.median(p) for d, p in peaks.items()})


def results(seconds: dict[str, float], tokens: int, mfu: dict[str, float]
            ) -> tuple[pd.DataFrame, list]:
    """One row per system (ms/step, tokens/s) and the targets (with bf16 rows, theirs too),
    each with its value, threshold and whether it passes; an MFU without a target says so."""
    df = pd.DataFrame([{"system": name, "ms_step": 1e3 * s, "tok_s": tokens / s}
                       for name, s in seconds.items()])
    tok_s = dict(zip(df.system, df.tok_s, strict=True))
    targets = [{"target": name, "value": tok_s[a] / tok_s[b], "threshold": at}
               for name, a, b, at in (*TARGETS, *BF16_TARGETS) if a in tok_s]
    targets += [{"target": f"{system} MFU", "value": v, "threshold": MFU_TARGETS.get(system)}
                for system, v in mfu.items()]
    return df, [t | {"pass": None if t["threshold"] is None else bool(t["value"] >=
                                                                     t["threshold"])}
                for t in targets]


def measure(cfgs: dict[str, Config], corpus: data.Corpus, nanogpt: ModuleType,
            reference: tuple[ModuleType, ...], steps: int, rounds: int, amp: bool = False
            ) -> dict:
    """Build every system, time them, and return the rows, targets and setting (JSON-able).
    `amp`: attnbench in bf16 autocast too, with its MFU against the bf16 matmul peak; where the
    device has no native bf16, the setting says why and only fp32 is timed."""
    fixed = cfgs["fixed"]
    dev = pick_device(fixed.train.device)
    why = bf16_fallback(dev, amp)
    amp = amp and not why
    found = systems(cfgs, nanogpt, reference, corpus.vocab_size, dev, amp)
    todo = batches(corpus, fixed, WARMUP_STEPS + steps * rounds, dev)
    starts = [WARMUP_STEPS + r * steps for r in range(rounds)]
    chunks = [todo[:WARMUP_STEPS], *(todo[a:a + steps] for a in starts)]
    dtypes = (torch.float32, *((torch.bfloat16,) * amp))
    seconds, peaks = run(found, chunks, dev, dtypes)
    t, m = fixed.train, fixed.model
    tokens = t.batch_size * t.block
    flops = executed_flops(found["attnbench fixed"].model, "max")
    mfu = {name: 6 * flops * tokens / seconds[name] / peaks[dtype] for name, dtype in (
        ("attnbench fixed", torch.float32), *((f"attnbench fixed{BF16}", torch.bfloat16),) * amp)}
    df, targets = results(seconds, tokens, mfu)
    setting = {"device": str(dev), "cpu": provenance.cpu_name(),
               "cpu_capability": provenance.kernels(dev)["cpu_capability"],
               "threads": torch.get_num_threads(), "matmul_gflops": peaks[torch.float32] / 1e9,
               "bf16_matmul_gflops": peaks[torch.bfloat16] / 1e9 if amp else None,
               "bf16": "timed" if amp else why or "not asked (--amp)",
               "steps": steps, "rounds": rounds,
               "warmup_steps": WARMUP_STEPS, "data": corpus.meta["source"],
               "prefix": corpus.meta["prefix"], "n_layers": m.n_layers, "d_model": m.d_model,
               "n_heads": m.n_heads, "d_ff": m.d_ff, "span": m.span, "block": t.block,
               "batch_size": t.batch_size, "dropout": m.dropout}
    return {"setting": setting, "rows": df.to_dict("records"), "targets": targets}


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
          + (" (a prefix)" if s["prefix"] else ""))
    print(pd.DataFrame(out["rows"]).to_markdown(index=False, floatfmt=".4g"))
    print()
    for t in out["targets"]:
        verdict = "(no target)" if t["threshold"] is None else (
            f"(target >= {t['threshold']:g}) {'PASS' if t['pass'] else 'FAIL'}")
        print(f"{t['target']}: {t['value']:.3g} {verdict}")
