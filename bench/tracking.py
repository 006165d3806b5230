"""MLflow tracking of sweeps: where runs are stored, what a trial logs, how runs are found again.

Schema (bench.report reads exactly these names): one experiment per grid; a parent run per sweep
(tags attnbench.role=sweep, attnbench.grid) and a child run per trial (attnbench.role=trial,
attnbench.grid, attnbench.trial_hash, attnbench.grid_keys, attnbench.failure when it failed).
Child params: the flattened resolved config (model.n_heads, ...), seed, git_commit,
versions.<pkg>, dataset.*; the corpus as an MLflow dataset input; metrics: EVAL_METRICS at each
evaluation's step, then the final ones under their own names (FINAL_RENAMED). Parent and child
runs carry MLflow's source tags (mlflow.source.name, mlflow.source.git.commit), and the
experiment's mlflow.experimentKind, so that MLflow's UI treats the runs as model training.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import fields
from pathlib import Path

from mlflow import MlflowClient
from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.dataset_source import DatasetSource
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import DatasetInput, InputTag, Metric, Param, Run, RunTag
from mlflow.utils.mlflow_tags import (
    MLFLOW_DATASET_CONTEXT,
    MLFLOW_GIT_COMMIT,
    MLFLOW_RUN_NOTE,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
)

from . import provenance
from .record import Evaluation, RunResult
from .synthetic import Synthetic

ROLE = "attnbench.role"  # "sweep" (parent run) or "trial" (child run)
GRID = "attnbench.grid"
HASH = "attnbench.trial_hash"
GRID_KEYS = "attnbench.grid_keys"
FAILURE = "attnbench.failure"  # why a trial failed or was interrupted
STOPPED = "attnbench.stopped"  # why the scheduler stopped a trial early
PARENT = "mlflow.parentRunId"
FLOPS_ERROR = "attnbench.flops_error"  # why counting FLOPs failed (the results are kept)
# MLflow's UI opens an experiment of this kind on its runs (unset, 3.x opens the GenAI overview)
EXPERIMENT_KIND, TRAINING = "mlflow.experimentKind", "custom_model_development"
# peak_cuda_mb: CUDA only, the peak allocated since the previous evaluation
EVAL_METRICS = ("train_bpc", "dev_bpc", "lr", "mean_span", "tokens_per_s", "tokens",
                "train_time_s", "peak_rss_mb", "peak_cuda_mb")
DATASET_KEYS = ("name", "n_bytes", "sha256", "prefix")
FINAL_SAME = ("params", "params_non_embedding", "flops_full", "flops_mean", "flops_max",
              "flops_position", "flops_counted", "flops_executed", "flops_cache_reprojection",
              "floor_bpc", "entropy_rate", "steps")
# train()'s summaries whose per-evaluation metric has the same name: logged as final_<name>
# (peaks over the whole run; mean span over the dev split; tokens/s over all steps)
FINAL_RENAMED = ("mean_span", "tokens_per_s", "tokens", "peak_rss_mb", "peak_cuda_mb")


def tracking_uri(explicit: str | None, results_dir: Path) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else an sqlite file in the results folder."""
    default = f"sqlite:///{(results_dir / 'mlflow.db').resolve()}"
    return explicit or os.environ.get("MLFLOW_TRACKING_URI") or default


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


def ui_command(uri: str) -> str:
    return f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1"


def ui_url(exp: str, base: str = "http://127.0.0.1:5000") -> str:
    """The experiment's runs in MLflow's UI. MLflow 3.17's UI takes the page it opens from its
    GenAI / Model training switch (kept in the browser, GenAI by default), not from the
    experiment's kind tag; `workflowType=machine_learning` sets the switch."""
    return f"{base}/#/experiments/{exp}/runs?workflowType=machine_learning"


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


def source_tags(command: str, commit: str) -> dict[str, str]:
    """MLflow's source tags (the UI's Source column): the command, and the git commit without
    the '-dirty.<diff>' mark (MLflow shows a commit; the git_commit param keeps the mark)."""
    tags = {MLFLOW_SOURCE_NAME: command, MLFLOW_SOURCE_TYPE: "LOCAL"}
    if commit != "unknown":
        tags[MLFLOW_GIT_COMMIT] = commit.split("-dirty")[0]
    return tags


def start_sweep(client: MlflowClient, exp: str, grid: str, grid_file: Path, n_trials: int,
                command: str, source: str) -> str:
    """Create the sweep's parent run, described by its grid file and command line (the run's
    description and the `command` param), with `source` as MLflow's source name; returns its
    id."""
    commit = provenance.git_commit()
    note = (f"Sweep of `{grid_file.resolve()}`, {n_trials} trials, commit `{commit}`.\n\n"
            f"```\n{command}\n```")
    run = client.create_run(exp, run_name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}",
                            tags={ROLE: "sweep", GRID: grid, MLFLOW_RUN_NOTE: note,
                                  **source_tags(source, commit)})
    params = {"grid_file": str(grid_file.resolve()), "n_trials": n_trials,
              "grid_sha256": hashlib.sha256(grid_file.read_bytes()).hexdigest(),
              "git_commit": commit, "command": command}
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


