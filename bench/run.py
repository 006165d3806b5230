"""Ablation sweeps: a YAML grid of configs, trained in parallel by Ray Tune, tracked in MLflow.

python -m bench.run ablations/heads_grid.yaml [--set train.steps=500] [--preset small]
    [--data enwik8] [--seeds 0,1,2] [--dry-run] [--address HOST:PORT] [--force]

Every trial config is resolved and validated before Ray or MLflow start; a user error exits 2.
A trial lives in results/<grid>/trials/<hash>/ (hash of its resolved config, seed included), so
a rerun skips finished trials and resumes unfinished ones from their checkpoints.
"""

import argparse
import hashlib
import itertools
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import torch
import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from . import data, provenance, tracking
from .config import (
    PRESETS,
    Config,
    ConfigError,
    DataConfig,
    Strict,
    format_error,
    merge,
    parse_sets,
    resolve,
    set_dotted,
)
from .flops import analytic_flops
from .train import Diverged, build_model, load_corpus, train

FREE_DICTS = ("model.attn.", "data.synthetic.")  # checked by building, not by the schema


def check_key(key: str) -> None:
    """Raise ValueError unless the dotted key names a field of Config (or lies in a free dict)."""
    if key == "train.seed":
        raise ValueError("train.seed: seeds come from `seeds:` (or --seeds)")
    if key.startswith(FREE_DICTS):
        return
    schema: type[BaseModel] = Config
    parts = key.split(".")
    for i, part in enumerate(parts):
        where = ".".join(parts[:i]) or "the config"
        if part not in schema.model_fields:
            raise ValueError(f"{key}: {part!r} is not a key of {where}; "
                             f"allowed: {', '.join(schema.model_fields)}")
        schema = schema.model_fields[part].annotation
        if i < len(parts) - 1 and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise ValueError(f"{key}: {'.'.join(parts[:i + 1])} is a value, not a section")


class Base(Strict):
    """The config every trial starts from: a preset, then these partial sections."""

    preset: str | None = "tiny"
    model: dict[str, Any] = {}
    data: dict[str, Any] = {}
    train: dict[str, Any] = {}

    @field_validator("preset")
    @classmethod
    def _known(cls, v: str | None) -> str | None:
        if v is not None and v not in PRESETS:
            raise ValueError(f"unknown preset {v!r}; known: {', '.join(PRESETS)}")
        return v


class Resources(Strict):
    cpu: float = Field(1, gt=0)
    gpu: float | None = Field(None, ge=0)  # None: one GPU per trial when the cluster has GPUs


class Scheduler(Strict):
    """`none`, or ASHA early stopping on `metric` (steps are training steps)."""

    type: Literal["none", "asha"] = "none"
    grace_period: int | None = Field(None, gt=0)  # default: the first evaluation
    reduction_factor: float = Field(4, gt=1)
    max_t: int | None = Field(None, gt=0)  # default: the longest trial's steps

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, v: Any) -> Any:
        return {"type": v} if isinstance(v, str) else v


