"""The MLflow store: where it is, opening it safely from several processes at once, the
grid's experiment, and the address of its runs in MLflow's UI."""

import contextlib
import fcntl
import logging
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from bench.provenance import LOCAL

from .names import EXPERIMENT_KIND, TRAINING, default_uri
from .view import view_url


def tracking_uri(explicit: str | None, results_dir: Path = LOCAL) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else an sqlite file in the results folder
    (the commands' one rule for where the store is)."""
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or default_uri(results_dir)


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """An exclusive lock on <db>.lock beside an sqlite store, for the writes MLflow does as
    check-then-insert without a lock of its own, which two processes interleave: creating a new
    store's tables ("duplicate column name") and an experiment's datasets ("UNIQUE constraint
    failed: datasets"). Other stores: nothing (their server orders the writes)."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    db = Path(uri.removeprefix("sqlite:///"))
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def open_store(uri: str) -> MlflowClient:
    """A client of the store at `uri`; a new sqlite store is created (an old one migrated) on
    first use, under `store_lock`, so a second sweep starting at once finds the tables made."""
    with store_lock(uri):
        client = MlflowClient(uri)
        client.search_experiments(max_results=1)
    return client


def ui_url(exp: str, base: str = "http://127.0.0.1:5000") -> str:
    """The experiment's runs in MLflow's UI at `base`, as its view shows them (`view.view_url`:
    the sweep first with its verdicts, the trials by setting)."""
    return f"{base.rstrip('/')}/{view_url(exp)}"


def ui_hint(uri: str, exp: str) -> str:
    """How to see the experiment's runs in MLflow's UI: a server's address where the store is a
    tracking server (its UI is there); else the command that serves the store, then the
    address it opens."""
    if uri.startswith(("http://", "https://")):
        return ui_url(exp, uri)
    return (f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1\n"
            f"         then {ui_url(exp)}")


def experiment_id(client: MlflowClient, name: str, uri: str) -> str:
    """The grid's experiment, created on first use; sqlite stores keep artifacts beside the db."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if exp.tags.get(EXPERIMENT_KIND) != TRAINING:  # created before the kind was set
            client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND, TRAINING)
        return exp.experiment_id
    location = None
    if uri.startswith("sqlite:///"):
        location = (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
    return client.create_experiment(name, artifact_location=location,
                                    tags={EXPERIMENT_KIND: TRAINING})


# A call to a server that stopped fails after these (MLflow's defaults: 7 retries, backoff
# factor 2, 120 s timeout, about 4 minutes) rather than holding a sweep for minutes
PATIENCE = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def limit_server_retries(uri: str) -> None:
    """For a tracking server: MLflow's calls to it give up within seconds (`PATIENCE`, unless
    the environment sets them), in this process and the ones it starts (a local Ray's), and
    without a warning per retry (the sweep says once that the server is gone)."""
    if uri.startswith(("http://", "https://")):
        for key, value in PATIENCE.items():
            os.environ.setdefault(key, value)
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def answering(uri: str) -> bool:
    """Whether the store at `uri` answers: a server's /health, within 5 s (other stores:
    True)."""
    if not uri.startswith(("http://", "https://")):
        return True
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=5) as reply:
            return reply.status == 200
    except OSError:
        return False


class TrackingLost(RuntimeError):
    """The tracking server stopped answering in the middle of a sweep."""


def lost(uri: str, err: Exception) -> TrackingLost | None:
    """`err`, an MLflow call's error, as TrackingLost where the server at `uri` no longer
    answers; None where it does (the error is something else)."""
    if isinstance(err, MlflowException) and not answering(uri):
        return TrackingLost(f"the MLflow server at {uri} does not answer")
    return None
