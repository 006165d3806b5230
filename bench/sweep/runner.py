"""Running a sweep: the trials that are not finished yet, trained in parallel by Ray Tune (one
machine or a cluster), each logged to MLflow as a child of the sweep's run; then the summary
and the report.

A trial lives in <results-dir>/<grid>/trials/<hash>/ (the hash of its resolved config, seed
included, with the corpus's identity for its location), the only checkpoint store, so a rerun
skips finished trials and resumes unfinished ones from their checkpoints; finished trials from
other code are reported, marked stale, and rerun with --rerun-stale.
"""

import argparse
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from bench import data, plugins, provenance
from bench.config import Config, ConfigError
from bench.findings.claims import Claim, cells
from bench.findings.prereg import claims_sha
from bench.findings.spec import GridSpec, Looks, seed_list
from bench.record import Evaluation, RunResult
from bench.tracking import names, reader, store, writer
from bench.training.loop import Diverged, train

from .grid import Grid
from .plan import costliest_first
from .trials import Trial


def trainable(config: dict) -> None:
    """One trial in a Ray worker: train, log to MLflow. The trial folder is the only checkpoint
    store: train() resumes from its checkpoint.pt after a crash, so nothing is handed to Ray's
    checkpointing (which would copy the weights into <results-dir>/<grid>/ray/ at every
    evaluation)."""
    import ray
    from ray import tune

    spec, where = config["trial"], config["tracking"]
    plugins.load(spec["plugins"], env=False)  # before anything names a variant
    torch.set_num_threads(spec["threads"])
    out = Path(spec["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    ctx = ray.get_runtime_context()
    run = writer.TrialRun.open(where["uri"], where["experiment"], where["parent"], spec, {
        names.RAY_NODE: ctx.get_node_id(), names.RAY_GCS: ctx.gcs_address,
        names.RAY_GPUS: ",".join(map(str, ray.get_gpu_ids())),
        names.VISIBLE: os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        names.TRIAL_DIR: str(out), names.PLUGINS: ",".join(spec["plugins"]),
        names.CLAIMS: spec["claims_sha"],
        **writer.source_tags(where["source"], "unknown")})

    def report(metrics: Evaluation, _: Path | None) -> None:
        run.log_eval(metrics, out)
        print(f"{spec['name']} step {metrics['step']}: dev bpc {metrics['dev_bpc']:.4f}, "
              f"{metrics['tokens_per_s']:,.0f} tokens/s")
        tune.report(metrics)

    done = out / "result.json"
    try:  # a result.json means train() finished and only the logging was cut off
        result = RunResult.load(done) if done.exists() else train(
            Config.model_validate(spec["cfg"]), out, report=report, progress=False,
            planned=spec["precision"])
    except (Diverged, data.DataError, ConfigError) as err:  # retrying cannot help
        run.fail(f"{type(err).__name__}: {err}", out)
        return
    run.finish(result, out)


def trial_spec(t: Trial, grid: Grid, root: Path) -> dict:
    return {"hash": t.hash, "name": t.name, "grid": grid.name, "grid_keys": list(grid.grid),
            "cfg": t.cfg.model_dump(mode="json"), "precision": t.precision,
            "out_dir": str(root / "trials" / t.hash),
            "threads": max(1, int(grid.resources.cpu)), "plugins": grid.plugins,
            "ignored": t.ignored, "claims_sha": claims_sha(grid.claims)}


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
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, _temp_dir=str(temp),
             logging_config=quiet)
    return f"local Ray, {os.cpu_count()} CPUs, temp dir {temp}"


def stop_ray() -> None:
    import ray

    ray.shutdown()


def make_callback(client: Any, where: dict, total: int, ended: set[str]) -> Any:
    """A Tune callback that prints each trial's end and closes the MLflow run of a trial whose
    worker could not (stopped by the scheduler, crashed past its retries)."""
    from ray import tune

    def close(trial: Any, status: str, tag: str, reason: str) -> str:
        return writer.close(client, where["experiment"], where["parent"],
                            trial.config["trial"]["hash"], status, tag, reason)

    class CloseRuns(tune.Callback):
        def _end(self, trial: Any, how: str) -> None:
            ended.add(trial.config["trial"]["hash"])
            last = trial.last_result or {}
            where = f" (step {last['step']}, dev bpc {last['dev_bpc']:.4f})" if "dev_bpc" in last \
                else ""
            print(f"[{len(ended)}/{total}] {trial.config['trial']['name']}: {how}{where}",
                  flush=True)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info) -> None:
            self._end(trial, close(trial, "KILLED", names.STOPPED, "stopped by the scheduler"))

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info) -> None:
            error = str(trial.get_error() or "error").strip().splitlines()[-1]
            self._end(trial, close(trial, "FAILED", names.FAILURE,
                                   f"crashed {trial.num_failures} times; last error: {error}"))

    return CloseRuns()