class Grid(Strict):
    """A grid file: the cross product of `grid` (minus `exclude`) x `seeds`, on top of `base`."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    base: Base = Base()
    grid: dict[str, list[Any]]
    exclude: list[dict[str, Any]] = []  # a trial matching every key of a rule is dropped
    seeds: list[int] = Field([0], min_length=1)
    resources: Resources = Resources()
    scheduler: Scheduler = Scheduler()
    metric: Literal[tracking.EVAL_METRICS] = "dev_bpc"
    mode: Literal["min", "max"] = "min"
    max_failures: int = Field(2, ge=0)  # Ray restarts of a crashed trial from its checkpoint

    @field_validator("grid")
    @classmethod
    def _axes(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        if not grid:
            raise ValueError("empty grid: give at least one dotted key with a list of values, "
                             "e.g. model.variant: [fixed, adaptive]")
        for key, values in grid.items():
            check_key(key)
            if not values:
                raise ValueError(f"{key}: empty list of values")
        return grid

    @model_validator(mode="after")
    def _rules(self) -> "Grid":
        for i, rule in enumerate(self.exclude):
            if unknown := sorted(set(rule) - set(self.grid)):
                raise ValueError(f"exclude.{i}: {unknown} are not grid keys; grid keys: "
                                 f"{', '.join(self.grid)}")
        return self


@dataclass
class Trial:
    values: dict[str, Any]  # this trial's value of each grid key
    cfg: Config
    hash: str
    vocab: int = 0

    @property
    def seed(self) -> int:
        return self.cfg.train.seed

    @property
    def name(self) -> str:
        """<variant>-<varied values>-s<seed>, e.g. talking-heads-n_heads=8-s0."""
        varied = [f"{k.rsplit('.', 1)[-1]}={v}" for k, v in self.values.items()
                  if k != "model.variant"]
        return "-".join([self.cfg.model.variant, *varied, f"s{self.seed}"])


def config_hash(cfg: Config) -> str:
    """sha256 of the canonical JSON of a resolved config (the seed is train.seed)."""
    text = json.dumps(cfg.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def load_grid(path: Path) -> Grid:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: cannot read the grid file: {err}") from None
    try:
        return Grid.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_error(err, Grid, f"grid file {path}")) from None


def lookup(tree: dict, key: str) -> tuple[bool, Any]:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False, None
        tree = tree[part]
    return True, tree


def drop_preset_keys(tree: dict, preset: dict) -> dict:
    """tree without the leaves `preset` sets, so a --preset on the command line wins over base."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and isinstance(preset.get(k), dict):
            out[k] = drop_preset_keys(v, preset[k])
        elif k not in preset:
            out[k] = v
    return out


def apply_cli(grid: Grid, args: argparse.Namespace) -> tuple[dict, str | None]:
    """The base tree and preset after --preset, --data, --seeds and --set."""
    base = {k: getattr(grid.base, k) for k in ("model", "data", "train")}
    preset = grid.base.preset
    if args.preset:
        preset, base = args.preset, drop_preset_keys(base, PRESETS.get(args.preset, {}))
    sets = parse_sets(args.sets)
    if args.data:
        set_dotted(sets, "data.name", args.data)
        if args.data != "synthetic":
            base["data"] = {k: v for k, v in base["data"].items() if k != "synthetic"}
    for key in grid.grid:  # --set on a grid key pins that axis to one value
        found, value = lookup(sets, key)
        if found:
            grid.grid[key] = [value]
    if args.seeds:
        grid.seeds = args.seeds
    return merge(base, sets), preset


def excluded(values: dict[str, Any], rules: list[dict[str, Any]]) -> bool:
    """A rule matches when each of its keys equals the trial's value (or lists it)."""
    def match(key: str, want: Any) -> bool:
        got = values[key]
        return got == want or (isinstance(want, list) and got in want)

    return any(all(match(k, v) for k, v in rule.items()) for rule in rules)


def trial_config(values: dict[str, Any], seed: int, base: dict, preset: str | None) -> Config:
    """One trial's resolved config: base, then its grid values and seed; data paths absolute."""
    tree: dict = {}
    for key, value in values.items():
        set_dotted(tree, key, value)
    tree = merge(base, tree)
    set_dotted(tree, "train.seed", seed)
    try:
        cfg = resolve(tree, preset)
    except ConfigError as err:
        label = ", ".join(f"{k}={v!r}" for k, v in values.items())
        raise ConfigError(f"trial {label}, seed {seed}: {err}") from None
    for key in ("path", "data_dir"):  # trials run in other working directories
        if (value := getattr(cfg.data, key)) is not None:
            setattr(cfg.data, key, str(Path(value).expanduser().resolve()))
    return cfg


