"""bench.memory: a run's peak memory is its own, also in a process that ran others before it
(Ray reuses trial workers)."""

import sys

import pytest
import torch

from bench.training.memory import CLEAR_REFS, keep_heap, peak_memory_mb, peak_rss_mb, start_run

CPU = torch.device("cpu")
MB = 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and glibc")
def test_start_run_forgets_an_earlier_runs_peak_and_kept_heap():
    keep_heap()  # as in a trial: freed blocks stay in the heap, resident
    assert start_run(CPU), f"{CLEAR_REFS} is not writable"
    base = peak_rss_mb()
    earlier = torch.ones(400 * MB // 4)  # an earlier run's activations: 400 MB, touched
    del earlier
    assert peak_memory_mb(CPU)["peak_rss_mb"] > base + 350  # the kernel kept the peak
    start_run(CPU)
    assert peak_rss_mb() < base + 50  # heap handed back, the mark reset to what is resident
    later = torch.ones(100 * MB // 4)
    assert base + 80 < peak_rss_mb() < base + 150  # the next run's own peak
    del later
