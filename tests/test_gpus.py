"""Trials packed on a GPU by default (`bench.sweep.gpus`), checked on the CPU: as many as fit in
its memory and at most PACK, a share that cannot hold a trial refused before anything runs
(exit 2 naming resources.gpu), the dry run saying how many run at once and why (on the CPU as
on a GPU) and that a captured step runs eagerly without CUDA, MPS said to be in use only once a
CUDA client connected, and a trial never falling to the CPU where it was handed a GPU. No GPU,
no Ray."""

import os
import stat
from pathlib import Path

import pytest
import torch

from bench import provenance, run
from bench.config import ConfigError
from bench.experiment.open import open_grid
from bench.model import create_model
from bench.sweep import gpus
from bench.sweep.trials import resolve_trials
from tests.helpers import write_grid

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
    smoke, cpus = str(ROOT / "examples" / "smoke.yaml"), os.cpu_count()
    graphs = ["--set", "train.compile=graphs", "--set", "train.optimizer=adamw", "--set",
              "train.clip_mode=global"]  # a capturable step
    assert run.main([smoke, "--dry-run", *graphs]) == 0
    said = capsys.readouterr().out  # on the CPU: as many as the cores hold, the step eager
    assert f"at once: {cpus} trials ({cpus} CPUs here, resources.cpu=1 each; no GPU)" in said
    assert "train.compile=graphs: no CUDA for the trials here, so each runs its step eagerly" \
        in said
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(gpus, "gpu_mb", lambda: 16_000.0)
    assert run.main([smoke, "--dry-run", *graphs]) == 0
    said = capsys.readouterr().out
    assert f"GPUs: {gpus.PACK} trials per GPU (16,000 MB" in said
    n, limit = min(gpus.PACK, cpus), "GPUs" if gpus.PACK <= cpus else "CPUs"
    assert (f"at once: {n} trials (1 GPUs at 0.125 of one each: {gpus.PACK}; {cpus} CPUs here "
            f"at resources.cpu=1 each: {cpus}; the {limit} limit it)") in said
    assert "train.compile=graphs" not in said  # captured on the GPU
    tiny = write_grid(tmp_path, "crowded", resources={"cpu": 1, "gpu": 0.01})
    assert run.main([str(tiny), "--dry-run"]) == 2
    assert "error: resources.gpu=0.01: a trial needs about" in capsys.readouterr().err


FAKE_MPS = """#!/bin/sh
# nvidia-cuda-mps-control as the tests see it: -d starts the daemon (its control pipe), stdin
# takes commands; a server is listed once a client has connected (the file `served`)
if [ "$1" = -d ]; then mkdir -p {pipe} && touch {pipe}/control && echo started >> {log}; exit 0; fi
read -r command
echo "$command" >> {log}
[ "$command" = get_server_list ] && [ -f {served} ] && cat {served}
exit 0
"""


def fake_mps(monkeypatch, tmp_path: Path, client: str) -> Path:
    """A fake MPS control on the path, its pipe under tmp_path, and CLIENT (the CUDA client)
    as `client` ('serve': it connects, the daemon lists a server; 'fail': it cannot reach CUDA;
    'alone': it runs without going through MPS); returns the log of what the control got."""
    log, pipe, served = tmp_path / "called", tmp_path / "pipe", tmp_path / "served"
    fake = tmp_path / "nvidia-cuda-mps-control"
    fake.write_text(FAKE_MPS.format(pipe=pipe, log=log, served=served))
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(gpus.shutil, "which", lambda name: str(fake))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe))
    monkeypatch.setattr(gpus, "CLIENT", {
        "serve": f"open({str(served)!r}, 'w').write('4242')", "alone": "pass",
        "fail": "raise RuntimeError('CUDA error: MPS client failed to connect')"}[client])
    return log


def test_mps_starts_only_where_trials_share_a_gpu_and_it_is_there(monkeypatch, tmp_path):
    assert gpus.start_mps(1) == "MPS not needed: one trial per GPU"
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    assert "nvidia-cuda-mps-control is not on this machine" in gpus.start_mps(8)
    log = fake_mps(monkeypatch, tmp_path, "serve")
    said = gpus.start_mps(8)
    assert said.startswith("MPS used: started") and "a CUDA client connected" in said
    assert log.read_text().split() == ["started", "get_server_list"]
    assert gpus.start_mps(8) == ("MPS used: its daemon was already running; a CUDA client "
                                 "connected through it")


