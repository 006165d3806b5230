"""Mixed precision (`train.amp`): bf16 autocast where the hardware multiplies in bf16, else fp32.

Under autocast the matmuls (projections, q.k, q.p, w.v, feed-forward, output head, head
mixing) run in bf16; the softmax, LayerNorm, the loss and the span parameters stay fp32 whatever
a backend's autocast lists: the attention layer upcasts its logits, a dynamic span computes its
gate outside autocast, the trainer upcasts the output logits, and LayerNorm sees the residual
stream, which stays fp32 (an fp32 embedding plus bf16 branches promotes to fp32).
Without native bf16 (a CPU without AVX-512 BF16 or AMX, an old GPU) bf16 is emulated, hundreds
of times slower than fp32: amp then falls back to fp32 and says why, once.
"""

import contextlib
import sys

import torch

_said: set[str] = set()


def bf16_unsupported(device: torch.device) -> str | None:
    """Why bf16 autocast would not pay on `device`; None where it runs natively."""
    if device.type == "cuda":
        return None if torch.cuda.is_bf16_supported(including_emulation=False) else (
            f"{torch.cuda.get_device_name(device)} has no native bf16")
    if device.type == "cpu":
        return None if torch.ops.mkldnn._is_mkldnn_bf16_supported() else (
            "this CPU has no native bf16 matmul (AVX-512 BF16 or AMX; it has "
            f"{torch.backends.cpu.get_cpu_capability()}), so bf16 would be emulated")
    return f"no bf16 autocast on device type {device.type!r}"


def use_amp(requested: bool, device: torch.device) -> bool:
    """Whether to run bf16 autocast: `requested` (train.amp) and the device supports it. A
    request the device cannot honour is printed once per process, with the reason."""
    if not requested:
        return False
    why = bf16_unsupported(device)
    if why is not None and why not in _said:
        _said.add(why)
        print(f"train.amp=true: running fp32, because {why}", file=sys.stderr, flush=True)
    return why is None


def autocast(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` when enabled, else a no-op context."""
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def name(enabled: bool) -> str:
    """How records name the precision a run trained in."""
    return "bf16-autocast" if enabled else "fp32"
