"""Reading attnbench's runs back from MLflow (the report's only door to the store): a grid's
trial runs by hash, which of them finished, whether they ran on current code, and a sweep's runs
as one table."""

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow import MlflowClient
from mlflow.entities import Run

from bench.metrics import FINAL_RENAMED, STOPPED

from .names import HASH, ROLE, TRIALS


def trial_runs(client: MlflowClient, exp: str) -> dict[str, list[Run]]:
    """Every trial run of the experiment by trial hash, newest first."""
    out: dict[str, list[Run]] = {}
    token = None
    while True:
        page = client.search_runs([exp], f"tags.`{ROLE}` = 'trial'", max_results=1000,
                                  order_by=["attributes.start_time DESC"], page_token=token)
        for run in page:
            out.setdefault(run.data.tags[HASH], []).append(run)
        token = page.token
        if not token:
            return out


def done_run(runs: list[Run]) -> Run | None:
    """The newest run that finished, or that the scheduler stopped early (a result, not an
    interruption); None when the trial has no result yet."""
    return next((r for r in runs if r.info.status == "FINISHED" or STOPPED in r.data.tags), None)


def stale(params: Mapping[str, str], now: Mapping[str, str]) -> str | None:
    """What a run ran on, where that is other code than `now` (provenance.identity()):
    its code_version, or its git_commit for a run that predates them; None where it is current
    or its code was not recorded ('unknown': no checkout)."""
    key = "code_version" if isinstance(params.get("code_version"), str) else "git_commit"
    ran = params.get(key)
    judged = isinstance(ran, str) and "unknown" not in (ran, now[key])
    return ran if judged and ran != now[key] else None


class StoreError(LookupError):
    """What a reader asked for is not in the store: `code` is a CLI exit status (1 nothing
    finished yet, 2 bad input: no store, no such experiment or sweep)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class SweepRuns:
    """The trial runs of one sweep, as a table, and what the sweep logged about itself."""

    experiment: str  # the grid's name
    runs: pd.DataFrame  # one row per trial run of the sweep's trials (every status): `frame`
    sweep: Run | None  # the sweep's parent run (None: an experiment without sweeps)
    grid_text: str | None  # the grid file logged with the sweep
    client: MlflowClient


def frame(found: pd.DataFrame, now: Mapping[str, str]) -> pd.DataFrame:
    """mlflow.search_runs' frame -> one row per run: params and metrics under their own names
    (params numeric where they parse), tags as tags.<name>, the final summaries under the names
    the tables use, and `stale`, what a run from other code than `now` ran on (`stale`)."""
    df = found.rename(columns=lambda c: c.split(".", 1)[1] if c.startswith(
        ("params.", "metrics.")) else c).replace({"None": np.nan, "null": np.nan})
    for col in (c[len("params."):] for c in found if c.startswith("params.")):
        try:
            df[col] = pd.to_numeric(df[col])
        except (ValueError, TypeError):
            pass
    for key in FINAL_RENAMED:  # runs from before the final_ names logged them under the key
        if f"final_{key}" in df:
            df[key] = df[f"final_{key}"].fillna(df[key]) if key in df else df[f"final_{key}"]
    recorded = df.reindex(columns=["code_version", "git_commit"]).astype(object)
    df["stale"] = [stale(r.dropna().to_dict(), now) for _, r in recorded.iterrows()]
    return df


def sweep_runs(uri: str, experiment: str, now: Mapping[str, str],
               sweep: str | None = None, trials: set[str] | None = None) -> SweepRuns:
    """The runs of the trials that sweep `sweep` (a parent run id; default: the experiment's
    newest sweep) covers, by the trial hashes it recorded (or `trials`, the hashes a running
    sweep has covered so far): the experiment also keeps runs of the grid's other
    configurations. An experiment without sweeps: every trial run.
    StoreError when there is no store, experiment or sweep, or no trial run (code 1)."""
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        raise StoreError(f"no MLflow store at {uri.removeprefix('sqlite:///')} (run a sweep "
                         "first, or pass --tracking-uri)", 2)
    mlflow.set_tracking_uri(uri)  # for search_runs and load_dict
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        known = ", ".join(e.name for e in client.search_experiments()) or "none"
        raise StoreError(f"no experiment {experiment!r} in {uri} (known: {known})", 2)
    parent = None if trials is not None else _sweep(client, exp.experiment_id, sweep)
    grid_text = None
    if parent is not None:
        files = [a.path for a in client.list_artifacts(parent.info.run_id)]
        if TRIALS in files:
            trials = set(mlflow.artifacts.load_dict(f"runs:/{parent.info.run_id}/{TRIALS}")[
                "trials"])
        if grids := [f for f in files if f.endswith((".yaml", ".yml"))]:
            grid_text = mlflow.artifacts.load_text(f"runs:/{parent.info.run_id}/{grids[0]}")
    df = frame(mlflow.search_runs([exp.experiment_id], f"tags.`{ROLE}` = 'trial'",
                                  max_results=50_000, output_format="pandas"), now)
    if df.empty:
        raise StoreError(f"{experiment}: no trial runs yet in {uri}", 1)
    df["trial"] = df.get(f"tags.{HASH}", df["run_id"]).fillna(df["run_id"])
    if trials is not None:
        df = df[df["trial"].isin(trials)]
        if df.empty:
            raise StoreError(f"{experiment}: none of the {len(trials)} trials of sweep "
                             f"{parent.info.run_name if parent else '(running)'} has a run in "
                             f"{uri}", 1)
    return SweepRuns(experiment, df.reset_index(drop=True), parent, grid_text, client)


def _sweep(client: MlflowClient, exp: str, run_id: str | None) -> Run | None:
    """The sweep run `run_id` of the experiment, else its newest; None when it has none."""
    if run_id is not None:
        found = client.search_runs([exp], f"attributes.run_id = '{run_id}' and "
                                   f"tags.`{ROLE}` = 'sweep'", max_results=1)
        if not found:
            raise StoreError(f"no sweep run {run_id!r} in the experiment", 2)
        return found[0]
    newest = client.search_runs([exp], f"tags.`{ROLE}` = 'sweep'", max_results=1,
                                order_by=["attributes.start_time DESC"])
    return newest[0] if newest else None


def artifact_dict(run_id: str, name: str) -> dict | None:
    """A run's JSON artifact (result.json, config.json), or None where it has none."""
    try:
        return mlflow.artifacts.load_dict(f"runs:/{run_id}/{name}")
    except Exception:  # noqa: BLE001  (no such artifact, or not JSON: the caller goes without)
        return None


def history(client: MlflowClient, run_id: str, keys: tuple[str, ...]) -> pd.DataFrame:
    """A run's per-evaluation metrics `keys`, one row per logged step (NaN where missing)."""
    cols = {k: {m.step: m.value for m in client.get_metric_history(run_id, k)} for k in keys}
    return pd.DataFrame(cols, columns=list(keys)).rename_axis("step").reset_index()