def run_tune(grid: Grid, todo: list[Trial], root: Path, where: dict, callback: Any,
             sweep_name: str) -> None:
    """Run the pending trials as one Tune experiment under <results-dir>/<grid>/ray/."""
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    gpu = grid.resources.gpu
    if gpu is None:
        gpu = 1 if ray.cluster_resources().get("GPU", 0) > 0 else 0
    scheduler = None
    if grid.scheduler.type == "asha":
        s = grid.scheduler
        scheduler = ASHAScheduler(
            time_attr="step", reduction_factor=s.reduction_factor, stop_last_trials=False,
            grace_period=s.grace_period or min(t.cfg.train.eval_every for t in todo),
            max_t=s.max_t or max(t.cfg.train.steps for t in todo))
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # `metric` is checked by the schema; a trial that diverges before its first evaluation
    # ends with a result that has no metric, which must not stop the sweep.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": grid.resources.cpu, "gpu": gpu}),
        param_space={"tracking": where, "trial": tune.grid_search(
            [trial_spec(t, grid, root) for t in todo])},
        # reuse_actors: a worker runs its next trial without a new process and imports (about
        # 5 s a trial on this CPU); train() seeds everything and resets the peak-memory mark
        tune_config=tune.TuneConfig(
            metric=grid.metric, mode=grid.mode, scheduler=scheduler, reuse_actors=True,
            trial_name_creator=lambda trial: trial.config["trial"]["name"],
            trial_dirname_creator=lambda trial: trial.config["trial"]["hash"][:16]),
        run_config=tune.RunConfig(
            storage_path=str((root / "ray").resolve()), name=sweep_name, verbose=0,
            failure_config=tune.FailureConfig(max_failures=grid.max_failures),
            callbacks=[callback]))
    tuner.fit()


def summary(client: Any, exp: str, trials: list[Trial], now: dict[str, str]) -> pd.DataFrame:
    """Latest run of each trial: status, final bpc, params, FLOPs, speed, failure reason, and
    the code of a result from other code than `now` (provenance.identity())."""
    runs = reader.trial_runs(client, exp, renamed(trials))
    rows = []
    for t in trials:
        run = runs.get(t.hash, [None])[0]
        m, tags = (run.data.metrics, run.data.tags) if run else ({}, {})
        ran = reader.stale(run.data.params, now) if run else None
        stale = f"stale: {ran}" if ran else ""
        note = tags.get(names.FAILURE) or tags.get(names.STOPPED) or ""
        rows.append({"run": t.name, "status": run.info.status if run else "NOT RUN",
                     "dev_bpc": m.get("final_dev_bpc"), "test_bpc": m.get("final_test_bpc"),
                     "params": m.get("params"), "flops/token": m.get("flops_full"),
                     "tokens/s": m.get("final_tokens_per_s"),
                     "note": "; ".join(n for n in (stale, note) if n)})
    df = pd.DataFrame(rows)
    for col in ("params", "flops/token", "tokens/s"):
        df[col] = pd.to_numeric(df[col]).round().astype("Int64")
    return df


