"""A run's checkpoints: written atomically, read back exactly (model, optimiser, RNG, data
position, cache), and a damaged one moved aside rather than failing every retry."""

import os
import sys
from pathlib import Path

import torch


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
    """Restore rng_state's generators. Both take their state as a CPU ByteTensor, which a
    checkpoint loaded onto a GPU (map_location) no longer holds."""
    torch.set_rng_state(state["cpu"].cpu())
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