def done_run(runs: list[Run]) -> Run | None:
    """The newest run that finished, or that the scheduler stopped early (a result, not an
    interruption); None when the trial has no result yet."""
    return next((r for r in runs if r.info.status == "FINISHED" or STOPPED in r.data.tags), None)


def stale(params: Mapping[str, str], now: Mapping[str, str]) -> str | None:
    """What a finished run ran on, where that is other code than `now` (provenance.identity()):
    its code_version, or its git_commit for a run that predates them; None where it is current
    or its code was not recorded ('unknown': no checkout)."""
    key = "code_version" if isinstance(params.get("code_version"), str) else "git_commit"
    ran = params.get(key)
    judged = isinstance(ran, str) and "unknown" not in (ran, now[key])
    return ran if judged and ran != now[key] else None


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


class CorpusDataset(MetaDataset):
    """A corpus as MLflow sees a dataset: metadata only (the bytes stay where they are), with a
    profile of its sizes, prefix flag and bpc floor."""

    def __init__(self, source: DatasetSource, name: str, digest: str, profile: dict) -> None:
        self._profile = profile
        super().__init__(source, name=name, digest=digest)

    @property
    def profile(self) -> dict:
        return self._profile

    def to_dict(self) -> dict[str, str]:
        return {**super().to_dict(), "profile": json.dumps(self._profile)}


def corpus_dataset(meta: dict) -> CorpusDataset:
    """bench.data's corpus.meta -> its MLflow dataset: the file it was read from or, for the
    synthetic corpus, the generator and its options; digest: the first 16 hex digits of the
    sha256 (MLflow keeps 36 characters), the whole one in the profile."""
    if meta["source"] == "generated":
        options = {f.name: meta[f.name] for f in fields(Synthetic)}
        source: DatasetSource = CodeDatasetSource({"generator": "bench.synthetic.Synthetic",
                                                   **options})
    else:
        source = resolve_dataset_source(meta["source"])
    profile = {k: meta.get(k) for k in ("sha256", "n_bytes", "split_sizes", "fractions",
                                         "prefix", "floor_bpc")}
    return CorpusDataset(source, meta["name"], meta["sha256"][:16], profile)


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
    out.update({f"final_{k}": v for k in FINAL_RENAMED if (v := getattr(result, k)) is not None})
    out.update({f"layer_max_span.{i}": s for i, s in enumerate(result.layer_max_span)})
    return out


class TrialRun:
    """A trial's child run, written from inside the trial's worker."""

    def __init__(self, uri: str, run_id: str) -> None:
        self.uri, self.run_id, self.provenance_logged = uri, run_id, False
        self.client = MlflowClient(uri)

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
        """git commit (param and MLflow's source tag), package versions and dataset identity
        (params and a dataset input, once) from the trial's config.json."""
        info = json.loads((out_dir / "config.json").read_text())
        ds = info["dataset"]
        self.log_params({"git_commit": info["git_commit"],
                         **({"code_version": info["code_version"]} if "code_version" in info
                            else {}),
                         **{f"versions.{k}": v for k, v in info["versions"].items()},
                         **{f"dataset.{k}": ds[k] for k in DATASET_KEYS}})
        run = self.client.get_run(self.run_id)
        source = source_tags(run.data.tags.get(MLFLOW_SOURCE_NAME, "bench.train"),
                             info["git_commit"])
        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in source.items()])
        dataset = corpus_dataset(ds)._to_mlflow_entity()
        if not any(d.dataset.digest == dataset.digest for d in run.inputs.dataset_inputs):
            with store_lock(self.uri):  # the sweep's other trials log the same corpus
                self.client.log_inputs(self.run_id, [DatasetInput(dataset, [
                    InputTag(MLFLOW_DATASET_CONTEXT, "train")])])
        self.provenance_logged = True

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step)
                                                    for k, v in metrics.items()])

    def log_eval(self, metrics: Evaluation, out_dir: Path) -> None:
        """One evaluation of train(): EVAL_METRICS at its step."""
        if not self.provenance_logged:
            self.log_provenance(out_dir)
        self.log_metrics({k: metrics[k] for k in EVAL_METRICS if k in metrics}, metrics["step"])

    def finish(self, result: RunResult, out_dir: Path) -> None:
        """Final metrics, config.json and result.json as artifacts, status FINISHED."""
        if not self.provenance_logged:
            self.log_provenance(out_dir)
        self.log_metrics(final_metrics(result), result.steps)
        self.log_params(flatten({"layer": result.layer}))  # the layer's own description
        if result.flops_error:
            self.client.set_tag(self.run_id, FLOPS_ERROR, result.flops_error[-5000:])
        for name in ("config.json", "result.json"):
            self.client.log_artifact(self.run_id, str(out_dir / name))
        self.client.set_terminated(self.run_id, "FINISHED")

    def fail(self, reason: str, out_dir: Path) -> None:
        """Status FAILED with the reason in the attnbench.failure tag."""
        self.client.set_tag(self.run_id, FAILURE, reason[-5000:])
        if (out_dir / "config.json").exists():
            self.client.log_artifact(self.run_id, str(out_dir / "config.json"))
        self.client.set_terminated(self.run_id, "FAILED")

