"""Trials packed on a GPU by default (`bench.sweep.gpus`), checked on the CPU: as many as fit in
its memory and at most PACK, a share that cannot hold a trial refused before anything runs
(exit 2 naming resources.gpu), the dry run saying how many run at once and why, and MPS started
only where trials share a GPU and the machine has it. No GPU, no Ray."""

import stat
from pathlib import Path

import pytest
import torch

from bench.commands import run
from bench.config import ConfigError
from bench.experiment.open import open_grid
from bench.model import create_model
from bench.sweep import gpus
from bench.sweep.trials import resolve_trials
from tests.test_grid import write_grid

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def main_job_trials():
    return resolve_trials(open_grid(ROOT / "ablations" / "heads_grid.yaml"), True)


def test_a_trial_needs_its_state_activations_and_a_context(main_job_trials):
    t = main_job_trials[0]
    mb = gpus.trial_mb(t)
    params = sum(p.numel() for p in create_model(t.cfg.model, t.vocab).parameters())
    assert gpus.CONTEXT_MB + params * gpus.STATE_BYTES / 1e6 < mb < gpus.CONTEXT_MB + 200


def test_packing_fills_a_gpu_up_to_its_memory_and_pack(main_job_trials):
    big = gpus.packing(main_job_trials, None, 80_000.0, 1)
    assert big.per_gpu == gpus.PACK and big.share == 1 / gpus.PACK
    assert f"{gpus.PACK} trials per GPU" in big.why
    small = gpus.packing(main_job_trials, None, 2_000.0, 1)  # a 2 GB card: fewer fit
    assert 1 <= small.per_gpu < gpus.PACK and small.share == 1 / small.per_gpu
    assert gpus.packing(main_job_trials, None, None, 4).per_gpu == gpus.PACK  # a cluster
    assert gpus.packing(main_job_trials, None, 80_000.0, 0).share == 0.0  # no GPU
    assert gpus.packing(main_job_trials, 0.5, 80_000.0, 1).per_gpu == 2  # as the grid sets it
    with pytest.raises(ConfigError, match=r"resources.gpu=0.001: a trial needs about"):
        gpus.packing(main_job_trials, 0.001, 80_000.0, 1)


def test_the_dry_run_says_how_many_run_at_once_and_refuses_a_share_too_small(
        monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(gpus, "gpu_mb", lambda: 16_000.0)
    assert run.main([str(ROOT / "ablations" / "smoke.yaml"), "--dry-run"]) == 0
    assert f"GPUs: {gpus.PACK} trials per GPU (16,000 MB" in capsys.readouterr().out
    tiny = write_grid(tmp_path, "crowded", resources={"cpu": 1, "gpu": 0.01})
    assert run.main([str(tiny), "--dry-run"]) == 2
    assert "error: resources.gpu=0.01: a trial needs about" in capsys.readouterr().err


def test_mps_starts_only_where_trials_share_a_gpu_and_it_is_there(monkeypatch, tmp_path):
    assert gpus.start_mps(1) == "MPS not needed: one trial per GPU"
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    assert "nvidia-cuda-mps-control is not on this machine" in gpus.start_mps(8)
    fake = tmp_path / "nvidia-cuda-mps-control"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path / 'called'}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(gpus.shutil, "which", lambda name: str(fake))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "pipe"))
    assert gpus.start_mps(8).startswith("MPS used: started")
    assert (tmp_path / "called").read_text().strip() == "-d"
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "control").touch()
    assert gpus.start_mps(8) == "MPS used: its daemon was already running"
