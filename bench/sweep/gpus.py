"""A trial's share of a GPU: trials packed on each GPU by default, as many as fit in its memory
and at most PACK, with NVIDIA's MPS where the machine has it.

Small trials leave a GPU mostly idle: on one H100 a main-job trial trains at 0.9M tokens/s and
eight at once reach 4.1M under MPS (results/speed/h100_gpu_check/). So a grid that does not set
`resources.gpu` gets 1 / n of a GPU per trial where the machine or cluster has GPUs, n =
min(PACK, GPU memory / a trial's memory). A trial's memory is estimated on the CPU before
anything runs: its weights, gradients and AdamW's two moments (16 bytes a parameter), the
activations one training step keeps for backward (`saved_bytes` of a forward at its batch and
block, fp32: bf16 keeps less), and CONTEXT_MB for its process's CUDA context and allocator. A
share set in the grid whose trials cannot fit (resources.gpu x the GPU's memory below a
trial's) is refused before anything runs, naming resources.gpu.
"""

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

import torch

from bench.config import ConfigError
from bench.model import create_model
from bench.training.memory import saved_bytes
from bench.trial import Trial

PACK = 8  # trials per GPU at most: eight main-job trials under MPS, 4.5x one alone (H100)
CONTEXT_MB = 600.0  # a process's CUDA context and allocator slack, measured near 500 MB
STATE_BYTES = 16  # per parameter: fp32 weight, gradient and AdamW's two moments
# a CUDA client: what shows that MPS serves one (a kernel run, its result read back)
CLIENT = "import torch; assert torch.ones(1, device='cuda').add(1).item() == 2"
# 'off': trials that share a GPU do so without MPS, time-sliced (ci/gpu_grids.sh sets it where
# MPS failed its check, so that no sweep starts or probes it again); 'on' (the default): as above
MPS_SWITCH = "ATTNBENCH_MPS"


def trial_mb(t: Trial) -> float:
    """The GPU memory one trial needs, estimated on the CPU (see the module doc), in MB."""
    model = create_model(t.cfg.model, t.vocab)
    x = torch.zeros(t.cfg.train.batch_size, t.cfg.train.block, dtype=torch.long)
    active = saved_bytes(model, x, None)
    return (sum(p.numel() for p in model.parameters()) * STATE_BYTES + active) / 1e6 + CONTEXT_MB


@dataclass(frozen=True)
class Packing:
    """How trials share a GPU: `share` (of one GPU per trial; 0: no GPU), how many run at once
    on each, and why, in words."""

    share: float
    per_gpu: int
    why: str


def gpu_mb() -> float | None:
    """This machine's first CUDA device's memory in MB (None: no CUDA here)."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 1e6


def packing(trials: list[Trial], asked: float | None, memory: float | None,
            gpus: float) -> Packing:
    """The share each trial gets: `asked` (resources.gpu) where set, refused where a trial
    cannot fit in it; else, on `gpus` GPUs of `memory` MB (None: not known here), as many
    trials per GPU as fit, at most PACK."""
    if not gpus:
        return Packing(0.0, 0, "no GPU here: trials run on the CPU")
    sizes = {json.dumps([t.cfg.model.model_dump(mode="json"), t.vocab, t.cfg.train.batch_size,
                         t.cfg.train.block], sort_keys=True): t for t in trials}
    need = max(trial_mb(t) for t in sizes.values())  # one estimate per distinct size
    if asked is not None:
        if memory is not None and 0 < asked < 1 and asked * memory < need:
            raise ConfigError(f"resources.gpu={asked:g}: a trial needs about {need:,.0f} MB "
                              f"(weights, optimiser, activations, CUDA context) and "
                              f"{asked:g} of this GPU's {memory:,.0f} MB is {asked * memory:,.0f}"
                              f"; set a larger share, or null to pack as many as fit")
        per = int(1 // asked) if 0 < asked < 1 else 1
        return Packing(asked, per, f"resources.gpu={asked:g} as the grid sets it")
    fit = PACK if memory is None else max(1, min(PACK, int(memory // need)))
    held = f"{memory:,.0f} MB" if memory is not None else "memory not known here"
    return Packing(1 / fit, fit, f"{fit} trials per GPU ({held}; a trial about {need:,.0f} MB; "
                   f"at most {PACK})")


def _serves(control: str) -> str | None:
    """Why NVIDIA's MPS daemon serves no CUDA client (None where one connected): a CUDA process
    (CLIENT) runs a kernel, and the daemon lists the server it started for it."""
    try:
        client = subprocess.run([sys.executable, "-c", CLIENT], capture_output=True, text=True,
                                timeout=120)
    except subprocess.TimeoutExpired:
        return "a CUDA client did not finish in 120 s"
    if client.returncode:
        last = (client.stderr or client.stdout).strip().splitlines() or ["no output"]
        return f"a CUDA client failed ({last[-1]})"
    listed = subprocess.run([control], input="get_server_list\n", capture_output=True, text=True,
                            timeout=30).stdout.split()
    return None if any(w.isdigit() for w in listed) else \
        "a CUDA client ran, but the daemon lists no server (the client did not go through MPS)"


def mps_off() -> bool:
    """Whether $ATTNBENCH_MPS turns MPS off (MPS_SWITCH); ConfigError naming it for a value
    other than on and off."""
    value = os.environ.get(MPS_SWITCH, "on")
    if value not in ("on", "off"):
        raise ConfigError(f"{MPS_SWITCH}={value!r}: expected on (the default) or off")
    return value == "off"


def start_mps(per_gpu: int, off: bool = False) -> str:
    """NVIDIA's MPS control daemon where trials share a GPU and this machine has one (started
    unless it runs already), said to be in use only once a CUDA client has connected through it
    (`_serves`); a daemon this call started that serves none is stopped again; nothing where
    `off` (`mps_off`). Returns what happened, in words (the sweep records it)."""
    if per_gpu < 2:
        return "MPS not needed: one trial per GPU"
    if off:
        return f"MPS not used: {MPS_SWITCH}=off (trials share the GPU time-sliced)"
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return "MPS not used: nvidia-cuda-mps-control is not on this machine"
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    running = os.path.exists(os.path.join(pipe, "control"))
    if not running:
        done = subprocess.run([control, "-d"], capture_output=True, text=True, timeout=30)
        if done.returncode:
            return f"MPS not used: starting it failed ({(done.stderr or done.stdout).strip()})"
    why = _serves(control)
    if why is not None:
        if running:
            return f"MPS not usable: its daemon was already running, and {why}"
        subprocess.run([control], input="quit\n", capture_output=True, text=True, timeout=30)
        return f"MPS not used: its daemon started, but {why}; stopped it again"
    how = "its daemon was already running" if running else \
        "started for this sweep (stop it with: echo quit | nvidia-cuda-mps-control)"
    return f"MPS used: {how}; a CUDA client connected through it"
