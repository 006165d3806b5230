"""bench.run: Ray Tune sweeps tracked in MLflow, rerun after Ctrl-C, divergence,
a real Ray cluster, concurrent sqlite logging.

SLOW: about 3 minutes on 2 cores. All but the schema tests run real sweeps of small grids
through Ray (local with 2 CPUs, or a cluster the test starts) into a temporary MLflow store.
Skip them with `pytest -m "not slow"`.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from bench import codehash
from bench.config import parse_sets
from bench.experiment.open import Overrides, open_grid
from bench.sweep.trials import resolve_trials
from bench.tracking import names, reader, store
from tests.helpers import (
    ROOT,
    SMOKE,
    cli_env,
    client,
    free_port,
    held_env,
    mlflow_server,
    trial_runs,
    wait_for_a_finished_run,
    write_grid,
)
from tests.limits import HANG
from tests.plugins import hold

slow = pytest.mark.slow


def bench_run(args: list, tmp: Path, report: bool = False, env: dict | None = None,
              **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.run", *map(str, args), "--results-dir",
                           tmp / "results", *([] if report else ["--no-report"])], cwd=ROOT,
                          env=env or cli_env(tmp), capture_output=True, text=True,
                          timeout=HANG, **kw)


def expected_hashes(grid_file: Path, sets: tuple = (), seeds: list | None = None) -> set[str]:
    overrides = Overrides(parse_sets(list(sets)), seeds=seeds)
    found = resolve_trials(open_grid(grid_file, overrides), dry_run=False)
    return {t.hash for t in found}


RAY_TEARDOWN = re.compile(r"(?:Exception ignored in: [^\n]*\n)?"
                          r"Traceback \(most recent call last\):\n"
                          r"(?:(?:[ \t][^\n]*)?\n)*(?:SystemExit: 1\n)?")


def assert_no_traceback(out: str) -> None:
    """No traceback in a sweep's output but Ray's own teardown of an idle worker: a SIGTERM
    that lands in a weakref callback prints `Exception ignored ... SystemExit: 1` through Ray's
    sigterm_handler, which says nothing about the sweep (and may be cut off before its last
    line, or have another process's line printed into it)."""
    ours = RAY_TEARDOWN.sub(lambda m: "" if "sigterm_handler" in m[0] else m[0], out)
    assert "Traceback" not in ours and "Exception ignored" not in ours, ours[-3000:]


# --- sweeps through Ray ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def smoke_sweep():
    """The smoke grid once, local Ray with 2 CPUs, into a temporary store that does not exist
    yet, and at the same time, from another driver into that store, its twin (the smoke grid on
    seed 1, named `twin`): (folder, the smoke sweep, the twin's), each a CompletedProcess."""
    with tempfile.TemporaryDirectory(prefix="ab", dir="/tmp") as d:
        tmp = Path(d)
        grids = [SMOKE, write_grid(tmp, "twin", seeds=[1])]
        logs = [(tmp / f"{g.stem}.out", tmp / f"{g.stem}.err") for g in grids]
        drivers = []
        for grid, (out, err) in zip(grids, logs, strict=True):
            with open(out, "w") as o, open(err, "w") as e:
                drivers.append(subprocess.Popen(
                    [sys.executable, "-m", "bench.run", str(grid), "--results-dir",
                     tmp / "results", "--no-report"], cwd=ROOT, env=cli_env(tmp), stdout=o,
                    stderr=e, text=True))
        done = [subprocess.CompletedProcess(d.args, d.wait(timeout=HANG), out.read_text(),
                                            err.read_text())
                for d, (out, err) in zip(drivers, logs, strict=True)]
        yield tmp, *done


@slow
def test_smoke_sweep_logs_one_finished_run_per_trial(smoke_sweep):
    tmp, done, _ = smoke_sweep
    assert done.returncode == 0, done.stderr[-3000:]
    for out in (done.stdout, done.stderr):  # a successful sweep ends without a traceback
        assert_no_traceback(out)
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp / 'results' / 'mlflow.db'} " \
           "--host 127.0.0.1" in done.stdout
    c = client(tmp)
    exp = c.get_experiment_by_name("smoke").experiment_id
    parent = c.search_runs([exp], "tags.`attnbench.role` = 'sweep'")
    runs = trial_runs(tmp, "smoke")
    assert len(parent) == 1 and parent[0].info.status == "FINISHED"
    assert parent[0].data.tags["trials"] == "2" and parent[0].data.tags["looks"] == "1 of 1"
    assert parent[0].data.tags["setting"] == "sweep"  # the runs table's first group
    recorded = c.download_artifacts(parent[0].info.run_id, "trials.json", str(tmp))
    assert set(json.loads(Path(recorded).read_text())["trials"]) == expected_hashes(SMOKE)
    # MLflow's own schema: the experiment is a training one, runs name their source and commit
    assert c.get_experiment(exp).tags["mlflow.experimentKind"] == "custom_model_development"
    note = parent[0].data.tags["mlflow.note.content"]
    assert str(SMOKE) in note and "python -m bench.run" in note
    commit = parent[0].data.params["git_commit"]
    for r in [*parent, *runs]:
        assert r.data.tags["mlflow.source.name"] == "bench.run smoke.yaml"
        assert r.data.tags["mlflow.source.git.commit"] == commit.split("-dirty")[0]
    # one checkpoint store: the trial folders; Ray's folder holds no weights
    assert not list((tmp / "results" / "smoke" / "ray").rglob("*.pt"))
    assert {r.data.tags["attnbench.trial_hash"] for r in runs} == expected_hashes(SMOKE)
    assert sorted(r.data.params["model.variant"] for r in runs) == ["fixed", "talking-heads"]
    for r in runs:
        h = r.data.tags["attnbench.trial_hash"]
        assert r.info.status == "FINISHED"
        assert r.data.tags["mlflow.parentRunId"] == parent[0].info.run_id
        assert r.data.tags["attnbench.grid"] == "smoke"
        assert r.data.tags["attnbench.grid_keys"] == "model.variant"
        assert r.info.run_name == f"{r.data.params['model.variant']}-s0"
        assert r.data.tags["setting"] == r.data.params["model.variant"]  # its group, seeds aside
        assert r.data.tags["mlflow.note.content"] == (  # what its page shows first
            f"Trial of `smoke`: `model.variant` = {r.data.params['model.variant']}, seed 0.")
        p = r.data.params
        assert (p["model.n_heads"], p["train.steps"], p["seed"], p["data.name"]) == (
            "2", "20", "0", "synthetic")
        assert p["dataset.n_bytes"] == "60000" and len(p["dataset.sha256"]) == 64
        assert p["versions.torch"].startswith("2.") and p["git_commit"] == commit
        [ds] = r.inputs.dataset_inputs
        profile = json.loads(ds.dataset.profile)
        assert (ds.dataset.name, ds.dataset.source_type) == ("synthetic", "code")
        assert ds.dataset.digest == p["dataset.sha256"][:16] == profile["sha256"][:16]
        assert profile["split_sizes"]["train"] == 54000 and profile["prefix"] is False
        assert 0 < profile["entropy_rate"] < 8 and float(p["dataset.entropy_rate"]) > 0
        m = r.data.metrics
        assert m["steps"] == 20 and m["final_tokens"] == 20 * 4 * 32 and m["params"] > 0
        assert m["peak_rss_mb"] > 0 and m["final_peak_rss_mb"] >= m["peak_rss_mb"]
        assert "peak_mem_mb" not in m and "peak_cuda_mb" not in m  # CPU: no CUDA peak
        assert 0 < m["final_dev_bpc"] < 8 and 0 < m["final_test_bpc"] < 8
        assert m["flops_full"] > 0 and {"layer_max_span.0", "layer_max_span.1"} <= set(m)
        dev = c.get_metric_history(r.info.run_id, "dev_bpc")
        assert [x.step for x in dev] == [10, 20]
        for key in ("mean_span", "tokens_per_s", "tokens"):  # one value per evaluation
            assert [x.step for x in c.get_metric_history(r.info.run_id, key)] == [10, 20]
        assert {"train_bpc", "lr", "mean_span", "tokens_per_s"} <= set(m)
        arts = {a.path for a in c.list_artifacts(r.info.run_id)}
        assert {"config.json", "result.json", "code.json"} <= arts
        # the code its process imported, each file as code: training, model and variants, and
        # no analysis code (an analysis change between looks is not other training code)
        record = json.loads(Path(c.download_artifacts(r.info.run_id, "code.json",
                                                      str(tmp))).read_text())
        assert r.data.tags["attnbench.plan.code_sha"] == codehash.code_sha(record)
        assert {"bench/training/loop.py", "bench/model/body.py", "bench/trial.py",
                "variants/mixing/talking.py"} <= set(record), sorted(record)
        assert not any(p.startswith("bench/findings/") for p in record), sorted(record)
        assert json.loads(p["layer.options.chunk"]) is None  # the layer's resolved options
        assert (tmp / "results" / "smoke" / "trials" / h / "result.json").exists()