def expand(grid: Grid, base: dict, preset: str | None) -> list[Trial]:
    """Resolve and validate every trial (raises ConfigError naming the trial and the key)."""
    try:
        resolve(base, preset)
    except ConfigError as err:
        raise ConfigError(f"base: {err}") from None
    trials: dict[str, Trial] = {}
    for combo in itertools.product(*grid.grid.values()):
        values = dict(zip(grid.grid, combo, strict=True))
        if excluded(values, grid.exclude):
            continue
        for seed in grid.seeds:
            cfg = trial_config(values, seed, base, preset)
            trials.setdefault(config_hash(cfg), Trial(values, cfg, config_hash(cfg)))
    if not trials:
        raise ConfigError("exclude: every trial of the grid is excluded")
    return list(trials.values())


def needs_download(d: DataConfig) -> bool:
    """A real dataset that is neither given by path nor cached yet."""
    return (d.name in data.SOURCES and d.path is None
            and not (data.data_dir(d.data_dir) / d.name).is_file())


def check_data(trials: list[Trial], dry_run: bool) -> None:
    """Load each distinct corpus once (so a bad data option is a user error here, and a download
    happens once), recording the vocabulary size. A dry run downloads nothing."""
    vocab: dict[str, int] = {}
    for t in trials:
        d, tr = t.cfg.data, t.cfg.train
        key = json.dumps([d.model_dump(mode="json"), tr.block, tr.batch_size], sort_keys=True)
        if key not in vocab and dry_run and needs_download(d):
            vocab[key] = len(data.TEXT8_SYMBOLS) if d.name == "text8" else 256
        if key not in vocab:
            try:
                vocab[key] = load_corpus(t.cfg).vocab_size
            except (data.DataError, TypeError) as err:
                raise ConfigError(f"trial {t.name}: data: {err}") from None
        t.vocab = vocab[key]


def plan_table(trials: list[Trial]) -> pd.DataFrame:
    """One row per trial: its grid values, params, analytic FLOPs per token, tokens, cost."""
    models: dict[str, tuple[int, float]] = {}
    rows = []
    for t in trials:
        key = json.dumps([t.cfg.model.model_dump(mode="json"), t.vocab], sort_keys=True)
        if key not in models:
            model = build_model(t.cfg, t.vocab)
            models[key] = (sum(p.numel() for p in model.parameters()),
                           analytic_flops(model, "full"))
        params, flops = models[key]
        tr = t.cfg.train
        tokens = tr.steps * tr.batch_size * tr.block
        rows.append({"trial": t.hash[:10], **t.values, "seed": t.seed, "params": params,
                     "flops/token": flops, "tokens": tokens, "cost": float(tokens * flops)})
    return pd.DataFrame(rows)


def print_plan(trials: list[Trial]) -> None:
    df = plan_table(trials)
    print(df.to_markdown(index=False, floatfmt=".3g", intfmt=","))
    print(f"\n{len(df)} trials, {df.tokens.sum():,} training tokens; estimated cost "
          f"(trials x tokens x analytic FLOPs/token at full span): {df.cost.sum():.3g} "
          "multiply-adds forward (about 3x that with the backward pass)")


def trainable(config: dict) -> None:
    """One trial in a Ray worker: train (from Ray's checkpoint after a crash), log to MLflow."""
    import ray
    from ray import tune

    spec, where = config["trial"], config["tracking"]
    torch.set_num_threads(spec["threads"])
    out = Path(spec["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    if (ckpt := tune.get_checkpoint()) is not None:
        with ckpt.as_directory() as d:
            for name in ("checkpoint.pt", "best.pt"):
                if (Path(d) / name).exists():
                    shutil.copy2(Path(d) / name, out / name)
    ctx = ray.get_runtime_context()
    run = tracking.TrialRun.open(where["uri"], where["experiment"], where["parent"], spec, {
        "attnbench.ray_node_id": ctx.get_node_id(), "attnbench.ray_gcs": ctx.gcs_address,
        "attnbench.trial_dir": str(out)})

    def report(metrics: dict, _: Path | None) -> None:
        run.log_eval(metrics, out)
        print(f"{spec['name']} step {metrics['step']}: dev bpc {metrics['dev_bpc']:.4f}, "
              f"{metrics['tokens_per_s']:,.0f} tokens/s")
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(out)))

    done = out / "result.json"
    try:  # a result.json means train() finished and only the logging was cut off
        result = json.loads(done.read_text()) if done.exists() else train(
            Config.model_validate(spec["cfg"]), out, report=report, progress=False)
    except (Diverged, data.DataError, ConfigError) as err:  # retrying cannot help
        run.fail(f"{type(err).__name__}: {err}", out)
        return
    run.finish(result, out)


