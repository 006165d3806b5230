"""A sweep on a deadline, as ci/gpu_grids.sh runs one: local Ray is told the GPUs the packing
counted; SIGTERM (a plain `timeout`) ends a sweep as Ctrl-C does, with its runs.csv and a
report marked partial; the findings come before the figures, and a report that fails says so
whole and fails the sweep. SLOW: a real sweep."""

import os
import signal
import subprocess
import sys

import pytest
import ray
import torch

from bench.sweep import workers
from tests.limits import HANG
from tests.test_grid import write_grid
from tests.test_run import ROOT, held_env, short_tmp, wait_for_a_finished_run  # noqa: F401

BROKEN_FIGURES = """import bench.findings.presentation.render as report


def broken(*args, **kwargs):
    raise RuntimeError("the figures broke (plotting packages other than the pins)")


report.write_figures = broken
"""


def test_local_ray_is_told_the_gpus_torch_counts(monkeypatch):
    told = {}
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "init", lambda **kw: told.update(kw))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert ", 1 GPUs, " in workers.start_ray(None)
    assert told["num_gpus"] == 1 and told["num_cpus"] == os.cpu_count()


@pytest.mark.slow
def test_sigterm_ends_a_sweep_with_its_runs_and_a_partial_report(short_tmp, store_at):  # noqa: F811
    """SIGTERM to the driver alone (as `timeout` sends it) while trials are open: exit 130,
    every run closed, runs.csv of the finished trials, partial.md saying the sweep was cut; with
    the figures broken (a plugin breaks them in the driver) runs.csv is written all the same
    and the report's error is printed with its traceback. The hold plugin lets exactly one
    trial train, so the cut finds one finished on any CPU."""
    grid = write_grid(short_tmp, "cut", seeds=[0, 1, 2, 3])
    plugin = short_tmp / "broken_figures.py"
    plugin.write_text(BROKEN_FIGURES)
    store_at(short_tmp / "results" / "mlflow.db")
    env = held_env(short_tmp, 1)
    driver = subprocess.Popen(
        [sys.executable, "-m", "bench.run", str(grid), "--set", "train.steps=60",
         "--results-dir", short_tmp / "results"],
        cwd=ROOT, env={**env, "ATTNBENCH_PLUGINS": f"{env['ATTNBENCH_PLUGINS']},{plugin}"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    wait_for_a_finished_run(short_tmp, "cut", driver)
    os.kill(driver.pid, signal.SIGTERM)
    out = driver.communicate(timeout=HANG)[0]
    assert driver.returncode == 130, out[-3000:]
    folder = short_tmp / "results" / "cut"
    finished = len(list(folder.glob("trials/*/result.json")))
    runs = (folder / "runs.csv").read_text().splitlines()
    assert len(runs) - 1 == finished == 1, out[-3000:]
    assert "the sweep was stopped (SIGINT or SIGTERM)" in (folder / "partial.md").read_text()
    assert "RuntimeError: the figures broke" in out and "error: the report failed" in out
    assert "interrupted: finished trials are kept" in out
