"""Memory: glibc heap thresholds, each run's own peak in a reused process, and the activations a
training step keeps for backward (`saved_bytes`).

glibc serves blocks above its mmap threshold (dynamic, <= 32 MiB) with fresh mmaps and unmaps
them on free, so every large activation of every step is page-faulted in again: measured here,
an element-wise op on a 33 MB tensor ran at 1.6 GB/s, and at 6 GB/s with `keep_heap`.

Ray reuses a worker process for the next trial, so a peak read from the kernel would include
the trials before it. `start_run` hands the freed heap back and resets the kernel's peak mark,
so `peak_memory_mb` reports this run's peak (the process's imports included, as in a new one).
"""

import ctypes
import ctypes.util
import gc
import resource
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.model import TransformerLM

from . import precision

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
STATUS, CLEAR_REFS = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def keep_heap(limit: int = 1 << 30) -> bool:
    """Raise glibc's mmap and trim thresholds; a no-op (False) off glibc."""
    libc = _libc()
    try:
        return bool(libc and libc.mallopt(M_MMAP_THRESHOLD, limit)
                    and libc.mallopt(M_TRIM_THRESHOLD, 2 * limit))
    except AttributeError:  # a libc without mallopt
        return False


def peak_rss_mb() -> float:
    """The process's peak resident memory since it started or since `start_run` (Linux VmHWM;
    elsewhere getrusage's maxrss, which cannot be reset)."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def start_run(device: torch.device) -> bool:
    """Start a run's peak accounting: free what earlier runs left (garbage, glibc's kept heap),
    then reset the kernel's peak-RSS mark to the current RSS and CUDA's peak counter.
    Returns whether the RSS peak could be reset (Linux with a writable clear_refs)."""
    gc.collect()
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        CLEAR_REFS.write_text("5")  # 5: reset the peak RSS (man 5 proc)
        return True
    except OSError:
        return False


def peak_memory_mb(device: torch.device) -> dict[str, float]:
    """peak_rss_mb: the process's peak resident memory since `start_run` (imports and data
    included); peak_cuda_mb (CUDA only): the peak allocated by tensors since the last call, which
    resets it, so that each evaluation window reports its own peak."""
    out = {"peak_rss_mb": peak_rss_mb()}
    if device.type == "cuda":
        out["peak_cuda_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
        torch.cuda.reset_peak_memory_stats(device)
    return out


def saved_bytes(model: TransformerLM, x: torch.Tensor, cache: list | None,
                amp: bool = False) -> int:
    """Bytes of the distinct storages autograd keeps for backward in one forward, in the
    precision the step runs in (`amp`: bf16 autocast, as the trainer's step): the activation
    memory a training step holds at its peak (weights and the cache excluded; under autocast
    the bf16 copies of the weights it saves are counted)."""
    storages: dict[int, int] = {}
    held = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *(cache or [])]}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in held:
            storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), precision.autocast(
            x.device, amp):
        logits, _ = model(x, cache)
        F.cross_entropy(logits.flatten(0, 1).float(), x.flatten())
    return sum(storages.values())
