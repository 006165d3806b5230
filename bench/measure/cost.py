"""What a claim's rows cost against its baseline, measured side by side on this machine: the two
arms built once in one process and their training steps (and forward readings) alternated, REPS
repetitions after a warm-up, the order swapped every repetition so that a drift of the machine falls
on both; and each arm's FLOPs per token (kept by its mask, computed by its layer), parameters and
peak tensor memory. Written to cost.csv beside runs.csv, one row per arm and repetition
(`bench.findings.reading.measurement` reads it: the cost table and the cost claims are a pure
function of it). A sweep measures after its trials, alone on the machine, with the grid's torch
threads (`resources.cpu`); `python -m bench.cost FOLDER` measures a finished one.

A learned span is measured at its initial window (the full span S): its times and memory are
an upper bound, and the findings take its FLOPs from the runs.
"""

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from bench import provenance
from bench.experiment.claims import cells
from bench.experiment.grid import Grid
from bench.model.cost import analytic_flops, kept_flops
from bench.training import precision
from bench.trial import Trial

from .throughput import Bench, Case, sync

REPS = 9  # repetitions after the warm-up: the median and range of their ratios
REP_S = 0.25  # each arm's steps in one repetition last about this long
WARM = 2  # untimed steps of each arm first: allocation, lazy kernel choice
FILE = "cost.csv"


def comparisons(grid: Grid, trials: list[Trial]) -> list[tuple[Trial, Trial]]:
    """Each claim's rows against its baseline, one pair of trials per distinct pair of cells
    (every at_each value and trend point), at the first seed each setting has: the arms the
    cost table compares (claims without a baseline compare nothing)."""
    axes = grid.grid
    out: dict[tuple[str, str], tuple[Trial, Trial]] = {}
    for c in grid.claims:
        for _, rows, base in cells(c, axes):
            if base is None:
                continue
            pair = [min((t for t in trials if all(t.values.get(k) == v for k, v in cell.items())),
                        key=lambda t: t.seed, default=None) for cell in (rows, base)]
            if None not in pair:
                out.setdefault((pair[0].setting, pair[1].setting), (pair[0], pair[1]))
    return list(out.values())


def _bench(trial: Trial) -> Bench:
    """The trial's model, optimiser and a full cache, on its device and in its precision."""
    cfg = trial.cfg
    dev = provenance.device(cfg.train.device)
    case = Case(cfg.model.variant, cfg.model.span, cfg.model.n_heads, vocab=trial.vocab)
    return Bench(case, cfg, dev, False, precision.resolve(cfg.train.amp, dev))


def _timed(b: Bench, steps: int) -> tuple[float, float]:
    """Seconds per training step over `steps` steps, and per token read forward over as many
    forward readings."""
    train = sum(b.train_step() for _ in range(steps)) / steps
    tokens = b.x.numel()
    return train, sum(b.infer_step() for _ in range(steps)) / steps / tokens


def _static(b: Bench) -> dict[str, Any]:
    """What the arm costs whatever the machine: FLOPs per token kept and computed, parameters,
    and its tensors at a step's peak (weights, gradients, optimizer state, the activations
    saved for backward) in MiB; whether its spans are learned."""
    params = list(b.model.parameters())
    state = sum(v.numel() * v.element_size() for s in b.opt.state.values()
                for v in s.values() if torch.is_tensor(v))
    weights = sum(p.numel() * p.element_size() for p in params)
    kept = kept_flops(b.model)
    return {"flops_kept": math.nan if kept is None else kept,
            "flops_computed": analytic_flops(b.model, "max"),
            "params": sum(p.numel() for p in params),
            "peak_mb": (2 * weights + state) / 2**20 + b.activation_mb(),
            "learned": kept is None}


def machine(b: Bench) -> dict[str, Any]:
    """Where the arms ran: the device (GPU, else the CPU's model), torch's kernel level, the
    precision, torch threads and version."""
    kernels = provenance.kernels(b.dev)
    return {"device": kernels["gpu"] or provenance.cpu_name(),
            "kernels": kernels["cpu_capability"], "precision": precision.name(b.amp),
            "threads": torch.get_num_threads(), "torch": torch.__version__}


def interleaved(arms: list[Bench], reps: int = REPS) -> list[dict[str, Any]]:
    """The arms' steps alternated: WARM untimed, then `reps` repetitions of as many steps as
    last about REP_S, the order reversed every repetition; a row per arm and repetition with
    its place in the sequence (`order`)."""
    warm = [max(b.train_step() for _ in range(WARM)) for b in arms]
    for b in arms:
        b.infer_step()
    steps = max(1, math.ceil(REP_S / max(warm)))
    out, order = [], 0
    for rep in range(reps):
        for i in (range(len(arms)) if rep % 2 == 0 else reversed(range(len(arms)))):
            sync(arms[i].dev)
            step_s, token_s = _timed(arms[i], steps)
            out.append({"arm": ("rows", "baseline")[i], "rep": rep, "order": order,
                        "steps": steps, "step_s": step_s, "eval_s_per_token": token_s})
            order += 1
    return out


def measure(pairs: list[tuple[Trial, Trial]], reps: int = REPS,
            alone: Callable[[Trial], float] | None = None) -> pd.DataFrame:
    """cost.csv's rows for each pair (rows trial, baseline trial), measured with the trials'
    torch threads (`interleaved`, `_static`, `machine`); `alone`: seconds per step of a trial
    timed by itself (the dry run's method, `bench.sweep.estimate.calibrate`), recorded beside."""
    threads, out = torch.get_num_threads(), []
    try:
        for rows, base in pairs:
            torch.set_num_threads(rows.threads)
            arms = [_bench(rows), _bench(base)]
            timed = interleaved(arms, reps)
            static = {"rows": _static(arms[0]), "baseline": _static(arms[1])}
            by = {"rows": rows, "baseline": base}
            alone_s = {k: alone(t) if alone else math.nan for k, t in by.items()}
            for r in timed:
                out.append({"rows": json.dumps(rows.values), "baseline": json.dumps(base.values),
                            "setting": by[r["arm"]].setting, **r, **static[r["arm"]],
                            "alone_step_s": alone_s[r["arm"]], **machine(arms[0])})
            del arms
    finally:
        torch.set_num_threads(threads)
    return pd.DataFrame(out)


def write(df: pd.DataFrame, folder: Path) -> Path:
    """cost.csv in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    df.to_csv(folder / FILE, index=False)
    return folder / FILE



def measure_into(folder: Path, grid: Grid, trials: list[Trial],
                 alone: Callable[[Trial], float] | None = None) -> Path | None:
    """Measure the grid's comparisons (`comparisons`) and write cost.csv into `folder`; None
    (nothing written) where no claim has a baseline."""
    pairs = comparisons(grid, trials)
    return write(measure(pairs, alone=alone), folder) if pairs else None
