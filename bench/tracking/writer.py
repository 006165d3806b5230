"""Writing attnbench's runs to MLflow, the one door for every write: a sweep's parent run (its
start, the earlier runs it adopts, its end, its report), each trial's child run (config,
provenance, its corpus as a dataset input, metrics, artifacts), closing runs a worker or a
killed driver left open, and a measurement's run. The names are `names.py`'s and, for what a
run measures and the marks the findings read, `bench.metrics`'; a trial is `bench.trial.Trial`,
as the sweep built it and Ray handed it over."""

import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from mlflow import MlflowClient
from mlflow.data.code_dataset_source import CodeDatasetSource
from mlflow.data.dataset_source import DatasetSource
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import DatasetInput, InputTag, Metric, Param, Run, RunTag
from mlflow.exceptions import RestException
from mlflow.utils.mlflow_tags import (
    MLFLOW_DATASET_CONTEXT,
    MLFLOW_GIT_COMMIT,
    MLFLOW_RUN_NOTE,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
)

from bench import codehash, provenance
from bench.metrics import EVAL_METRICS, FAILURE, FINAL_RENAMED, FINAL_SAME, GRID_KEYS, PLAN
from bench.provenance import GridText
from bench.record import Evaluation, RunResult
from bench.trial import Trial

from . import page
from .names import (
    CODE,
    DATASET_KEYS,
    FLOPS_ERROR,
    GRID,
    HASH,
    IGNORED,
    LOST,
    PARENT,
    PLANS,
    ROLE,
    RUN_MACHINE,
    SETTING,
    SWEEP_PROCESS,
    SWEEPS,
    TRIALS,
)
from .store import experiment_id, open_store, store_lock


@dataclass(frozen=True)
class Where:
    """Where a sweep's trials are logged, handed to each Ray worker beside its trial: the
    store's URI, the grid's experiment id, the sweep's parent run and the source name the
    MLflow UI shows."""

    uri: str
    experiment: str
    parent: str
    source: str


def source_tags(command: str, commit: str) -> dict[str, str]:
    """MLflow's source tags (the UI's Source column): the command, and the git commit without
    the '-dirty.<diff>' mark (MLflow shows a commit; the git_commit param keeps the mark)."""
    tags = {MLFLOW_SOURCE_NAME: command, MLFLOW_SOURCE_TYPE: "LOCAL"}
    if commit != "unknown":
        tags[MLFLOW_GIT_COMMIT] = commit.split("-dirty")[0]
    return tags


def sweep_source(grid_file: Path) -> str:
    """The source name the MLflow UI shows for a sweep and its trials (a path's last part)."""
    return f"bench.run {grid_file.name}"


def start_sweep(client: MlflowClient, exp: str, source: GridText, command: str,
                look: page.Look, plan: str) -> str:
    """Create the sweep's parent run, described by its grid file and command line (the run's
    description, until its report replaces it, and the `command` param), in the runs table's
    group of sweeps (SETTING), with `sweep_source` as MLflow's source name, the plan that ran
    (`plan`, YAML: overrides and seeds applied) under the grid file's name and what it covers
    (`log_trials_covered`) as artifacts and tags; returns its id. The grid file is `source`,
    as the command read it: its path, and the sha256 of its text."""
    grid_file = source.path
    commit = provenance.git_commit()
    note = f"Sweep of `{grid_file.resolve()}`, commit `{commit}`.\n\n```\n{command}\n```"
    run = client.create_run(exp, run_name=f"sweep-{time.strftime('%Y%m%d-%H%M%S')}",
                            tags={ROLE: "sweep", GRID: look.grid, MLFLOW_RUN_NOTE: note,
                                  SETTING: SWEEPS, SWEEP_PROCESS: this_process(),
                                  **source_tags(sweep_source(grid_file), commit)})
    params = {"grid_file": str(grid_file.resolve()),
              "grid_sha256": hashlib.sha256(source.text.encode()).hexdigest(),
              "git_commit": commit, "command": command}
    client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
    client.log_text(run.info.run_id, plan, grid_file.name)
    log_trials_covered(client, run.info.run_id, look)
    return run.info.run_id


def log_trials_covered(client: MlflowClient, parent: str, look: page.Look) -> None:
    """The sweep's trial list (TRIALS, what its report selects) and what it has run so far
    (`page.progress`), grown by a later look."""
    client.log_dict(parent, {"trials": look.trials}, TRIALS)
    page.progress(client, parent, look)


def this_process() -> str:
    """'<host>:<pid>' of this process: where a sweep's driver runs (SWEEP_PROCESS)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _gone(process: str) -> bool:
    """Whether the process '<host>:<pid>' is known to have ended: it ran on this host and no
    process has its pid. Another host's, or a pid now taken: not known, so kept."""
    host, _, pid = process.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a process of another user has the pid now
        pass
    return False


