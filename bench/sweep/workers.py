"""What runs inside Ray, apart from the sweep's plan: one trial in its worker (`trainable`:
train, log to MLflow), the local Ray started or a cluster joined (`start_ray`), and the driver's
Tune callback that closes the MLflow run of a trial whose worker could not (`make_callback`)."""

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from mlflow.exceptions import MlflowException

from bench import codehash, data, plugins
from bench.config import ConfigError
from bench.metrics import FAILURE, STOPPED
from bench.record import Evaluation, RunResult
from bench.tracking import names, store, writer
from bench.tracking.writer import Where
from bench.training.loop import reading, train
from bench.training.state import Diverged
from bench.trial import Trial


def trainable(config: dict, by_hash: dict[str, Trial], where: Where) -> None:
    """One trial in a Ray worker (`config["trial"]`, its hash, names it in `by_hash`, the
    trials as the driver built them, which Ray hands over as they are: its config would flatten
    a dataclass): train, log to MLflow (`train_logged`). Where the tracking server stops
    answering, the trial ends quietly (its folder keeps its checkpoint, or its result for a
    rerun to log) and the driver, which watches the server, stops the sweep and says so."""
    trial = by_hash[config["trial"]]
    plugins.load(list(trial.plugins), env=False)  # before anything names a variant
    torch.set_num_threads(trial.threads)
    trial.out_dir.mkdir(parents=True, exist_ok=True)
    store.limit_server_retries(where.uri)  # a cluster's worker: not the driver's environment
    try:
        train_logged(trial, where)
    except MlflowException as err:
        if store.lost(where.uri, err) is None:
            raise


def train_logged(trial: Trial, where: Where) -> None:
    """Train one trial, logging to MLflow, and the code its process imported by the end of
    training (`bench.codehash.imported`: the project and plugin files, each as code). The
    trial folder is the only checkpoint store: train() resumes from its checkpoint.pt after a
    crash, so nothing is handed to Ray's checkpointing (which would copy the weights into
    <results-dir>/<grid>/ray/ at every evaluation)."""
    import ray
    from ray import tune

    ctx = ray.get_runtime_context()
    run = writer.TrialRun.open(where, trial, {
        names.RAY_NODE: ctx.get_node_id(), names.RAY_GCS: ctx.gcs_address,
        names.RAY_GPUS: ",".join(map(str, ray.get_gpu_ids())),
        names.VISIBLE: os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        names.TRIAL_DIR: str(trial.out_dir), names.PLUGINS: ",".join(trial.plugins),
        **writer.source_tags(where.source, "unknown")})

    def report(metrics: Evaluation, _: Path | None) -> None:
        run.log_eval(metrics, trial.out_dir)
        print(f"{trial.name} step {metrics['step']}: dev bpc {metrics['dev_bpc']:.4f} "
              f"({reading(trial.cfg.train)}), "
              f"{metrics['tokens_per_s']:,.0f} tokens/s")
        tune.report(metrics)

    done = trial.out_dir / "result.json"
    try:  # a result.json means train() finished and only the logging was cut off
        result = RunResult.load(done) if done.exists() else train(
            trial.cfg, trial.out_dir, report=report, progress=False, planned=trial.precision)
    except (Diverged, data.DataError, ConfigError) as err:  # retrying cannot help
        run.fail(f"{type(err).__name__}: {err}", trial.out_dir)
        return
    run.log_code(codehash.imported(trial.plugins))  # what this process trained with
    run.finish(result, trial.out_dir)


def start_ray(address: str | None) -> str:
    """Connect to a cluster (--address or $RAY_ADDRESS), else start a private local one."""
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")  # trials' progress lines look alike: keep all
    import ray

    address = address or os.environ.get("RAY_ADDRESS")
    quiet = ray.LoggingConfig(log_level="WARNING")  # drivers and workers: no per-checkpoint INFO
    if address:
        ray.init(address=address, logging_config=quiet)
        return f"Ray cluster at {address}"
    os.environ["RAY_AUTH_MODE"] = "disabled"  # local only: no token written to ~/.ray
    temp = Path(tempfile.gettempdir()) / "attnbench-ray"  # short: Ray's socket paths are limited
    gpus = torch.cuda.device_count()  # what the packing counted (`gpus.packing`), told to Ray
    ray.init(num_cpus=os.cpu_count(), num_gpus=gpus, include_dashboard=False,
             _temp_dir=str(temp), logging_config=quiet)
    return f"local Ray, {os.cpu_count()} CPUs, {gpus} GPUs, temp dir {temp}"


def stop_ray() -> None:
    import ray

    ray.shutdown()


def make_callback(client: Any, where: Where, by_hash: dict[str, Trial], ended: set[str],
                  gone: list[str]) -> Any:
    """A Tune callback that prints each trial's end and closes the MLflow run of a trial whose
    worker could not (stopped by the scheduler, crashed past its retries); where the tracking
    server no longer answers, it notes why in `gone` (which stops the sweep: `make_watch`)."""
    from ray import tune

    def close(trial: Any, status: str, tag: str, reason: str) -> str:
        try:
            return writer.close(client, where, trial.config["trial"], status, tag, reason)
        except MlflowException as err:
            if (why := store.lost(where.uri, err)) is None:
                raise
            gone.append(str(why))
            return "not logged (the MLflow server stopped answering)"

    class CloseRuns(tune.Callback):
        def _end(self, trial: Any, how: str) -> None:
            ended.add(trial.config["trial"])
            last = trial.last_result or {}
            mine = by_hash[trial.config["trial"]]
            where = (f" (step {last['step']}, dev bpc {last['dev_bpc']:.4f}, "
                     f"{reading(mine.cfg.train)})" if "dev_bpc" in last else "")
            name = mine.name
            print(f"[{len(ended)}/{len(by_hash)}] {name}: {how}{where}", flush=True)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info) -> None:
            self._end(trial, close(trial, "KILLED", STOPPED, "stopped by the scheduler"))

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info) -> None:
            error = str(trial.get_error() or "error").strip().splitlines()[-1]
            self._end(trial, close(trial, "FAILED", FAILURE,
                                   f"crashed {trial.num_failures} times; last error: {error}"))

    return CloseRuns()

