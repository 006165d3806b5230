"""Speed benchmark: training and inference tokens/s, activation memory, FLOPs and MFU per variant,
each also as a ratio against `fixed` at the same span limit, measured side by side in one run;
with amp, every case in fp32 and in bf16 autocast, interleaved (column amp_x)."""

import copy
import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from bench.config import Config, merge, parse_sets, resolve
from bench.model import create_model
from bench.model.cost import analytic_flops, executed_flops, set_spans
from bench.provenance import device as pick_device
from bench.training import precision
from bench.training.cuda_graphs import WARMUP, make_step
from bench.training.memory import saved_bytes
from bench.training.step import Learner, make_optimizer, maybe_compile, train_step
from variants import build as build_layer


@dataclass(frozen=True)
class Case:
    variant: str
    span: int
    n_heads: int
    learned: int | None = None  # learned spans (adaptive, dynamic) set to z + R = this many keys
    attn: tuple[tuple[str, Any], ...] = ()  # composition: layer options over the preset's
    vocab: int = 256  # the corpus's symbols (random bytes by default)

    @property
    def label(self) -> str:
        opts = "".join(f":{k}={v}" for k, v in self.attn)
        return self.variant + opts + ("" if self.learned is None else f"@{self.learned}")

    def config(self, tree: dict, preset: str) -> Config:
        """The resolved config of this case; ConfigError names the bad key or option."""
        model = {"variant": self.variant, "span": self.span, "n_heads": self.n_heads}
        return resolve(merge(tree, {"model": model | {"attn": dict(self.attn)}}), preset)


