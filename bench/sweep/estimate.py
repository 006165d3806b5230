"""How long a sweep takes on this machine, said by the dry run before anything trains.

A trial's time is measured, not modelled from FLOPs: a few training steps of its own model
(its batch, block, precision and torch threads) are timed here (`calibrate`), and so are a
forward reading (per token: the dev readings every eval_every steps and the final whole dev
and test splits) and the FLOP count its record makes. A trial takes its steps at that step's
time, its readings at that token's time, its count, and a worker's start (`START_S`). A look
packs its trials on the trials Ray runs at once, costliest first as the runner starts them
(`makespan`); a sweep adds its start (`SWEEP_S`) and a report per look (`REPORT_S`).

The step is timed at the full span: a learned span that trims its window later trains
faster, so its estimate is an upper bound.
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from bench import provenance
from bench.model import create_model
from bench.model.count import counted_flops
from bench.training import precision
from bench.training.cuda_graphs import make_step
from bench.training.evaluate import Reading, evaluate
from bench.training.step import Learner, make_optimizer
from bench.trial import Trial

WARM = 3  # untimed steps first: allocation, the cache filling, lazy kernel choice
TIMED_S = 0.5  # time steps until this long, at least MIN_STEPS of them (one warm-up where slow)
MIN_STEPS = 2
START_S = 4.0  # a trial's worker: process, imports, corpus, MLflow run (docs/speed.md)
SWEEP_S = 8.0  # Ray and the tracking store starting (docs/speed.md: the smoke grid)
REPORT_S = 5.0  # the report written after each look (figures, findings)


@dataclass(frozen=True)
class Speed:
    """A setting's measured speed here: one training step (`step_s`), one token read forward
    (`token_s`), and the FLOP count its run record makes (`count_s`), in seconds."""

    step_s: float
    token_s: float
    count_s: float


def _seconds(run: Callable[[], object], device: torch.device) -> float:
    """Seconds one call of `run` takes, the device's queue finished before and after."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    tic = time.perf_counter()
    run()
    sync()
    return time.perf_counter() - tic


def calibrate(trial: Trial) -> Speed:
    """Time `trial`'s setting here with its torch threads: training steps on random tokens
    (up to WARM untimed, fewer where a step is slower than TIMED_S; then at least MIN_STEPS,
    for at least TIMED_S), a forward reading of 2 x batch x block tokens, and the FLOP count
    of its record."""
    t, threads = trial.cfg.train, torch.get_num_threads()
    device = provenance.device(t.device)
    amp = precision.resolve(t.amp, device)
    torch.set_num_threads(trial.threads)
    try:
        model = create_model(trial.cfg.model, trial.vocab, t.seed).to(device)
        step = make_step(Learner(model, model, make_optimizer(model, t), t, amp), device)
        x = torch.randint(trial.vocab, (t.batch_size, t.block), device=device)
        state: dict = {"cache": None, "i": 0}

        def one() -> None:
            _, _, state["cache"] = step(x, x, state["cache"], state["i"])
            state["i"] += 1

        for _ in range(WARM):
            if _seconds(one, device) > TIMED_S:
                break
        timed: list[float] = []
        while len(timed) < MIN_STEPS or sum(timed) < TIMED_S:
            timed.append(_seconds(one, device))
        tokens = 2 * t.batch_size * t.block
        split = np.random.default_rng(0).integers(trial.vocab, size=tokens + 1)
        how = Reading(t.eval_batch_size or t.batch_size, t.block, device, amp)
        token_s = _seconds(lambda: evaluate(model, split, how), device) / tokens
        count_s = _seconds(lambda: counted_flops(model), device)
    finally:
        torch.set_num_threads(threads)
    return Speed(float(np.mean(timed)), token_s, count_s)


def read_tokens(trial: Trial) -> int | None:
    """The tokens a trial reads forward: a dev reading (eval_tokens, else the whole dev split)
    every eval_every steps and after the last, then the whole dev and test splits from its best
    checkpoint; None where its corpus is not built (a dry run that downloads nothing)."""
    if trial.identity is None:
        return None
    t, sizes = trial.cfg.train, trial.identity["split_sizes"]
    readings = math.ceil(t.steps / t.eval_every)
    return readings * min(t.eval_tokens or sizes["dev"], sizes["dev"]) + sizes["dev"] \
        + sizes["test"]


def trial_seconds(trial: Trial, speed: Speed) -> float:
    """A trial's estimated wall time from its setting's `speed` (module doc)."""
    read = read_tokens(trial) or 0
    return START_S + trial.cfg.train.steps * speed.step_s + read * speed.token_s + speed.count_s


def makespan(seconds: list[float], slots: int) -> float:
    """The wall time of trials of these durations started in this order, each on the first of
    `slots` to come free (Ray's queue: the runner orders them costliest first)."""
    free = [0.0] * max(slots, 1)
    for s in seconds:
        free[free.index(min(free))] += s
    return max(free)


def speeds(trials: list[Trial]) -> dict[str, Speed]:
    """Each setting's `Speed` (its seeds share it), calibrated once per setting."""
    out: dict[str, Speed] = {}
    for t in trials:
        if t.setting not in out:
            out[t.setting] = calibrate(t)
    return out


def look_seconds(seconds: dict[str, float], later: set[str], looks: tuple[int, ...],
                 slots: int) -> list[float]:
    """Each look's wall time for settings whose trials take `seconds` (per setting, a seed
    each): the first look every setting, a later one the settings in `later` (those an
    undecided claim reads: at worst, all of them every time); the sweep's start and a report
    per look included."""
    out, before = [], 0
    for k, n in enumerate(looks):
        run = [s for name, s in seconds.items() if k == 0 or name in later]
        durations = sorted(run * (n - before), reverse=True)
        out.append(makespan(durations, slots) + REPORT_S + (SWEEP_S if k == 0 else 0.0))
        before = n
    return out