def render_report(uri: str, grid: str, out_dir: Path, parent: str) -> None:
    """The sweep's report (bench.findings); its failure never fails a sweep."""
    from bench.findings.report import render_sweep

    try:
        render_sweep(uri, grid, out_dir, parent)
    except Exception as err:  # noqa: BLE001  (a report bug must not lose a finished sweep)
        print(f"warning: the report failed ({type(err).__name__}: {err}); the runs are intact",
              file=sys.stderr)


def renamed(trials: list[Trial]) -> dict[str, str]:
    """Each trial's earlier hashes (`Trial.earlier`) -> its hash now."""
    return {old: t.hash for t in trials for old in t.earlier}


def stale_results(trials: list[Trial], runs: dict[str, list], now: dict[str, str]
                  ) -> dict[str, str]:
    """Finished trials whose result comes from other code than `now`: hash -> what it ran on
    (its code_version, or its commit for a run that predates them)."""
    out = {}
    for t in trials:
        done = reader.done_run(runs.get(t.hash, []))
        ran = reader.stale(done.data.params, now) if done else None
        if ran:
            out[t.hash] = ran
    return out


def restarted(trials: list[Trial], runs: dict[str, list], now: dict[str, str]) -> set[str]:
    """Unfinished trials whose last run started on other code than `now`: resuming its
    checkpoint would train one run on two codes, so they start afresh, in a new run."""
    return {t.hash for t in trials if (got := runs.get(t.hash)) and not reader.done_run(got)
            and reader.stale(got[0].data.params, now)}


def say_stale(stale: dict[str, str], now: dict[str, str], rerun: bool) -> None:
    """How many finished trials come from other code, from which commits, what happens."""
    if not stale:
        return
    by = ", ".join(f"{c} ({n})" for c, n in Counter(stale.values()).most_common())
    what = "rerunning them (--rerun-stale)" if rerun else \
        "reusing them, marked stale in the tables; --rerun-stale reruns them"
    print(f"warning: {len(stale)} finished trials ran on other code than this checkout "
          f"({now['code_version']}, commit {now['git_commit']}): {by}; {what}",
          file=sys.stderr, flush=True)


def reads(claims: list[Claim], axes: dict[str, list[Any]], values: dict[str, Any]) -> bool:
    """Whether a trial with these grid values is a row or a baseline row of one of the claims."""
    return any(all(values.get(k) == v for k, v in cell.items())
               for c in claims for _, *pair in cells(c, axes) for cell in pair if cell)


def looks_of(grid: Grid) -> list[list[Any]]:
    """The seeds each look runs: the first looks[k] of the grid's seeds (a list: one look)."""
    seeds = seed_list(grid.seeds)
    return [seeds[:n] for n in grid.seeds.looks] if isinstance(grid.seeds, Looks) else [seeds]


def sweep(grid: Grid, trials: list[Trial], args: argparse.Namespace, command: str) -> int:
    """Run what is not finished yet, look by look: the first look's seeds of every setting,
    then more seeds only for the settings that a claim still undecided (`verdicts.undecided`)
    reads; returns 0, 1 (a trial failed) or 130 (interrupted). A rerun recomputes every look's
    decision from the finished runs, so it retrains nothing and adds no duplicate run."""
    root = args.results_dir.resolve() / grid.name
    uri = store.tracking_uri(args.tracking_uri, args.results_dir)
    client = store.open_store(uri)
    exp = store.experiment_id(client, grid.name, uri)
    writer.end_lost_sweeps(client, exp)
    now = provenance.identity()
    spec = GridSpec.model_validate(grid.model_dump(include={"name", "grid", "claims", "seeds",
                                                            "design_seeds"}))
    looks = looks_of(grid)
    covered: list[Trial] = []
    parent: str | None = None
    interrupted = False
    for k, seeds in enumerate(looks):
        waiting = grid.claims if k == 0 else undecided(uri, grid.name, spec, covered)
        if k and not waiting:
            print(f"{grid.name}: every claim decided after look {k} of {len(looks)}")
            break
        known = {t.hash for t in covered}
        new = [t for t in trials if t.seed in seeds and t.hash not in known
               and (k == 0 or reads(waiting, grid.grid, t.values))]
        covered += new
        if len(looks) > 1:
            print(f"{grid.name}: look {k + 1} of {len(looks)}, seeds {seeds[0]}-{seeds[-1]}: "
                  f"{len(new)} trials" + ("" if k == 0 else " for the undecided claims "
                                          + ", ".join(c.id for c in waiting)))
        parent, interrupted = run_look(grid, new, covered, args, command, parent,
                                       (uri, client, exp, now, root))
        if interrupted:
            break
    table = summary(client, exp, covered, now)
    failed = bool(table.status.isin(["FAILED", "NOT RUN"]).any())
    if parent:
        writer.end_sweep(client, parent, "KILLED" if interrupted else
                         "FAILED" if failed else "FINISHED")
    print("\n" + table.astype(object).where(table.notna(), None).to_markdown(
        index=False, floatfmt=".4f", intfmt=",", missingval="-"))
    if parent and not interrupted and not args.no_report:
        render_report(uri, grid.name, root, parent)
    print(f"\nresults: {root.resolve()}\nMLflow:  {store.ui_command(uri)}\n"
          f"         then {store.ui_url(exp)}")
    if interrupted:
        print("interrupted: finished trials are kept; rerun the same command to continue")
    return 130 if interrupted else 1 if failed else 0