def parse_variant(spec: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """'adaptive:mixing=both' -> ('adaptive', (('mixing', 'both'),)): a preset and overrides."""
    name, *opts = spec.strip().split(":")
    return name, tuple(parse_sets(opts).items())


def mfu(model: torch.nn.Module, tokens: int, seconds: float, peak: float) -> float:
    """Model FLOPs utilisation of a training step over `tokens` in `seconds`: 6 x the model's
    executed multiply-adds per token (forward 2, backward 4 FLOPs each) over the matmul
    `peak` (FLOP/s)."""
    return 6 * executed_flops(model, "max") * tokens / seconds / peak


def matmul_peak(dev: torch.device, dtype: torch.dtype = torch.float32, n: int = 2048,
                reps: int = 5) -> float:
    """Matmul FLOP/s (2 n^3 per product) in `dtype`, in this process, on its threads."""
    a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
    a @ b
    sync(dev)
    tic = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(dev)
    return reps * 2 * n**3 / (time.perf_counter() - tic)


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def bf16_fallback(dev: torch.device, amp: bool) -> str | None:
    """Why --amp (`amp`) times fp32 only on `dev`, said on stderr as well; None where bf16
    autocast is timed too, or not asked (speed and anchors fall back alike)."""
    why = precision.bf16_unsupported(dev) if amp else None
    if why:
        print(f"--amp: timing fp32 only, because {why}", file=sys.stderr, flush=True)
    return why


class Bench:
    """One model at one setting, with a full cache, stepping on random symbols of its case's
    vocabulary."""

    def __init__(self, case: Case, cfg: Config, dev: torch.device, compile_: bool,
                 amp: bool = False, graphs: Config | None = None) -> None:
        self.case, self.dev, self.t, self.amp = case, dev, cfg.train, amp
        self.model = create_model(cfg.model, case.vocab).to(dev)
        self.opt = make_optimizer(self.model, cfg.train)
        B, M = cfg.train.batch_size, cfg.train.block
        self.x = torch.randint(0, case.vocab, (B, M), device=dev)
        self.cache = None
        for _ in range(-(-case.span // M) + 1):  # fill every layer's cache
            _, self.cache = self.model(self.x, self.cache)
        self.set_span()
        self.compiled = self.compile() if compile_ else None
        self.captured = self.capture(graphs) if graphs and dev.type == "cuda" else None

    def compile(self):
        """The trainer's torch.compile'd model, warmed up; None where it fell back to eager."""
        fn = maybe_compile(self.model, True, self.x)
        if fn is self.model:
            return None
        self.train_step(fn)
        return fn

    def capture(self, cfg: Config):
        """The trainer's whole step captured as one CUDA graph (`training.cuda_graphs`, cfg: this
        case with train.compile=graphs), on a copy of the model with its own capturable
        optimiser and cache, warmed up, captured and replayed once."""
        model = copy.deepcopy(self.model)
        step = make_step(Learner(model, model, make_optimizer(model, cfg.train), cfg.train,
                                 self.amp), self.dev)
        self.graph_cache = [c.clone() for c in self.cache]
        for _ in range(WARMUP + 2):
            _, _, self.graph_cache = step(self.x, self.x, self.graph_cache, self.t.warmup)
        return step

    def captured_step(self) -> float:
        """Seconds of one replay of the captured step."""
        sync(self.dev)
        tic = time.perf_counter()
        _, _, self.graph_cache = self.captured(self.x, self.x, self.graph_cache, self.t.warmup)
        sync(self.dev)
        return time.perf_counter() - tic

    def set_span(self) -> None:
        """z + R = the case's learned span: spans as if learned, no training needed."""
        if self.case.learned is not None:
            set_spans(self.model, float(self.case.learned))

    def train_step(self, fn=None) -> float:
        """Seconds of one step of the trainer (after warm-up); the spans are reset untimed."""
        sync(self.dev)
        tic = time.perf_counter()
        step_fn = self.model if fn is None else fn
        _, _, self.cache = train_step(Learner(self.model, step_fn, self.opt, self.t, self.amp),
                                      self.x, self.x, self.cache, self.t.warmup)
        sync(self.dev)
        seconds = time.perf_counter() - tic
        self.set_span()
        return seconds

    def activation_mb(self) -> float:
        """`saved_bytes` of this case in MiB; NaN, said on stderr, where that forward does not
        fit beside the other cases' state (a GPU at the small preset's sizes)."""
        self.model.zero_grad(set_to_none=True)
        try:
            return saved_bytes(self.model, self.x, self.cache, self.amp) / 2**20
        except torch.OutOfMemoryError:
            print(f"{self.case.label}: activation memory not measured (out of memory)",
                  file=sys.stderr, flush=True)
            return math.nan
        finally:
            if self.dev.type == "cuda":
                torch.cuda.empty_cache()

    @torch.no_grad()
    def infer_step(self) -> float:
        sync(self.dev)
        tic = time.perf_counter()
        with precision.autocast(self.dev, self.amp):
            _, self.cache = self.model(self.x, self.cache)
        sync(self.dev)
        return time.perf_counter() - tic


def cases(spans: list[int], heads: list[int], variants: list[str], frac: float | None,
          keys: int | None = None) -> list[Case]:
    """fixed vs adaptive at every S; each variant (or composition) at every head count, at the
    first S. Learned spans are `keys` long at every S, or else round(frac * S)."""
    def learned(S: int) -> int:
        return keys or round(frac * S)

    h = heads[0]
    out = [c for S in spans for c in (Case("fixed", S, h), Case("adaptive", S, h, learned(S)))]
    for n in heads:
        for spec in ["fixed", *variants]:
            name, attn = parse_variant(spec)
            resolve({"model": {"variant": name, "attn": dict(attn)}}, None)  # ConfigError
            layer = build_layer(name, d_model=n, n_heads=n, span=spans[0], **dict(attn))
            learns = layer.describe()["learned_spans"]  # the layer says if its spans are learned
            out.append(Case(name, spans[0], n, learned(spans[0]) if learns else None, attn))
    return list(dict.fromkeys(out))


def run(configs: dict[Case, Config], repeats: int, compile_: bool, amp: bool = False,
        graphs: dict[Case, Config] | None = None) -> pd.DataFrame:
    """Time every case (in fp32, and in bf16 autocast too where `amp` and the device has bf16),
    interleaved; one row per case and precision with its ratios against `fixed` in the same
    precision, and amp_x, the bf16 speed-up over fp32; compile_x and graphs_x: the step
    torch.compile'd, and captured whole as a CUDA graph (the cases in `graphs`, with their
    train.compile=graphs configs; CUDA only), over the eager step. MFU is against the matmul
    peak of the row's precision, measured in this process."""
    cfg = next(iter(configs.values()))
    dev = pick_device(cfg.train.device)
    modes = [False, True] if amp and not bf16_fallback(dev, amp) else [False]
    if graphs and dev.type != "cuda":
        print(f"--graphs: CUDA graphs need a CUDA device, not {dev.type}; timing eager only",
              file=sys.stderr, flush=True)
    peaks = {m: matmul_peak(dev, torch.bfloat16 if m else torch.float32) for m in modes}
    # torch.compile's recompile limit counts per code object, and every case's model shares
    # TransformerLM.forward: without room for each, later cases would silently run eagerly.
    dynamo = torch._dynamo.config
    dynamo.recompile_limit = max(dynamo.recompile_limit, 4 * len(configs))
    benches = [Bench(c, conf, dev, compile_, m, (graphs or {}).get(c))
               for c, conf in configs.items() for m in modes]
    times = {i: ([], [], [], []) for i in range(len(benches))}
    for _ in range(repeats + 1):  # the first round warms up
        for i, b in enumerate(benches):
            times[i][0].append(b.train_step())
            times[i][1].append(b.infer_step())
            if b.compiled is not None:
                times[i][2].append(b.train_step(b.compiled))
            if b.captured is not None:
                times[i][3].append(b.captured_step())
    tokens = cfg.train.batch_size * cfg.train.block
    rows = []
    for i, b in enumerate(benches):
        train_s, infer_s = (statistics.median(t[1:]) for t in times[i][:2])
        compiled_s, captured_s = (statistics.median(times[i][k][1:]) if fn is not None else None
                                  for k, fn in ((2, b.compiled), (3, b.captured)))
        flops = analytic_flops(b.model, "max")
        rows.append({"variant": b.case.label, "precision": precision.name(b.amp),
                     "S": b.case.span, "heads": b.case.n_heads,
                     "window": max(bl.attn.window for bl in b.model.blocks),
                     "train_ms": 1e3 * train_s, "train_tok_s": tokens / train_s,
                     "infer_tok_s": tokens / infer_s,
                     "act_mem_mb": b.activation_mb(),
                     "flops_per_tok": flops,
                     "mfu": mfu(b.model, tokens, train_s, peaks[b.amp]),
                     **({"compile_x": train_s / compiled_s} if compiled_s else {}),
                     **({"graphs_x": train_s / captured_s} if captured_s else {})})
    df = with_ratios(pd.DataFrame(rows), bf16=len(modes) > 1)
    df.attrs["matmul_gflops"] = peaks[False] / 1e9
    df.attrs["bf16_matmul_gflops"] = peaks[True] / 1e9 if True in peaks else None
    return df


def with_ratios(df: pd.DataFrame, bf16: bool) -> pd.DataFrame:
    """The rows with their ratios against `fixed` at the same S, heads and precision (train_x,
    infer_x, flops_x, mem_x, train_x/flops_x) and, where `bf16` was timed beside fp32, amp_x:
    the same case in bf16 over fp32."""
    cols = ["train_tok_s", "infer_tok_s", "act_mem_mb", "flops_per_tok"]
    base = df[df.variant == "fixed"][["S", "heads", "precision", *cols]]
    df = df.merge(base, on=["S", "heads", "precision"], how="left", suffixes=("", "_fixed"))
    df["train_x"] = df.train_tok_s / df.train_tok_s_fixed  # speedup over fixed
    df["infer_x"] = df.infer_tok_s / df.infer_tok_s_fixed
    df["flops_x"] = df.flops_per_tok_fixed / df.flops_per_tok  # analytic FLOPs ratio
    df["mem_x"] = df.act_mem_mb_fixed / df.act_mem_mb
    df["train_x/flops_x"] = df.train_x / df.flops_x
    df = df.drop(columns=[f"{c}_fixed" for c in cols])
    if bf16:
        fp32 = df[df.precision == "fp32"][["variant", "S", "heads", "train_tok_s"]]
        df = df.merge(fp32, on=["variant", "S", "heads"], how="left", suffixes=("", "_fp32"))
        df["amp_x"] = df.train_tok_s / df.pop("train_tok_s_fp32")
    return df


def log_mlflow(df: pd.DataFrame, args: dict) -> None:
    """One run in experiment 'speed' (the store's default: $MLFLOW_TRACKING_URI, else the
    results folder's)."""
    from bench.tracking.store import tracking_uri
    from bench.tracking.writer import log_measurement

    log_measurement(tracking_uri(None), "speed", {k: str(v) for k, v in args.items()},
                    {"matmul_gflops": df.attrs["matmul_gflops"]}, df)