def end_lost_sweeps(client: MlflowClient, exp: str) -> list[str]:
    """Mark KILLED, with the reason in LOST, the experiment's sweep runs still RUNNING whose
    driver is gone (a kill -9, a lost machine: nothing ended them); return their ids. Called as
    a sweep starts, so that the store never shows two sweeps of a grid running where one is."""
    lost = []
    for run in client.search_runs([exp], f"tags.`{ROLE}` = 'sweep' and "
                                  "attributes.status = 'RUNNING'", max_results=1000):
        process = run.data.tags.get(SWEEP_PROCESS, "")
        if _gone(process):
            client.set_tag(run.info.run_id, LOST, f"its driver {process} was gone when a later "
                           f"sweep started ({time.strftime('%Y-%m-%d %H:%M:%S')})")
            client.set_terminated(run.info.run_id, "KILLED")
            lost.append(run.info.run_id)
    return lost


def continue_under_sweep(client: MlflowClient, run_id: str, parent: str) -> None:
    """An unfinished trial run of an earlier sweep continues under sweep `parent`."""
    client.set_tag(run_id, PARENT, parent)


def end_sweep(client: MlflowClient, parent: str, status: str) -> None:
    """The sweep run's end: FINISHED, FAILED (a trial failed) or KILLED (interrupted)."""
    client.set_terminated(parent, status)


def log_report(client: MlflowClient, sweep: Run, paths: list[Path], shown: page.Page) -> None:
    """A sweep's report onto its run: the files as artifacts (report/), and its page
    (`page.publish`: description, verdicts, figures)."""
    for p in paths:
        client.log_artifact(sweep.info.run_id, str(p), page.REPORT)
    page.publish(client, sweep, shown)


def log_measurement(uri: str, experiment: str, params: dict[str, str],
                    metrics: dict[str, float], table: pd.DataFrame) -> str:
    """A measurement (e.g. bench.speed --mlflow) as one finished run of its own experiment,
    source `bench.<experiment>`: `params`, the git commit and package versions, `metrics`, and
    `table` as the JSON artifact `<experiment>.json` (artifacts beside an sqlite store, as the
    sweeps keep them); returns its id."""
    source, artifact = f"bench.{experiment}", f"{experiment}.json"
    client = open_store(uri)  # a new sqlite store is created and migrated under its lock
    exp = experiment_id(client, experiment, uri)
    commit = provenance.git_commit()
    run = client.create_run(exp, run_name=f"{experiment}-{time.strftime('%Y%m%d-%H%M%S')}",
                            tags=source_tags(source, commit))
    run_id, now = run.info.run_id, int(time.time() * 1000)
    params = {**params, **provenance.versions(), "git_commit": commit}
    client.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                     metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
    client.log_table(run_id, table, artifact)
    client.set_terminated(run_id, "FINISHED")
    return run_id


def sweep_run(client: MlflowClient, exp: str, parent: str, trial_hash: str) -> Run | None:
    """The trial's run in this sweep, if it has one."""
    found = client.search_runs([exp], f"tags.`{HASH}` = '{trial_hash}' and "
                               f"tags.`{PARENT}` = '{parent}'", max_results=1,
                               order_by=["attributes.start_time DESC"])
    return found[0] if found else None


def close(client: MlflowClient, where: Where, trial_hash: str, status: str, tag: str,
          reason: str) -> str:
    """End a trial's run that its worker left RUNNING (crashed, stopped, interrupted) with
    `status` and tag=reason; return how the run ended: its status and failure, if any."""
    run = sweep_run(client, where.experiment, where.parent, trial_hash)
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


def corpus_dataset(described: dict) -> CorpusDataset:
    """A corpus's own description (`Corpus.describe()`) -> its MLflow dataset: the file it was
    read from or, for a generated corpus, its builder and options; digest: the first 16 hex
    digits of the sha256 (MLflow keeps 36 characters), the whole one in the profile."""
    if described["source"] == "generated":
        source: DatasetSource = CodeDatasetSource({"generator": described["name"],
                                                   **described.get("options", {})})
    else:
        source = resolve_dataset_source(described["source"])
    profile = {k: described.get(k) for k in ("sha256", "n_bytes", "split_sizes", "fractions",
                                              "prefix", "entropy_rate", "probes",
                                              "no_recall")}
    return CorpusDataset(source, described["name"], described["sha256"][:16], profile)


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
    out.update({f"probe_floor.{p}": f for p, f in result.probe_floor.items() if f is not None
                and p in result.probe_bpc})
    for split, scores in (("", result.probe_bpc), ("test_", result.probe_bpc_test)):
        for probe, bpc in scores.items():  # on each probe's target symbols
            if (floor := result.probe_floor.get(probe)) is not None:
                out[f"{split}probe_gap.{probe}"] = bpc - floor
            out[f"{split}probe_bpc.{probe}"] = bpc
    return out