def trial_spec(t: Trial, grid: Grid, root: Path) -> dict:
    return {"hash": t.hash, "name": t.name, "grid": grid.name, "grid_keys": list(grid.grid),
            "cfg": t.cfg.model_dump(mode="json"), "out_dir": str(root / "trials" / t.hash),
            "threads": max(1, int(grid.resources.cpu))}


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
        return tracking.close(client, where["experiment"], where["parent"],
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
            self._end(trial, close(trial, "KILLED", tracking.STOPPED, "stopped by the scheduler"))

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info) -> None:
            error = str(trial.get_error() or "error").strip().splitlines()[-1]
            self._end(trial, close(trial, "FAILED", tracking.FAILURE,
                                   f"crashed {trial.num_failures} times; last error: {error}"))

    return CloseRuns()


def run_tune(grid: Grid, todo: list[Trial], root: Path, where: dict, callback: Any,
             sweep_name: str) -> None:
    """Run the pending trials as one Tune experiment under results/<grid>/ray/."""
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
        tune_config=tune.TuneConfig(
            metric=grid.metric, mode=grid.mode, scheduler=scheduler,
            trial_name_creator=lambda trial: trial.config["trial"]["name"],
            trial_dirname_creator=lambda trial: trial.config["trial"]["hash"][:16]),
        run_config=tune.RunConfig(
            storage_path=str((root / "ray").resolve()), name=sweep_name, verbose=0,
            failure_config=tune.FailureConfig(max_failures=grid.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1), callbacks=[callback]))
    tuner.fit()


def summary(client: Any, exp: str, trials: list[Trial]) -> pd.DataFrame:
    """Latest run of each trial: status, final bpc, params, FLOPs, speed, failure reason."""
    runs = tracking.trial_runs(client, exp)
    rows = []
    for t in trials:
        run = runs.get(t.hash, [None])[0]
        m, tags = (run.data.metrics, run.data.tags) if run else ({}, {})
        rows.append({"run": t.name, "status": run.info.status if run else "NOT RUN",
                     "dev_bpc": m.get("final_dev_bpc"), "test_bpc": m.get("final_test_bpc"),
                     "params": m.get("params"), "flops/token": m.get("flops_full"),
                     "tokens/s": m.get("tokens_per_s"),
                     "note": tags.get(tracking.FAILURE) or tags.get(tracking.STOPPED) or ""})
    df = pd.DataFrame(rows)
    for col in ("params", "flops/token", "tokens/s"):
        df[col] = pd.to_numeric(df[col]).round().astype("Int64")
    return df


def render_report(grid: str, uri: str, out_dir: Path, parent: str) -> None:
    """bench.report's sweep report, when that module exists; its failure never fails a sweep."""
    try:
        from bench import report
    except ImportError:
        return
    if not hasattr(report, "render_sweep"):
        return
    try:
        report.render_sweep(grid, uri, out_dir, parent)
    except Exception as err:  # noqa: BLE001  (a report bug must not lose a finished sweep)
        print(f"warning: the report failed ({type(err).__name__}: {err}); the runs are intact",
              file=sys.stderr)


