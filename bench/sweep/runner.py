"""Running a sweep: the trials that are not finished yet, trained in parallel by Ray Tune (one
machine or a cluster), each logged to MLflow as a child of the sweep's run; then the summary
and the report.

A trial lives in <results-dir>/<grid>/trials/<hash>/ (the hash of its resolved config, seed
included, with the corpus's identity for its location), the only checkpoint store, so a rerun
skips finished trials and resumes unfinished ones from their checkpoints; finished trials from
other code are reported, marked stale, and rerun with --rerun-stale.
"""

import contextlib
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from bench import provenance
from bench.experiment import floors
from bench.experiment.claims import Claim, cells
from bench.experiment.grid import Grid
from bench.experiment.open import to_text
from bench.findings.decision import verdicts
from bench.findings.presentation import costs
from bench.findings.reading.runs import finished
from bench.metrics import FAILURE, PLAN, STOPPED
from bench.provenance import GridText
from bench.tracking import names, page, reader, store, view, writer
from bench.tracking.writer import Where
from bench.trial import Trial

from .plan import costliest_first
from .trials import run_folder
from .watch import make_watch
from .workers import make_callback, start_ray, stop_ray, trainable


@dataclass(frozen=True)
class SweepOptions:
    """What the command line asks of a sweep beyond its grid: the grid file it came from (as
    read, once: what the sweep logs and copies beside its report is that text), where
    results and the store go, the cluster, whether finished trials are rerun (all, or those from
    other code), whether the report is rendered, and the command as typed (for the record).
    What each trial records of the plan it serves is the trial's own (`Trial.plan`)."""

    source: GridText  # the grid file as the command read it: its path and text
    results_dir: Path
    command: str
    tracking_uri: str | None = None
    address: str | None = None
    force: bool = False
    rerun_stale: bool = False
    report: bool = True
    gpu: float = 0.0  # each trial's share of a GPU (`gpus.packing`; 0: none)
    mps: str | None = None  # whether NVIDIA's MPS serves the packed trials, in words
    out: Path | None = None  # the run's folder (--out); None: <results_dir>/<grid>
    # what the claims' rows cost against their baselines, measured into the run's folder after
    # the trials, alone on the machine (`bench.measure.cost.measure_into`); None: not measured
    cost: Callable[[Path], object] | None = None


@dataclass
class Session:
    """A sweep under way: its grid and options, the store (URI, client, experiment), the code it
    runs (`provenance.identity()`), its folder, its trials' settings (`Trial.setting`, in the
    grid's order), its parent run once a look has work, and whether its Ray session is up (one
    for all its looks: started by the first look with work, ended when the looks end)."""

    grid: Grid
    options: SweepOptions
    uri: str
    client: MlflowClient
    exp: str
    now: dict[str, str]
    root: Path
    settings: list[str]
    parent: str | None = None
    ray_up: bool = False