def undecided(uri: str, experiment: str, spec: GridSpec, covered: list[Trial]) -> list[Claim]:
    """The claims that still wait for seeds, from the finished runs of the trials so far."""
    from bench.findings.report import waiting

    return waiting(uri, experiment, spec, [t.hash for t in covered])


def run_look(grid: Grid, trials: list[Trial], covered: list[Trial], args: argparse.Namespace,
             command: str, parent: str | None, where_: tuple) -> tuple[str | None, bool]:
    """Train the look's unfinished trials under the sweep's parent run (created at the first
    look with work; its trial list then covers every look so far); returns (parent,
    interrupted)."""
    uri, client, exp, now, root = where_
    runs = reader.trial_runs(client, exp, renamed(trials))
    stale = stale_results(trials, runs, now)
    say_stale(stale, now, args.rerun_stale)
    fresh = {t.hash for t in trials if args.force or (args.rerun_stale and t.hash in stale)}
    if again := restarted(trials, runs, now):
        print(f"warning: {len(again)} unfinished trials started on other code than this "
              "checkout; restarting them afresh, in new runs", file=sys.stderr, flush=True)
    fresh |= again
    for h in fresh:
        shutil.rmtree(root / "trials" / h, ignore_errors=True)
    todo = costliest_first([t for t in trials
                            if t.hash in fresh or not reader.done_run(runs.get(t.hash, []))])
    print(f"{grid.name}: {len(trials)} trials, {len(trials) - len(todo)} already finished, "
          f"{len(todo)} to run")
    if not todo:
        if parent:
            writer.cover(client, parent, [t.hash for t in covered])
        return parent, False
    source = f"bench.run {args.grid.name}"  # the UI shows a source's last path part
    if parent is None:
        parent = writer.start_sweep(client, exp, grid.name, args.grid,
                                    [t.hash for t in covered], command, source)
    else:
        writer.cover(client, parent, [t.hash for t in covered])
    where = {"uri": uri, "experiment": exp, "parent": parent, "source": source}
    for t in todo:  # unfinished runs of earlier sweeps continue under this one
        if t.hash not in fresh and runs.get(t.hash):
            writer.adopt(client, runs[t.hash][0].info.run_id, parent)
    ended: set[str] = set()  # trials whose run the worker or the callback closed
    try:
        print(start_ray(args.address))
        run_tune(grid, todo, root, where, make_callback(client, where, len(todo), ended),
                 client.get_run(parent).info.run_name)
    except KeyboardInterrupt:
        pass
    finally:
        stop_ray()
    interrupted = False
    for t in todo:
        if t.hash not in ended:
            writer.close(client, exp, parent, t.hash, "KILLED", names.FAILURE, "interrupted")
            interrupted = True
    return parent, interrupted
