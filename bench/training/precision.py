"""Mixed precision (`train.amp`): bf16 autocast where the hardware multiplies in bf16 natively,
fp32 elsewhere.

`auto` (the default) runs bf16 autocast on a device with native bf16 matmuls (a CUDA GPU with
bf16, a CPU with AVX-512 BF16 or AMX) and fp32 elsewhere; `true` asks for bf16 and, without
native support, runs fp32 and says why, once per run; `false` is fp32. Without native bf16 the
products would be emulated (hundreds of times slower than fp32 on an AVX2 CPU), which is never
worth it. Which precision ran is part of a trial's identity and of its record.

`ATTNBENCH_CPU_BF16=off` makes this process (and the Ray workers it starts, which inherit it)
treat its CPU as one without native bf16: `auto` resolves to fp32 as on an AVX2 CPU, so a
machine with AVX-512 BF16 runs what an AVX2 machine would (the suite, a sweep); `auto`, the
default, asks the CPU. With `ATEN_CPU_CAPABILITY=avx2` beside it, torch also dispatches to the
AVX2 kernels. A GPU is not affected.

Under autocast the matmuls (projections, q.k, q.p, w.v, feed-forward, output head, head
mixing) run in bf16; the softmax, LayerNorm, the loss and the span parameters stay fp32 whatever
a backend's autocast lists: the attention layer upcasts its logits, a dynamic span computes its
gate outside autocast, the trainer upcasts the output logits, and LayerNorm sees the residual
stream, which stays fp32 (an fp32 embedding plus bf16 branches promotes to fp32).
"""

import contextlib
import os
import sys
from typing import Literal

import torch

from bench.config import ConfigError

Amp = bool | Literal["auto"]
SWITCH = "ATTNBENCH_CPU_BF16"
CPU_BF16 = {"auto": "ask the CPU whether it multiplies in bf16 natively",
            "off": "run as a CPU without native bf16 would (train.amp=auto resolves to fp32)"}


def cpu_bf16() -> str:
    """The value of $ATTNBENCH_CPU_BF16 (default auto); ConfigError naming it for any other."""
    value = os.environ.get(SWITCH, "auto")
    if value not in CPU_BF16:
        raise ConfigError(f"{SWITCH}={value!r} is not a value it takes: expected " + "; or ".join(
            f"{k} ({v})" for k, v in CPU_BF16.items()))
    return value


def bf16_unsupported(device: torch.device) -> str | None:
    """Why `device` has no native bf16 matmul; None where it has one. On a CPU this asks for the
    instructions themselves (AVX-512 BF16 or AMX tiles): oneDNN's own bf16 flag is true on any
    AVX-512 core, which would run bf16 emulated."""
    if device.type == "cuda":
        return None if torch.cuda.is_bf16_supported(including_emulation=False) else (
            f"{torch.cuda.get_device_name(device)} has no native bf16")
    if device.type == "cpu":
        if cpu_bf16() == "off":
            return f"{SWITCH}=off: running as a CPU without native bf16 would"
        if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
            return None
        return ("this CPU has no native bf16 matmul (AVX-512 BF16 or AMX; its kernels are "
                f"{torch.backends.cpu.get_cpu_capability()}), so bf16 would be emulated")
    return f"no bf16 autocast on device type {device.type!r}"


def resolve(amp: Amp, device: torch.device, say: bool = False) -> bool:
    """Whether a run with `train.amp` = amp runs bf16 autocast on `device`: auto and true where
    the device multiplies in bf16 natively. With `say`, a `true` the device cannot honour is
    printed with the reason (a run calls this once, so each run says it)."""
    if amp is False:
        return False
    why = bf16_unsupported(device)
    if why is not None and amp is True and say:
        print(f"train.amp=true: running fp32, because {why}", file=sys.stderr, flush=True)
    return why is None


def autocast(device: torch.device, enabled: bool, cache: bool = True
             ) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` when enabled, else a no-op context. `cache=False` while a CUDA
    graph is captured (autocast's cast cache must not outlive the capture)."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)


def name(enabled: bool) -> str:
    """How records name the precision a run trained in."""
    return "bf16-autocast" if enabled else "fp32"