def run_tune(run: Session, todo: list[Trial], where: Where, ended: set[str], gone: list[str]
             ) -> None:
    """Run the pending trials as one Tune experiment under <results-dir>/<grid>/ray/; `ended`
    collects the trials whose run the worker or the callback closed, `gone` why the tracking
    server stopped answering, if it did (which stops every trial)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    grid, gpu = run.grid, run.options.gpu
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
    by_hash = {t.hash: t for t in todo}  # each handed to its worker as it is
    tuner = tune.Tuner(
        tune.with_resources(tune.with_parameters(trainable, by_hash=by_hash, where=where),
                            {"cpu": grid.resources.cpu, "gpu": gpu}),
        param_space={"trial": tune.grid_search(list(by_hash))},
        # reuse_actors: a worker runs its next trial without a new process and imports (about
        # 5 s a trial on this CPU); train() seeds everything and resets the peak-memory mark
        tune_config=tune.TuneConfig(
            metric=grid.metric, mode=grid.mode, scheduler=scheduler, reuse_actors=True,
            trial_name_creator=lambda trial: by_hash[trial.config["trial"]].name,
            trial_dirname_creator=lambda trial: trial.config["trial"][:16]),
        run_config=tune.RunConfig(
            storage_path=str((run.root / "ray").resolve()),
            name=run.client.get_run(where.parent).info.run_name, verbose=0,
            failure_config=tune.FailureConfig(max_failures=grid.max_failures),
            stop=make_watch(run.uri, gone),
            callbacks=[make_callback(run.client, where, by_hash, ended, gone)]))
    tuner.fit()


def summary(client: Any, exp: str, trials: list[Trial], now: dict[str, str]) -> pd.DataFrame:
    """Latest run of each trial: status, final bpc, params, FLOPs, speed, failure reason, and
    the code of a result from other code than `now` (provenance.identity())."""
    runs = reader.trial_runs(client, exp)
    rows = []
    for t in trials:
        run = runs.get(t.hash, [None])[0]
        m, tags = (run.data.metrics, run.data.tags) if run else ({}, {})
        ran = reader.stale(run.data.params, now) if run else None
        stale = f"stale: {ran}" if ran else ""
        note = tags.get(FAILURE) or tags.get(STOPPED) or ""
        rows.append({"run": t.name, "status": run.info.status if run else "NOT RUN",
                     "dev_bpc": m.get("final_dev_bpc"), "test_bpc": m.get("final_test_bpc"),
                     "params": m.get("params"), "flops/token": m.get("flops_max"),
                     "tokens/s": m.get("final_tokens_per_s"),
                     "note": "; ".join(n for n in (stale, note) if n)})
    df = pd.DataFrame(rows)
    for col in ("params", "flops/token", "tokens/s"):
        df[col] = pd.to_numeric(df[col]).round().astype("Int64")
    return df


def render_report(run: Session, partial: str | None) -> bool:
    """The sweep's report (`render_sweep`: its runs.csv and findings first, then the tables,
    figures and the sweep run's artifacts); where the sweep was cut (`partial`: why),
    partial.md beside them says so. Returns whether it was all written: a failure is printed
    whole, traceback included, and fails the sweep (exit 1); the runs are intact and `python
    -m bench.report` renders it again."""
    from bench.findings.presentation.render import ReportError, render_sweep

    marker = run.root / "partial.md"
    marker.unlink(missing_ok=True)
    if partial:
        run.root.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"# {run.grid.name}: a partial report\n\n{partial}\n")
        print(f"partial report: {partial}")
    try:
        render_sweep(run.uri, run.grid.name, run.root, run.parent, run.grid,
                     run.options.source)
    except ReportError as err:  # nothing to report: said in one line
        print(f"error: no report: {err}", file=sys.stderr)
        return False
    except Exception:  # noqa: BLE001  (a report bug must not lose a finished sweep)
        traceback.print_exc()
        print(f"error: the report failed (above); the runs are intact: python -m bench.report "
              f"{run.options.source.path} --tracking-uri {run.uri} renders it again",
              file=sys.stderr)
        return False
    return True


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


def serves_claims(claims: list[Claim], axes: dict[str, list[Any]], values: dict[str, Any]) -> bool:
    """Whether a trial with these grid values is a row or a baseline row of one of the claims."""
    return any(all(values.get(k) == v for k, v in cell.items())
               for c in claims for _, *pair in cells(c, axes) for cell in pair if cell)


def sweep(grid: Grid, trials: list[Trial], options: SweepOptions) -> int:
    """Run what is not finished yet (`tracked_sweep`); returns 0, 1 (a trial failed), 2 (the
    tracking server does not answer, or stopped: one line says so and how to resume; the
    trial folders keep what was trained) or 130 (interrupted)."""
    uri = store.tracking_uri(options.tracking_uri, options.results_dir)
    store.limit_server_retries(uri)
    if not store.answering(uri):  # before anything trains: nothing to keep
        print(f"error: the MLflow server at {uri} does not answer, and nothing was trained: "
              "start the server and rerun the same command", file=sys.stderr, flush=True)
        return 2
    try:
        return tracked_sweep(grid, trials, options, uri)
    except (MlflowException, store.TrackingLost) as err:
        why = err if isinstance(err, store.TrackingLost) else store.lost(uri, err)
        if why is None:
            raise
        kept = trials[0].out_dir.parent if trials else options.results_dir
        print(f"error: {why}; the trials trained are kept in {kept}: start the server "
              "again and rerun the same command, which logs the finished ones and runs the "
              "rest, once each", file=sys.stderr, flush=True)
        return 2


def tracked_sweep(grid: Grid, trials: list[Trial], options: SweepOptions, uri: str) -> int:
    """Run what is not finished yet, look by look: the first look's seeds of every setting,
    then more seeds only for the settings that a claim still undecided (`_waiting`)
    reads; returns 0, 1 (a trial or the report failed) or 130 (interrupted, SIGTERM too: its
    report, marked partial, written all the same). A rerun recomputes every look's decision
    from the finished runs, so it retrains nothing and adds no duplicate run."""
    uri = store.tracking_uri(options.tracking_uri, options.results_dir)
    client = store.open_store(uri)
    exp = store.experiment_id(client, grid.name, uri)
    writer.end_lost_sweeps(client, exp)
    run = Session(grid, options, uri, client, exp, provenance.identity(),
                  run_folder(options.results_dir, grid.name, options.out),
                  list(dict.fromkeys(t.setting for t in trials)))
    covered, interrupted = look_by_look(run, trials)
    table = summary(client, exp, covered, run.now)
    failed = bool(table.status.isin(["FAILED", "NOT RUN"]).any())
    if run.parent:
        writer.end_sweep(client, run.parent, "KILLED" if interrupted else
                         "FAILED" if failed else "FINISHED")
    print("\n" + table.astype(object).where(table.notna(), None).to_markdown(
        index=False, floatfmt=".4f", intfmt=",", missingval="-"))
    print("dev_bpc, test_bpc: the whole splits, from each run's best checkpoint; flops/token: "
          "analytic #FLOPS at the windows it computed over dev (flops_max); tokens/s: training")
    if run.parent and options.report:
        if options.cost and not interrupted:
            measure_cost(run)
        done = int((table.status == "FINISHED").sum())
        failed |= not render_report(run, None if not interrupted else (
            f"the sweep was stopped (SIGINT or SIGTERM) before it ended: {done} of the "
            f"{len(covered)} trials it had reached finished, the rest were killed, and no "
            "later look ran; the findings read the finished trials only. The same command "
            "continues it."))
    for line in costs.closing(run.root) if run.parent and options.report else []:
        print(f"cost: {line}")
    print(f"\nresults: {run.root}\nMLflow:  {store.ui_hint(uri, exp)}")
    if interrupted:
        print("interrupted: finished trials are kept; rerun the same command to continue")
    return 130 if interrupted else 1 if failed else 0


def measure_cost(run: Session) -> None:
    """The cost measurement (`SweepOptions.cost`) into the run's folder, Ray ended; a failure
    is printed whole and loses nothing: the report says the cost was not measured, and
    `python -m bench.cost FOLDER` measures it again."""
    print(f"{run.grid.name}: measuring what the claims' rows cost against their baselines, "
          "interleaved, alone on the machine")
    tic = time.perf_counter()
    try:
        run.options.cost(run.root)
    except Exception:  # noqa: BLE001  (a measurement bug must not lose a finished sweep)
        traceback.print_exc()
        print(f"error: the cost measurement failed (above); python -m bench.cost {run.root} "
              "measures it again", file=sys.stderr)
        return
    print(f"{run.grid.name}: cost measured in {time.perf_counter() - tic:.0f} s")


@contextlib.contextmanager
def sigterm_as_sigint() -> Iterator[None]:
    """SIGTERM (`timeout`, a scheduler's stop) handled as SIGINT while the sweep trains: Tune
    stops, the unfinished trials are closed KILLED and the report of the finished ones is
    written, instead of the process dying with its runs open."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def look_by_look(run: Session, trials: list[Trial]) -> tuple[list[Trial], bool]:
    """Each look's trials (the first look: every setting; later ones: the settings an
    undecided claim reads), trained until every claim is decided or the looks run out; returns
    the trials covered and whether the sweep was interrupted."""
    try:
        return _looks(run, trials)
    finally:
        end_ray(run)


def end_ray(run: Session) -> None:
    """End the sweep's Ray session, where it is up."""
    if run.ray_up:
        stop_ray()
        run.ray_up = False


def _waiting(run: Session, trials: list[str]) -> list[Claim]:
    """The claims the finished runs of `trials` leave undecided (`verdicts.undecided`): what
    the next look adds seeds for."""
    grid = run.grid
    if grid.looks is None:
        return []
    runs, missing = finished(run.uri, grid.name, grid, trials)
    return verdicts.undecided(grid.claims, runs, missing, grid.looks, floors.of_grid(grid))


def _looks(run: Session, trials: list[Trial]) -> tuple[list[Trial], bool]:
    grid, looks = run.grid, run.grid.look_seeds()
    covered: list[Trial] = []
    for k, seeds in enumerate(looks):
        still = grid.claims if k == 0 else _waiting(run, [t.hash for t in covered])
        if k and not still:
            print(f"{grid.name}: every claim decided after look {k} of {len(looks)}")
            break
        known = {t.hash for t in covered}
        new = [t for t in trials if t.seed in seeds and t.hash not in known
               and (k == 0 or serves_claims(still, grid.grid, t.values))]
        covered += new
        if len(looks) > 1:
            print(f"{grid.name}: look {k + 1} of {len(looks)}, seeds {seeds[0]}-{seeds[-1]}: "
                  f"{len(new)} trials" + ("" if k == 0 else " for the undecided claims "
                                          + ", ".join(c.id for c in still)))
        seen = sorted({s for look in looks[:k + 1] for s in look})
        tic = time.perf_counter()
        if run_look(run, new, page.Look(grid.name, [t.hash for t in covered], k + 1, len(looks),
                                        seen)):
            return covered, True
        if run.parent and run.options.report and k + 1 < len(looks):
            render_report(run, None)  # the sweep's page says what this look found
        print(f"{grid.name}: look {k + 1} of {len(looks)} took "
              f"{(time.perf_counter() - tic) / 60:.1f} min (its trials and report; the dry "
              "run estimates it)")
    return covered, False


def run_look(run: Session, trials: list[Trial], look: page.Look) -> bool:
    """Train the look's unfinished trials under the sweep's parent run (created at the first
    look with work; its trial list then covers every look so far, `look`); returns whether it
    was interrupted."""
    todo, fresh, runs = pending(run, trials)
    print(f"{run.grid.name}: {len(trials)} trials, {len(trials) - len(todo)} already finished, "
          f"{len(todo)} to run")
    if run.parent is not None:
        writer.log_trials_covered(run.client, run.parent, look)
    if not todo:
        return False
    if run.parent is None:
        run.parent = writer.start_sweep(run.client, run.exp, run.options.source,
                                        run.options.command, look, to_text(run.grid))
        claims = run.grid.claims
        view.share_view(run.client, run.exp, list(run.grid.grid), [c.metric for c in claims],
                        [c.id for c in claims], run.settings)
        if run.options.mps:
            print(run.options.mps)
            run.client.set_tag(run.parent, names.MPS, run.options.mps)
    where = Where(run.uri, run.exp, run.parent, writer.sweep_source(run.options.source.path))
    for t in todo:  # unfinished runs of earlier sweeps continue under this one
        if t.hash not in fresh and runs.get(t.hash):
            writer.continue_under_sweep(run.client, runs[t.hash][0].info.run_id, run.parent)
    ended: set[str] = set()  # trials whose run the worker or the callback closed
    gone: list[str] = []  # why the tracking server stopped answering, if it did
    tuned = False
    try:
        if not run.ray_up:  # one Ray session for every look: its processes, its workers
            print(start_ray(run.options.address))
            run.ray_up = True
        with sigterm_as_sigint():  # set after ray.init, which sets its own (an exit)
            run_tune(run, todo, where, ended, gone)
        tuned = True
    except KeyboardInterrupt:
        pass
    finally:
        if not tuned or gone:  # interrupted, failed, or the store is gone: Ray ends now
            end_ray(run)
    if gone:
        raise store.TrackingLost(gone[0])
    interrupted = False
    for t in todo:
        if t.hash not in ended:
            writer.close(run.client, where, t.hash, "KILLED", FAILURE, "interrupted")
            interrupted = True
    return interrupted  # an interrupted sweep stops here: look_by_look ends its Ray


def pending(run: Session, trials: list[Trial]) -> tuple[list[Trial], set[str], dict]:
    """(the trials to train, costliest first; those restarted from scratch; the store's runs of
    `trials` by hash): unfinished ones, finished ones with --force, stale ones with
    --rerun-stale, and unfinished ones begun on other code (afresh, in new runs)."""
    runs = reader.trial_runs(run.client, run.exp)
    stale = stale_results(trials, runs, run.now)
    say_stale(stale, run.now, run.options.rerun_stale)
    fresh = {t.hash for t in trials if run.options.force or (run.options.rerun_stale
                                                             and t.hash in stale)}
    if dirty := [t for t in trials if t.hash not in fresh and (done := reader.done_run(
            runs.get(t.hash, []))) and done.data.tags.get(PLAN + "run_clean") == "false"]:
        print(f"warning: {len(dirty)} finished trials, reused, recorded a working tree that "
              "differed from its commit: their findings stay exploratory; --force reruns "
              "them", file=sys.stderr, flush=True)
    if again := restarted(trials, runs, run.now):
        print(f"warning: {len(again)} unfinished trials started on other code than this "
              "checkout; restarting them afresh, in new runs", file=sys.stderr, flush=True)
    fresh |= again
    for t in trials:
        if t.hash in fresh:
            shutil.rmtree(t.out_dir, ignore_errors=True)
    todo = costliest_first([t for t in trials
                            if t.hash in fresh or not reader.done_run(runs.get(t.hash, []))])
    return todo, fresh, runs
