"""A sweep on a deadline, as ci/gpu_grids.sh runs one: local Ray is told the GPUs the packing
counted, and SIGTERM (a plain `timeout`) is Ctrl-C to a sweep that trains, so it ends as
tests/test_run.py's cut sweep ends: exit 130, every run closed, runs.csv of the finished trials
and a report marked partial (a report that fails said whole, failing the sweep). The rehearsed
GPU script (tests/test_gpu_script.py) sends a real sweep SIGTERM through `timeout`. Fast: no
sweep here."""

import os
import signal
import threading

import ray
import torch

from bench.sweep import runner, workers


def test_local_ray_is_told_the_gpus_torch_counts(monkeypatch):
    told = {}
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "init", lambda **kw: told.update(kw))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert ", 1 GPUs, " in workers.start_ray(None)
    assert told["num_gpus"] == 1 and told["num_cpus"] == os.cpu_count()


def test_sigterm_is_ctrl_c_while_the_sweep_trains():
    """Inside `runner.sigterm_as_sigint` (around Tune's run, after ray.init set its own SIGTERM
    handler) a SIGTERM to the driver alone reaches the SIGINT handler, Ctrl-C's path; after it,
    SIGTERM's handler is the one before."""
    assert threading.current_thread() is threading.main_thread()  # where signals are handled
    got: list[int] = []
    before_int = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    before_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as if another's
    try:
        with runner.sigterm_as_sigint():
            os.kill(os.getpid(), signal.SIGTERM)  # its handlers run before os.kill returns
        assert got == [signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before_int)
        signal.signal(signal.SIGTERM, before_term)
