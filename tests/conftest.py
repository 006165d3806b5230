import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from bench.measure import cost
from bench.sweep import estimate
from tests.limits import HANG

SESSION_URI = os.environ.get("MLFLOW_TRACKING_URI")


def pytest_configure(config):
    """An xdist worker takes its share of the cores, not all of them: torch's threads (and
    those of the commands the tests start, through OMP_NUM_THREADS where it is not set) are the
    cores over the workers, so two workers on two cores never run four spinning threads. A
    test's result never depends on it (no test depends on core count); its time does, several
    fold where the workers' threads outnumber the cores."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        share = max(1, (os.cpu_count() or 1) // int(workers))
        torch.set_num_threads(share)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _timed_at_the_fewest_steps(monkeypatch):
    """The dry run's time table and cost table measured at their fewest steps (a calibration:
    one warm-up step, then MIN_STEPS; one step an arm a repetition), not for TIMED_S and REP_S
    seconds: no
    test reads a time (none may depend on the CPU's speed), so the seconds that make them
    precise buy a test nothing; every line is still measured and printed by the same code."""
    monkeypatch.setattr(estimate, "TIMED_S", 0.0)
    monkeypatch.setattr(cost, "REP_S", 0.0)


@pytest.fixture(autouse=True)
def _own_tracking_uri():
    """Each test ends with the $MLFLOW_TRACKING_URI the session began with: the reader's
    `mlflow.set_tracking_uri` (in a test, or a module's fixture) also sets the variable, which
    would otherwise send a later test's subprocesses, on the same pytest worker, into an earlier
    test's store (the browser test's store once held the GPU script's cut sweeps, the second
    of which then found its first look finished)."""
    yield
    if SESSION_URI is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = SESSION_URI


@pytest.fixture
def clean(monkeypatch):
    """Restore the variant registry and drop imported file plugins afterwards; no plugin env,
    no tracking URI from the environment."""
    from bench import plugins
    from variants import registry

    monkeypatch.delenv(plugins.ENV, raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    saved = dict(registry._VARIANTS)
    yield
    registry._VARIANTS.clear()
    registry._VARIANTS.update(saved)
    for name in [m for m in sys.modules if m.startswith("attnbench_plugin_")]:
        del sys.modules[name]


@pytest.fixture(scope="session")
def made_store(tmp_path_factory):
    """An empty MLflow sqlite store whose tables are made once a session (MLflow's migrations
    take seconds a store): `store_at` copies it where a test's own store goes. A store made new
    is what the tests of its making check (test_run's smoke sweep, two sweeps at once into one
    new store), and they make theirs."""
    from bench.tracking import store

    path = tmp_path_factory.mktemp("made_store") / "mlflow.db"
    store.open_store(f"sqlite:///{path}")
    return path


@pytest.fixture
def store_at(made_store):
    """`store_at(path)`: an empty store at `path` (a copy of `made_store`), its sqlite URI."""
    import shutil

    def place(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(made_store, path)
        return f"sqlite:///{path}"

    return place


@pytest.fixture
def short_tmp():
    """A short temp dir (Ray's socket paths must stay under ~100 characters), removed after
    the test: processes a killed sweep leaves behind (Ray's, a held trial, which exits once the
    folder is gone) may still write there for a moment, so removal is retried until the tree
    is gone (HANG at most: a hang guard, never a deadline the test depends on)."""
    d = Path(tempfile.mkdtemp(prefix="ab", dir="/tmp"))
    yield d
    deadline = time.monotonic() + HANG
    while d.exists():
        try:
            shutil.rmtree(d)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