def start_sweep(grid: Path, tmp: Path, *extra: str, env: dict | None = None,
                report: bool = False) -> subprocess.Popen:
    """bench.run in its own process group (so the test can signal or kill exactly it)."""
    return subprocess.Popen([sys.executable, "-m", "bench.run", str(grid), *extra,
                             "--results-dir", tmp / "results",
                             *([] if report else ["--no-report"])], cwd=ROOT,
                            env=env or cli_env(tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def assert_once_each(tmp: Path, grid: Path, sets: tuple = ()) -> dict:
    """Every trial of the grid has exactly one run, FINISHED; returns them by trial hash."""
    runs = trial_runs(tmp, yaml.safe_load(grid.read_text())["name"])
    by_hash = {r.data.tags["attnbench.trial_hash"]: r for r in runs}
    assert len(runs) == len(by_hash) and set(by_hash) == expected_hashes(grid, sets)
    assert all(r.info.status == "FINISHED" for r in runs), [r.info.status for r in runs]
    return by_hash


@slow
def test_two_sweeps_at_once_into_one_sqlite_store(smoke_sweep):
    """Two drivers, two grids, one new sqlite store (`smoke_sweep`: the smoke grid and its
    twin): both complete, no run lost or doubled."""
    tmp, *done = smoke_sweep
    assert [d.returncode for d in done] == [0, 0], done[0].stderr[-3000:] + done[1].stderr[-3000:]
    c = client(tmp)
    for g in (SMOKE, tmp / "twin.yaml"):
        assert_once_each(tmp, g)
        exp = c.get_experiment_by_name(g.stem).experiment_id
        assert len(c.search_runs([exp], "tags.`attnbench.role` = 'sweep'")) == 1
    for out in (text for d in done for text in (d.stdout, d.stderr)):
        assert_no_traceback(out)


def finished(tmp: Path, grid: str) -> dict[str, tuple[str, int]]:
    """The FINISHED trial runs: trial hash -> (run id, end time)."""
    return {r.data.tags["attnbench.trial_hash"]: (r.info.run_id, r.info.end_time)
            for r in trial_runs(tmp, grid) if r.info.status == "FINISHED"}


def wait_for_more_finished(tmp: Path, grid: str, driver: subprocess.Popen, n: int) -> None:
    """Until more than n trial runs are FINISHED (see `wait_for_a_finished_run`)."""
    deadline = time.time() + HANG
    while time.time() < deadline and driver.poll() is None:
        if len(finished(tmp, grid)) > n:
            return
        time.sleep(0.2)
    raise AssertionError(f"no more than {n} trials of {grid} finished in time")


BROKEN_FIGURES = """import bench.findings.presentation.render as report


def broken(*args, **kwargs):
    raise RuntimeError("the figures broke (plotting packages other than the pins)")


report.write_figures = broken
"""
FIGURES_FAILED = re.compile(r"Traceback \(most recent call last\):\n(?:[ \t][^\n]*\n)*"
                            r"RuntimeError: the figures broke[^\n]*\n")


@slow
def test_a_cut_sweep_reruns_only_the_missing_trials(short_tmp, store_at):
    """Ctrl-C (SIGINT to the driver and what it started) while trials are open: exit 130, every
    run FINISHED or KILLED, runs.csv of the finished trials and partial.md saying the sweep was
    cut; with the figures broken (a plugin breaks them in the driver) runs.csv is written all
    the same and the report's error is printed with its traceback, the only one. The same
    command again, and kill -9 of that driver and what it started; the same command a third
    time: every trial FINISHED exactly once, no run left RUNNING, trials finished before either
    cut not retrained, and a trial the Ctrl-C cut continues in the run it started. The hold
    plugin lets one trial train in each of the first two sweeps (the rest wait, runs open), so
    each cut finds exactly one more finished. (SIGTERM, `timeout`'s, is Ctrl-C to a sweep:
    tests/test_cut.py.)"""
    grid = write_grid(short_tmp, "cut", seeds=[0, 1])  # 4 trials: 1, 1, then 2 finish
    store_at(short_tmp / "results" / "mlflow.db")
    sets = ("train.steps=60",)
    (short_tmp / "broken_figures.py").write_text(BROKEN_FIGURES)
    held = held_env(short_tmp, 1)
    held["ATTNBENCH_PLUGINS"] += f",{short_tmp / 'broken_figures.py'}"
    driver = start_sweep(grid, short_tmp, "--set", sets[0], env=held, report=True)
    wait_for_a_finished_run(short_tmp, "cut", driver)
    os.killpg(driver.pid, signal.SIGINT)  # Ctrl-C: to the driver and everything it started
    out = driver.communicate(timeout=HANG)[0]
    assert driver.returncode == 130, out[-3000:]
    assert "interrupted: finished trials are kept" in out
    assert "error: the report failed" in out and len(FIGURES_FAILED.findall(out)) == 1, out
    assert_no_traceback(FIGURES_FAILED.sub("", out))
    first = {r.data.tags["attnbench.trial_hash"]: r for r in trial_runs(short_tmp, "cut")}
    assert all(r.info.status in ("FINISHED", "KILLED") for r in first.values())
    assert len(finished(short_tmp, "cut")) == 1, out[-3000:]
    assert len(first) > 1  # held trials had opened their runs: the Ctrl-C cut them
    folder = short_tmp / "results" / "cut"
    assert len((folder / "runs.csv").read_text().splitlines()) - 1 == 1  # the finished trial
    assert "the sweep was stopped (SIGINT or SIGTERM)" in (folder / "partial.md").read_text()

    (short_tmp / "results" / "cut" / hold.LEDGER).unlink()  # one more trial may train
    driver = start_sweep(grid, short_tmp, "--set", sets[0], env=held)
    wait_for_more_finished(short_tmp, "cut", driver, 1)
    os.killpg(driver.pid, signal.SIGKILL)  # kill -9: the driver and its local Ray, no goodbye
    driver.communicate(timeout=HANG)
    before = finished(short_tmp, "cut")
    assert len(before) == 2
    again = bench_run([grid, "--set", sets[0]], short_tmp, env=held | {hold.HOLD: ""})
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "2 already finished" in again.stdout
    by_hash = assert_once_each(short_tmp, grid, sets)
    for h, (run_id, end) in before.items():
        assert (by_hash[h].info.run_id, by_hash[h].info.end_time) == (run_id, end)
    for h, r in first.items():  # a trial the Ctrl-C cut continues in the run it started
        assert by_hash[h].info.run_id == r.info.run_id


@slow
def test_a_corrupted_checkpoint_restarts_and_a_diverging_trial_fails_alone(short_tmp, store_at):
    """One sweep of two trials. A checkpoint.pt that cannot be read (a disk filled mid-copy, a
    bad sync) is moved aside with a warning and its trial trains from step 0, not failing at
    every retry; a trial whose loss diverges fails with its reason as a line, not a traceback,
    and the sweep goes on (exit 1: a trial failed)."""
    grid = write_grid(short_tmp, "cut_and_nan", grid={"train.lr": [0.07, 1.0e30]})
    trials = {float(t.cfg.train.lr): t.hash for t in resolve_trials(
        open_grid(grid), dry_run=False)}
    folder = short_tmp / "results" / "cut_and_nan" / "trials" / trials[0.07]
    folder.mkdir(parents=True)
    (folder / "checkpoint.pt").write_bytes(b"PK\x03\x04 not a checkpoint" * 100)
    store_at(short_tmp / "results" / "mlflow.db")
    done = bench_run([grid], short_tmp)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    for out in (done.stdout, done.stderr):  # a failed trial is a line, not a traceback
        assert_no_traceback(out)
    assert f"{folder / 'checkpoint.pt'} is unreadable" in done.stdout + done.stderr
    assert (folder / "checkpoint.pt.corrupt").exists()
    runs = {float(r.data.params["train.lr"]): r for r in trial_runs(short_tmp, "cut_and_nan")}
    ok, bad = runs[0.07], runs[1e30]
    assert ok.info.status == "FINISHED" and "final_dev_bpc" in ok.data.metrics
    history = client(short_tmp).get_metric_history(ok.info.run_id, "dev_bpc")
    assert [m.step for m in history] == [10, 20]  # trained from the start
    assert bad.info.status == "FAILED"
    assert re.search(r"Diverged: training loss is nan", bad.data.tags["attnbench.failure"])
    assert "final_dev_bpc" not in bad.data.metrics


@slow
def test_stale_result_is_reported_reused_then_rerun_with_rerun_stale(short_tmp, store_at):
    """A finished trial from another commit: the rerun names it and reuses it, marked stale;
    --rerun-stale trains it again, in a new run, and leaves the current one alone."""
    grid = write_grid(short_tmp, "stale")
    old, other = sorted(expected_hashes(grid))
    uri = store_at(short_tmp / "results" / "mlflow.db")
    c = store.open_store(uri)
    exp = store.experiment_id(c, "stale", uri)
    seeded = c.create_run(exp, tags={names.ROLE: "trial", names.HASH: old}).info.run_id
    c.log_param(seeded, "git_commit", "0" * 40)
    c.set_terminated(seeded, "FINISHED")
    first = bench_run([grid], short_tmp)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "1 already finished, 1 to run" in first.stdout
    assert "1 finished trials ran on other code than this checkout" in first.stderr
    assert f"{'0' * 40} (1); reusing them" in first.stderr and "stale: " + "0" * 40 in first.stdout
    again = bench_run([grid, "--rerun-stale"], short_tmp)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "1 already finished, 1 to run" in again.stdout and "rerunning them" in again.stderr
    runs = reader.trial_runs(c, exp)
    assert [r.info.run_id for r in runs[old]][1:] == [seeded]  # a new run, the old one kept
    assert runs[old][0].info.status == "FINISHED" and len(runs[other]) == 1
    assert "stale: " + "0" * 40 not in again.stdout


def start_node(args: list, tmp: Path, cpus: int = 1) -> subprocess.Popen:
    """`ray start --block` in its own session, so the test stops exactly what it started; on
    SIGTERM it shuts down at once (Ray would first drain the node for up to 30 s, for services
    finishing requests; the test stops it only once its sweep has ended)."""
    env = {**cli_env(tmp), "RAY_AUTH_MODE": "disabled",
           "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    return subprocess.Popen([Path(sys.executable).parent / "ray", "start", "--block",
                             "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}",
                             "--disable-usage-stats", *args], env=env, cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop_node(node: subprocess.Popen) -> None:
    os.killpg(node.pid, signal.SIGTERM)
    try:
        node.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(node.pid, signal.SIGKILL)  # daemons that outlived `ray start`
    except ProcessLookupError:
        pass
    node.wait(timeout=15)


def cluster_nodes(address: str, tmp: Path) -> set[str]:
    out = subprocess.run([Path(sys.executable).parent / "ray", "status", "--address", address],
                         env={**cli_env(tmp), "RAY_AUTH_MODE": "disabled"}, capture_output=True,
                         text=True, timeout=HANG).stdout
    return set(re.findall(r"node_([0-9a-f]{56})", out))


def wait_for_nodes(address: str, tmp: Path, n: int) -> set[str]:
    """The cluster's node ids once it has n nodes (a hang guard of HANG s)."""
    ids: set[str] = set()
    deadline = time.time() + HANG
    while time.time() < deadline:
        if len(ids := cluster_nodes(address, tmp)) == n:
            break
        time.sleep(1)
    return ids


@slow
def test_gpu_cluster_recipe_on_two_nodes_packs_trials_tracked_over_http(short_tmp):
    """docs/tracking.md's GPU-cluster recipe, on this machine: a CPU head (`ray start --head`)
    and a GPU node joined to it, whose 2 GPUs are Ray's logical ones (no CUDA here), a shared
    `mlflow server` over HTTP on 127.0.0.1, the precision pinned for the driver and the
    workers (train.amp=false), and half a GPU per trial: the 8 trials all run on the GPU node,
    at most 4 at a time, each seeing only the GPU Ray gave it, its run saying which node and
    GPU."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes = [start_node(["--head", f"--port={port}", f"--temp-dir={short_tmp}",
                         "--num-gpus=0", "--include-dashboard=false"], short_tmp, cpus=4)]
    server, url = mlflow_server(short_tmp / "shared.db", short_tmp)
    try:
        head = wait_for_nodes(address, short_tmp, 1)
        nodes.append(start_node([f"--address={address}", "--num-gpus=2"], short_tmp, cpus=4))
        gpu_node = wait_for_nodes(address, short_tmp, 2) - head
        assert len(head) == 1 and len(gpu_node) == 1
        grid = write_grid(short_tmp, "packed", seeds=[0, 1, 2, 3],
                          resources={"cpu": 1, "gpu": 0.5})
        done = subprocess.run([sys.executable, "-m", "bench.run", str(grid), "--address",
                               address, "--tracking-uri", url, "--set", "train.amp=false",
                               "--results-dir", short_tmp / "results", "--no-report"],
                              cwd=ROOT, env={**cli_env(short_tmp), "RAY_AUTH_MODE": "disabled"},
                              capture_output=True, text=True, timeout=HANG)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        c = MlflowClient(url)
        exp = c.get_experiment_by_name("packed").experiment_id
        runs = c.search_runs([exp], "tags.`attnbench.role` = 'trial'")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        for node in reversed(nodes):
            stop_node(node)
    assert f"Ray cluster at {address}" in done.stdout
    assert len(runs) == 8 and all(r.info.status == "FINISHED" for r in runs)
    assert {r.data.tags["attnbench.ray_node_id"] for r in runs} == gpu_node  # not the head
    for r in runs:
        gpus = r.data.tags[names.RAY_GPUS]
        assert gpus in ("0", "1") and r.data.tags[names.VISIBLE] == gpus
        assert r.data.tags["attnbench.ray_gcs"].endswith(f":{port}")
        assert r.data.params["train.amp"] == "false" and r.data.params["precision"] == "fp32"
    events = sorted([(r.info.start_time, 1) for r in runs] + [(r.info.end_time, -1) for r in runs])
    at_once = max(np.cumsum([d for _, d in events]))  # runs open at once (an end sorts first)
    assert 2 <= at_once <= 4, at_once


# --- concurrent logging into one sqlite store ------------------------------------------------

WRITER = """
import sys
from mlflow import MlflowClient
from bench.tracking.writer import TrialRun
uri, exp = sys.argv[1], sys.argv[2]
run_id = MlflowClient(uri).create_run(exp).info.run_id
print("ready", flush=True)
sys.stdin.readline()  # the test's go, once every writer is ready: they all write at once
trial = TrialRun(uri, run_id)
for step in range(50):
    trial.log_metrics({"dev_bpc": step / 10, "tokens": step}, step)
trial.client.set_terminated(run_id)
"""


@slow
def test_concurrent_trials_lose_nothing_in_sqlite(tmp_path, store_at):
    uri = store_at(tmp_path / "mlflow.db")
    c = MlflowClient(uri)
    exp = store.experiment_id(c, "concurrent", uri)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, uri, exp], cwd=ROOT,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(4)]
    ready = [w.stdout.readline() for w in writers]  # each past its imports and its run made
    assert ready == ["ready\n"] * 4, [w.communicate(timeout=HANG)[1] for w in writers]
    for w in writers:  # go: all at once
        w.stdin.write("go\n")
        w.stdin.flush()
    errors = [w.communicate(timeout=HANG)[1] for w in writers]
    assert [w.returncode for w in writers] == [0] * 4, errors
    runs = c.search_runs([exp])
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    for r in runs:
        for key in ("dev_bpc", "tokens"):
            hist = c.get_metric_history(r.info.run_id, key)
            assert sorted(m.step for m in hist) == list(range(50))
    import sqlite3

    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@slow
def test_looks_add_seeds_where_undecided_the_cost_is_measured_after_and_a_rerun_adds_nothing(
        short_tmp, store_at):
    """seeds: {looks: [2, 5]} with a step-time claim first and a claim that reads only
    multi-head: look 1 runs seeds 0-1 of both variants; the second claim cannot be decided by 2
    seeds (a sign test's p is at least 1/4: look 1 is futility only), and the cost claim is
    measured after the trials, so look 2 adds seeds 2-4 to multi-head alone. Then cost.csv lies
    beside runs.csv, the cost claim is decided from it (by its rule: no ratio is asserted, it is
    this machine's), findings.md ends with the cost block, the sweep's MLflow page shows the
    trials each look covers, every verdict and the cost block, and the sweep closes with a line
    per comparison; the same command again retrains nothing and logs no new run."""
    from bench.findings.presentation import costs
    from bench.findings.reading import measurement

    timed = {"id": "th_time", "text": "talking-heads steps at most 100x multi-head's",
             "type": "cost", "rows": {"model.variant": "talking-heads"},
             "baseline": {"model.variant": "fixed"}, "metric": "step_time", "expect": "less",
             "margin": 100}
    low = {"id": "low", "text": "multi-head is below 9 bpc", "rows": {"model.variant": "fixed"},
           "metric": "final_test_bpc", "expect": "less", "margin": 9}
    grid = write_grid(short_tmp, "looked", seeds={"looks": [2, 5], "futility": 0.9},
                      claims=[timed, low])
    store_at(short_tmp / "results" / "mlflow.db")
    done = bench_run([grid], short_tmp, report=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "look 2 of 2, seeds 0-4: 3 trials for the undecided claims low" in done.stdout
    assert "every claim decided" not in done.stdout  # decided only after look 2
    folder = short_tmp / "results" / "looked"
    cost = measurement.read(folder / measurement.FILE)
    assert sorted(cost["setting"].unique()) == ["fixed", "talking-heads"]
    found = pd.read_csv(folder / "findings.csv").set_index("claim")
    assert found.loc["th_time", "verdict"] in ("reproduced", "contradicted", "inconclusive")
    assert "measured interleaved on" in found.loc["th_time", "reason"]
    assert costs.START in (folder / "findings.md").read_text()
    assert "cost: talking-heads vs fixed: step time " in done.stdout
    # the sweep's page after each look: the trials it covers (4, then 7), its report
    c = client(short_tmp)
    sweep = c.search_runs([c.get_experiment_by_name("looked").experiment_id],
                          "tags.`attnbench.role` = 'sweep'")[0]
    assert [(m.step, m.value) for m in c.get_metric_history(sweep.info.run_id, "trials")] == [
        (1, 4), (2, 7)]
    tags = sweep.data.tags
    assert (tags["trials"], tags["looks"], tags["seeds"]) == ("7", "2 of 2", "0-4")
    assert tags["mlflow.note.content"].startswith(  # the counts, then every verdict
        f"**7 trials**, look 2 of 2, seeds 0-4: th_time **{tags['verdict.th_time']}** · "
        f"low **{tags['verdict.low']}**.")
    assert "### Cost, rows against their baseline" in tags["mlflow.note.content"]
    assert tags["verdict.low"] in done.stdout
    # each trial's code record, read back beside runs.csv: what bench.verify compares
    written = pd.read_csv(folder / "runs.csv", dtype={"code_sha": str})
    records = json.loads((folder / "code.json").read_text())
    assert written["code_sha"].notna().all() and set(written["code_sha"]) == set(records)

    def ran() -> list[tuple[str, int]]:
        return sorted((r.data.params["model.variant"], int(r.data.params["seed"]))
                      for r in trial_runs(short_tmp, "looked"))

    assert ran() == [*(("fixed", s) for s in range(5)), ("talking-heads", 0),
                     ("talking-heads", 1)]
    again = bench_run([grid], short_tmp)
    assert again.returncode == 0 and again.stdout.count("0 to run") == 2, again.stdout[-3000:]
    assert len(ran()) == 7
    refused = bench_run([grid, "--seeds", "0,1"], short_tmp)
    assert refused.returncode == 2 and "--seed-start" in refused.stderr
