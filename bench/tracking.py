"""MLflow tracking of sweeps: where runs are stored, what a trial logs, how runs are found again.

Schema (bench.report reads exactly these names): one experiment per grid; a parent run per sweep
(tags attnbench.role=sweep, attnbench.grid) and a child run per trial (attnbench.role=trial,
attnbench.grid, attnbench.trial_hash, attnbench.grid_keys, attnbench.failure when it failed).
Child params: the flattened resolved config (model.n_heads, ...), seed, git_commit,
versions.<pkg>, dataset.*; metrics: EVAL_METRICS at each evaluation's step, then the final ones.
"""

import hashlib
import json
import os
import time
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run, RunTag

from . import provenance
from .record import Evaluation, RunResult

ROLE = "attnbench.role"  # "sweep" (parent run) or "trial" (child run)
GRID = "attnbench.grid"
HASH = "attnbench.trial_hash"
GRID_KEYS = "attnbench.grid_keys"
FAILURE = "attnbench.failure"  # why a trial failed or was interrupted
STOPPED = "attnbench.stopped"  # why the scheduler stopped a trial early
PARENT = "mlflow.parentRunId"
EVAL_METRICS = ("train_bpc", "dev_bpc", "lr", "mean_span", "tokens_per_s", "tokens",
                "train_time_s", "peak_mem_mb")
DATASET_KEYS = ("name", "n_bytes", "sha256", "prefix")
FINAL_SAME = ("params", "params_non_embedding", "flops_full", "flops_mean", "flops_max",
              "flops_position", "flops_counted", "flops_executed", "flops_cache_reprojection",
              "mean_span", "tokens_per_s", "peak_mem_mb", "floor_bpc", "steps", "tokens")


def tracking_uri(explicit: str | None, results_dir: Path) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else an sqlite file in the results folder."""
    default = f"sqlite:///{(results_dir / 'mlflow.db').resolve()}"
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or default


def ui_command(uri: str) -> str:
    return f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1"


def experiment_id(client: MlflowClient, name: str, uri: str) -> str:
    """The grid's experiment, created on first use; sqlite stores keep artifacts beside the db."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None
    if uri.startswith("sqlite:///"):
        location = (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").as_uri()
    return client.create_experiment(name, artifact_location=location)


def start_sweep(client: MlflowClient, exp: str, grid: str, grid_file: Path, n_trials: int) -> str:
    """Create the sweep's parent run; returns its id."""
    run = client.create_run(exp, run_name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}",
                            tags={ROLE: "sweep", GRID: grid})
    params = {"grid_file": str(grid_file.resolve()), "n_trials": n_trials,
              "grid_sha256": hashlib.sha256(grid_file.read_bytes()).hexdigest(),
              "git_commit": provenance.git_commit()}
    client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
    client.log_artifact(run.info.run_id, str(grid_file))
    return run.info.run_id


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


def is_done(runs: list[Run]) -> bool:
    """Finished, or stopped early by the scheduler (a result, not an interruption)."""
    return any(r.info.status == "FINISHED" or STOPPED in r.data.tags for r in runs)


def sweep_run(client: MlflowClient, exp: str, parent: str, trial_hash: str) -> Run | None:
    """The trial's run in this sweep, if it has one."""
    found = client.search_runs([exp], f"tags.`{HASH}` = '{trial_hash}' and "
                               f"tags.`{PARENT}` = '{parent}'", max_results=1,
                               order_by=["attributes.start_time DESC"])
    return found[0] if found else None


def close(client: MlflowClient, exp: str, parent: str, trial_hash: str, status: str, tag: str,
          reason: str) -> str:
    """End a trial's run that its worker left RUNNING (crashed, stopped, interrupted) with
    `status` and tag=reason; return how the run ended: its status and failure, if any."""
    run = sweep_run(client, exp, parent, trial_hash)
    if run is None:
        return "no run"
    if run.info.status == "RUNNING":
        client.set_tag(run.info.run_id, tag, reason[-5000:])
        client.set_terminated(run.info.run_id, status)
        return f"{status}: {reason}"
    failure = run.data.tags.get(FAILURE)
    return run.info.status + (f": {failure}" if failure else "")


def flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    """{"model": {"n_heads": 4}} -> {"model.n_heads": "4"}; lists and None as JSON."""
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value if isinstance(value, str) else json.dumps(value)
    return out


def final_metrics(result: RunResult) -> dict[str, float]:
    """train()'s run record -> the final metrics of a trial run."""
    out = {"final_dev_bpc": result.dev_bpc, "final_test_bpc": result.test_bpc}
    out.update({k: v for k in FINAL_SAME if (v := getattr(result, k)) is not None})
    out.update({f"layer_max_span.{i}": s for i, s in enumerate(result.layer_max_span)})
    return out


class TrialRun:
    """A trial's child run, written from inside the trial's worker."""

    def __init__(self, uri: str, run_id: str) -> None:
        self.client, self.run_id, self.provenance_logged = MlflowClient(uri), run_id, False

    @classmethod
    def open(cls, uri: str, exp: str, parent: str, spec: dict, tags: dict[str, str]
             ) -> "TrialRun":
        """This sweep's run of the trial (a Ray retry or a run adopted from an earlier sweep),
        else a new one; marked RUNNING with its tags and config params."""
        client = MlflowClient(uri)
        run = sweep_run(client, exp, parent, spec["hash"])
        if run is None:
            run = client.create_run(exp, run_name=spec["name"], tags={
                ROLE: "trial", GRID: spec["grid"], HASH: spec["hash"],
                GRID_KEYS: ",".join(spec["grid_keys"]), PARENT: parent})
        elif FAILURE in run.data.tags:
            client.delete_tag(run.info.run_id, FAILURE)
        trial = cls(uri, run.info.run_id)
        client.update_run(trial.run_id, status="RUNNING")
        client.log_batch(trial.run_id, tags=[RunTag(k, v) for k, v in tags.items()])
        trial.log_params({**flatten(spec["cfg"]), "seed": str(spec["cfg"]["train"]["seed"])})
        return trial

    def log_params(self, params: dict[str, str]) -> None:
        """Log the params this run lacks (a resumed run keeps the values it first logged)."""
        have = self.client.get_run(self.run_id).data.params
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in have]
        if new:
            self.client.log_batch(self.run_id, params=new)

    def log_provenance(self, out_dir: Path) -> None:
        """git commit, package versions and dataset identity from the trial's config.json."""
        info = json.loads((out_dir / "config.json").read_text())
        ds = info["dataset"]
        self.log_params({"git_commit": info["git_commit"],
                         **{f"versions.{k}": v for k, v in info["versions"].items()},
                         **{f"dataset.{k}": ds[k] for k in DATASET_KEYS}})
        self.provenance_logged = True

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step)
                                                    for k, v in metrics.items()])

    def log_eval(self, metrics: Evaluation, out_dir: Path) -> None:
        """One evaluation of train(): EVAL_METRICS at its step."""
        if not self.provenance_logged:
            self.log_provenance(out_dir)
        self.log_metrics({k: metrics[k] for k in EVAL_METRICS}, metrics["step"])

    def finish(self, result: RunResult, out_dir: Path) -> None:
        """Final metrics, config.json and result.json as artifacts, status FINISHED."""
        if not self.provenance_logged:
            self.log_provenance(out_dir)
        self.log_metrics(final_metrics(result), result.steps)
        self.log_params(flatten({"layer": result.layer}))  # the layer's own description
        for name in ("config.json", "result.json"):
            self.client.log_artifact(self.run_id, str(out_dir / name))
        self.client.set_terminated(self.run_id, "FINISHED")

    def fail(self, reason: str, out_dir: Path) -> None:
        """Status FAILED with the reason in the attnbench.failure tag."""
        self.client.set_tag(self.run_id, FAILURE, reason[-5000:])
        if (out_dir / "config.json").exists():
            self.client.log_artifact(self.run_id, str(out_dir / "config.json"))
        self.client.set_terminated(self.run_id, "FAILED")

