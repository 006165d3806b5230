"""The run record of a trained model (`RunResult`, result.json): bpc on the whole dev and test
splits from the best checkpoint, its cost (#FLOPS at the learned spans, counted FLOPs), spans,
floors and probes, the whole run's memory peaks, and what the variant is."""

import sys

import numpy as np
import torch

from bench.model import TransformerLM
from bench.model.body import reach
from bench.model.cost import cost
from bench.model.count import counted_flops
from bench.record import Evaluation, RunResult

from .evaluate import dynamic_trace, evaluate, mixing_matrices
from .memory import peak_memory_mb
from .state import LoopState, TrainingSetup


def limit_reach(model: TransformerLM) -> int:
    """`bench.model.reach` of the model's architecture: every layer at the widest window its
    policy can ever compute (`Attention.widest`: S where spans are learned, whatever windows
    they trim to now; a fixed mask's own window). A run's floors are taken there, so a plugin
    whose mask keeps 8 distances gets the floors of its own reach, L x 7, not of S."""
    return reach(b.attn.widest - 1 for b in model.blocks)


def run_peaks(history: list[Evaluation], device: torch.device) -> dict[str, float | None]:
    """The whole run's peaks: the largest of every evaluation window's (resumed processes
    included) and of the window since the last evaluation; peak_cuda_mb None off CUDA."""
    now = peak_memory_mb(device)
    peaks = {k: max([v, *(h[k] for h in history if k in h)]) for k, v in now.items()}
    return {"peak_rss_mb": peaks["peak_rss_mb"], "peak_cuda_mb": peaks.get("peak_cuda_mb")}


def count_flops(model: TransformerLM) -> dict:
    """counted_flops()'s counts (flops_counted, flops_executed, flops_cache_reprojection), or
    None for each and flops_error with the reason: a counting failure (an op fvcore's tracer or
    our handles reject) is recorded, never allowed to lose a trained run."""
    try:
        c = counted_flops(model)
        return {"flops_counted": c["flops_counted"], "flops_executed": c["flops_counted_executed"],
                "flops_cache_reprojection": c["cache_reprojection"], "flops_error": None}
    except Exception as err:  # noqa: BLE001  (any tracer failure: the results are kept)
        print(f"warning: counting FLOPs failed ({type(err).__name__}: {err})", file=sys.stderr)
        return {"flops_counted": None, "flops_executed": None, "flops_cache_reprojection": None,
                "flops_error": f"{type(err).__name__}: {err}"}


def final_record(setup: TrainingSetup, state: LoopState, stopped_early: bool) -> RunResult:
    """The run record of the run's model with the weights of its best.pt loaded (in place),
    after the state's steps and tokens."""
    model, corpus, device = setup.model, setup.corpus, setup.device
    best = torch.load(setup.out_dir / "best.pt", map_location=device, weights_only=True)
    model.load_state_dict(best["model"])
    dev, test = (evaluate(model, corpus.split(split), setup.reading,
                          targets=corpus.targets(split)) for split in ("dev", "test"))
    seen = limit_reach(model) + 1  # the floor of what this model can see: its reach and itself
    # spans and #FLOPS as measured over the dev split: for a dynamic span, the mean z_t + R and
    # the widest window its forwards computed (for the others, their spans and windows)
    mean_spans = [float(np.mean(h)) for h in dev.head_spans]
    return RunResult(
        dev_bpc=dev.bpc, test_bpc=test.bpc, steps=state.step, tokens=state.tokens,
        stopped_early=stopped_early, tokens_per_s=state.tokens_per_s,
        **run_peaks(state.history, device),
        **cost(model, mean_spans, dev.layer_max_span), **count_flops(model),
        mean_span=dev.mean_span, layer_max_span=dev.layer_max_span, head_spans=dev.head_spans,
        floor_bpc=corpus.floor_bpc(seen), probe_bpc=dev.probes, probe_bpc_test=test.probes,
        probe_floor=corpus.target_floors(seen),
        entropy_rate=corpus.floor_bpc(), prefix=corpus.meta.get("prefix", False),
        layer=model.blocks[0].attn.describe(),  # what the variant is, for tables and reports
        mixing=mixing_matrices(model),
        dynamic_trace=dynamic_trace(model, corpus.dev, corpus.meta.get("symbols"), device),
        history=state.history,
    )