def sweep(grid: Grid, trials: list[Trial], args: argparse.Namespace) -> int:
    """Run what is not finished yet; returns 0, 1 (a trial failed) or 130 (interrupted)."""
    from mlflow import MlflowClient

    root = args.results_dir.resolve() / grid.name
    uri = tracking.tracking_uri(args.tracking_uri, args.results_dir)
    client = MlflowClient(uri)
    exp = tracking.experiment_id(client, grid.name, uri)
    runs = tracking.trial_runs(client, exp)
    if args.force:
        for t in trials:
            shutil.rmtree(root / "trials" / t.hash, ignore_errors=True)
    todo = [t for t in trials if args.force or not tracking.is_done(runs.get(t.hash, []))]
    print(f"{grid.name}: {len(trials)} trials, {len(trials) - len(todo)} already finished, "
          f"{len(todo)} to run")
    interrupted, parent = False, None
    if todo:
        parent = tracking.start_sweep(client, exp, grid.name, args.grid, len(trials))
        where = {"uri": uri, "experiment": exp, "parent": parent}
        for t in todo:  # unfinished runs of earlier sweeps continue under this one
            if not args.force and runs.get(t.hash):
                client.set_tag(runs[t.hash][0].info.run_id, tracking.PARENT, parent)
        ended: set[str] = set()  # trials whose run the worker or the callback closed
        try:
            print(start_ray(args.address))
            run_tune(grid, todo, root, where, make_callback(client, where, len(todo), ended),
                     client.get_run(parent).info.run_name)
        except KeyboardInterrupt:
            pass
        finally:
            stop_ray()
        for t in todo:
            if t.hash not in ended:
                tracking.close(client, exp, parent, t.hash, "KILLED", tracking.FAILURE,
                               "interrupted")
                interrupted = True
    table = summary(client, exp, trials)
    failed = bool(table.status.isin(["FAILED", "NOT RUN"]).any())
    if parent:
        client.set_terminated(parent, "KILLED" if interrupted else
                              "FAILED" if failed else "FINISHED")
    print("\n" + table.astype(object).where(table.notna(), None).to_markdown(
        index=False, floatfmt=".4f", intfmt=",", missingval="-"))
    if parent and not interrupted and not args.no_report:
        render_report(grid.name, uri, root, parent)
    print(f"\nresults: {root.resolve()}\nMLflow:  {tracking.ui_command(uri)}")
    if interrupted:
        print("interrupted: finished trials are kept; rerun the same command to continue")
    return 130 if interrupted else 1 if failed else 0


def seeds_arg(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers like 0,1,2") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument("grid", type=Path, help="grid file, e.g. ablations/heads_grid.yaml")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key in every trial (pins a grid axis); repeatable")
    p.add_argument("--preset", choices=sorted(PRESETS),
                   help="model/train preset; wins over the sizes the grid's base sets")
    p.add_argument("--data", choices=data.DATASETS, help="dataset (data.name)")
    p.add_argument("--seeds", type=seeds_arg, help="comma-separated seeds, e.g. 0,1,2")
    p.add_argument("--dry-run", action="store_true",
                   help="print the trials and the estimated cost, then exit")
    p.add_argument("--address", help="an existing Ray cluster (default: $RAY_ADDRESS, else local)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, "
                   "else sqlite:///<results-dir>/mlflow.db)")
    p.add_argument("--results-dir", type=Path, default=provenance.ROOT / "results",
                   help="where results/<grid>/ and the default MLflow db go")
    p.add_argument("--force", action="store_true", help="rerun finished trials too, from scratch")
    p.add_argument("--no-report", action="store_true", help="skip bench.report at the end")
    args = p.parse_args(argv)
    try:
        grid = load_grid(args.grid)
        base, preset = apply_cli(grid, args)
        trials = expand(grid, base, preset)
        check_data(trials, args.dry_run)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        print_plan(trials)
        return 0
    return sweep(grid, trials, args)


if __name__ == "__main__":
    sys.exit(main())