class TrialRun:
    """A trial's child run, written from inside the trial's worker."""

    def __init__(self, uri: str, run_id: str) -> None:
        self.uri, self.run_id, self.provenance_logged = uri, run_id, False
        self.client = MlflowClient(uri)

    @classmethod
    def open(cls, where: Where, trial: Trial, tags: dict[str, str]) -> "TrialRun":
        """This sweep's run of the trial (a Ray retry or a run adopted from an earlier sweep),
        else a new one; marked RUNNING with its tags, its setting (SETTING: its group in the
        runs table) and config params."""
        client = MlflowClient(where.uri)
        run = sweep_run(client, where.experiment, where.parent, trial.hash)
        config = flatten(trial.cfg.model_dump(mode="json"))
        if run is None:  # its page opens on the grid's values (params are listed by name)
            axes = "".join(f"`{k}` = {config.get(k)}, " for k in trial.grid_keys)
            run = client.create_run(where.experiment, run_name=trial.name, tags={
                MLFLOW_RUN_NOTE: f"Trial of `{trial.grid}`: {axes}seed {trial.seed}.",
                ROLE: "trial", GRID: trial.grid, HASH: trial.hash,
                GRID_KEYS: ",".join(trial.grid_keys), PARENT: where.parent,
                **{PLAN + k: v for k, v in trial.plan.tags.items()},
                **({IGNORED: ",".join(trial.ignored)} if trial.ignored else {})})
            if trial.plan.record:  # the plan itself, as registered: plan.json beside runs.csv
                client.log_text(run.info.run_id, trial.plan.record, PLANS)
        elif FAILURE in run.data.tags:
            client.delete_tag(run.info.run_id, FAILURE)
        logged = cls(where.uri, run.info.run_id)
        client.update_run(logged.run_id, status="RUNNING")
        client.log_batch(logged.run_id, tags=[RunTag(k, v) for k, v in
                                              {**tags, SETTING: trial.setting}.items()])
        logged.log_params({**config, "seed": str(trial.seed)})
        return logged

    def log_params(self, params: dict[str, str]) -> None:
        """Log the params this run lacks (a resumed run keeps the values it first logged)."""
        have = self.client.get_run(self.run_id).data.params
        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in have]
        if new:
            self.client.log_batch(self.run_id, params=new)

    def log_provenance(self, out_dir: Path) -> None:
        """git commit (param and MLflow's source tag), package versions, the machine and
        precision it ran on, and dataset identity (params and a dataset input, once) from the
        trial's config.json."""
        info = json.loads((out_dir / "config.json").read_text())
        ds = info["dataset"]
        self.log_params({"git_commit": info["git_commit"],
                         **{k: info[k] for k in ("code_version", *RUN_MACHINE) if k in info},
                         **{f"versions.{k}": v for k, v in info["versions"].items()},
                         **flatten({"dataset": {k: ds.get(k) for k in DATASET_KEYS}})})
        run = self.client.get_run(self.run_id)
        source = source_tags(run.data.tags.get(MLFLOW_SOURCE_NAME, "bench.train"),
                             info["git_commit"])
        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in source.items()])
        dataset = corpus_dataset(ds)._to_mlflow_entity()
        if not any(d.dataset.digest == dataset.digest for d in run.inputs.dataset_inputs):
            inputs = [DatasetInput(dataset, [InputTag(MLFLOW_DATASET_CONTEXT, "train")])]
            with store_lock(self.uri):  # the sweep's other trials log the same corpus
                try:
                    self.client.log_inputs(self.run_id, inputs)
                except RestException as err:  # a server's store: another trial's insert won
                    if "UNIQUE constraint failed: datasets" not in str(err):
                        raise
                    self.client.log_inputs(self.run_id, inputs)  # finds the dataset made
        self.provenance_logged = True

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step)
                                                    for k, v in metrics.items()])

    def log_eval(self, metrics: Evaluation, out_dir: Path) -> None:
        """One evaluation of train(): EVAL_METRICS at its step."""
        if not self.provenance_logged:
            self.log_provenance(out_dir)
        self.log_metrics({**{k: metrics[k] for k in EVAL_METRICS if k in metrics},
                          **{f"dev_bpc.{p}": v for p, v in metrics.get("probe_bpc", {}).items()}},
                         metrics["step"])

    def log_history(self, history: list[Evaluation], out_dir: Path) -> None:
        """The evaluations of `history` whose step the run lacks, each at its step: a trial
        resumed from its checkpoint reported only the later ones, and one that finished while
        the tracking server was down none."""
        have = {m.step for m in self.client.get_metric_history(self.run_id, "dev_bpc")}
        for metrics in history:
            if metrics["step"] not in have:
                self.log_eval(metrics, out_dir)

    def log_code(self, files: dict[str, str]) -> None:
        """The code this trial's process imported by the end of training (a code record,
        `bench.codehash.imported`): the files' digests as the artifact CODE, then its code_sha
        as the tag PLAN + code_sha, which the findings read as the runs.csv column (a tag
        found means its record was logged)."""
        self.client.log_dict(self.run_id, files, CODE)
        self.client.set_tag(self.run_id, PLAN + "code_sha", codehash.code_sha(files))

    def finish(self, result: RunResult, out_dir: Path) -> None:
        """Every evaluation (`log_history`), final metrics, config.json and result.json as
        artifacts, status FINISHED."""
        if not self.provenance_logged:
            self.log_provenance(out_dir)
        self.log_history(result.history, out_dir)
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