def test_mps_switched_off_is_never_started_and_a_bad_switch_is_refused(monkeypatch, tmp_path,
                                                                       capsys):
    """ATTNBENCH_MPS=off (ci/gpu_grids.sh's, after MPS failed its check): no sweep starts or
    probes the daemon again; a value other than on and off exits 2 naming it."""
    log = fake_mps(monkeypatch, tmp_path, "serve")
    assert gpus.start_mps(8, off=True) == ("MPS not used: ATTNBENCH_MPS=off (trials share the "
                                           "GPU time-sliced)")
    assert not log.exists()  # the control was never called
    monkeypatch.setenv("ATTNBENCH_MPS", "off")
    assert gpus.mps_off()
    monkeypatch.setenv("ATTNBENCH_MPS", "of")
    assert run.main([str(ROOT / "examples" / "smoke.yaml"), "--dry-run"]) == 2
    assert "error: ATTNBENCH_MPS='of': expected on (the default) or off" in \
        capsys.readouterr().err


@pytest.mark.parametrize("client", ["fail", "alone"])
def test_mps_is_in_use_only_once_a_client_connected(monkeypatch, tmp_path, client):
    """A daemon that serves no CUDA client is not reported in use, and is stopped again when
    this sweep started it; one already running is left, said to be unusable."""
    log = fake_mps(monkeypatch, tmp_path, client)
    said = gpus.start_mps(8)
    assert said.startswith("MPS not used: its daemon started, but") and "stopped it" in said
    assert ("MPS client failed to connect" if client == "fail" else "lists no server") in said
    assert log.read_text().split()[-1] == "quit"
    (tmp_path / "pipe" / "control").touch()  # one already running: not ours to stop
    assert gpus.start_mps(8).startswith("MPS not usable: its daemon was already running")
    assert log.read_text().split().count("quit") == 1


def test_a_trial_that_cannot_reach_cuda_fails_naming_the_device(monkeypatch):
    """Never the CPU where CUDA was asked for or a GPU was handed to the process (Ray's
    CUDA_VISIBLE_DEVICES, a CUDA build of torch) and CUDA cannot be reached: a ValueError
    naming the device; a CPU build handed Ray's logical GPUs, or nothing handed, runs on the
    CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert provenance.device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"train.device=cuda, but this process finds no CUDA"):
        provenance.device("cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    with pytest.raises(ValueError, match=r"train.device=auto in a process handed GPU 0 "
                       r"\(CUDA_VISIBLE_DEVICES\), but this process finds no CUDA device"):
        provenance.device("auto")
    assert provenance.device("cpu") == torch.device("cpu")  # asked for: no GPU needed
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    assert provenance.device("auto") == torch.device("cpu")


def test_a_copy_without_git_records_the_commit_it_was_made_from(monkeypatch, tmp_path):
    """A lent machine gets the checkout without .git: the commit comes from
    $ATTNBENCH_GIT_COMMIT (ci/carry.py writes it where the copy is made), else 'unknown'."""
    here = provenance.git_commit()
    assert len(here.split("-")[0]) == 40
    monkeypatch.setattr(provenance, "ROOT", tmp_path)  # no checkout there
    monkeypatch.delenv("ATTNBENCH_GIT_COMMIT", raising=False)
    assert provenance.git_commit() == "unknown"
    monkeypatch.setenv("ATTNBENCH_GIT_COMMIT", here)
    assert provenance.git_commit() == here


def test_mlflow_shipped_as_its_client_alone_is_recorded_at_its_version(monkeypatch):
    """The offline bundle ships MLflow as mlflow-skinny: its version is recorded for mlflow
    (the same module), not 'absent'; a package under neither name is 'absent'."""
    real = provenance.metadata.version

    def version(name: str) -> str:
        if name == "mlflow":
            raise provenance.metadata.PackageNotFoundError(name)
        return "9.8.7" if name == "mlflow-skinny" else real(name)

    monkeypatch.setattr(provenance.metadata, "version", version)
    assert provenance.versions()["mlflow"] == "9.8.7"
    monkeypatch.setattr(provenance, "SHIPPED_AS", {})
    assert provenance.versions()["mlflow"] == "absent"
