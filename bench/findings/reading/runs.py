"""A sweep's runs as the report sees them: finished trials and the rest, each labelled by its
variant and grid values, with what its layer said it is, in the grid's own row order."""

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from mlflow import MlflowClient

from bench.experiment.claims import HEAD_SPAN_METRICS, Claim, num
from bench.experiment.grid import Grid, ReportSpec
from bench.experiment.layouts import display_name
from bench.metrics import FAILURE, GRID_KEYS, PLAN, SEEDS, STOPPED
from bench.provenance import identity, short_commit
from bench.record import RunResult
from bench.tracking import reader

from .records import CODE, PLANS, RECORDS

SHORT = {"model.span": "S", "model.n_heads": "h", "model.d_model": "D", "model.n_layers": "L",
         "data.name": "data"}


@dataclass
class Sweep:
    name: str
    runs: pd.DataFrame  # finished trials, one row each: dotted params, metrics, label, run_id
    missing: pd.DataFrame  # the other trials: label, status, failure
    keys: list[str]  # the grid keys, without the seed
    grid: Grid | None  # the grid file the sweep ran (None: an experiment without one)
    client: MlflowClient | None  # None: runs read from a runs.csv, no store behind them

    @property
    def axes(self) -> dict[str, list[Any]]:
        """The grid's axes in the file's order ({} without a grid file)."""
        return self.grid.grid if self.grid else {}

    @property
    def claims(self) -> list[Claim]:
        return self.grid.claims if self.grid else []

    @property
    def report(self) -> ReportSpec:
        """What the grid file asks the report to draw (the defaults without one)."""
        return self.grid.report if self.grid else ReportSpec()

    @property
    def probes(self) -> list[str]:
        """The probes the runs scored apart (their final probe_bpc.<probe>), `rest` left out,
        sorted (the store returns metrics in no fixed order)."""
        return sorted(c.split(".", 1)[1] for c in self.runs if c.startswith("probe_bpc.")
                      and c != "probe_bpc.rest")


def grid_keys(df: pd.DataFrame, axes: dict[str, list[Any]]) -> list[str]:
    """The grid's axes (the grid file's, else the runner's attnbench.grid_keys tag, else the
    config keys that vary), without the seed."""
    tagged = df.get(f"tags.{GRID_KEYS}", pd.Series(dtype=str)).dropna()
    keys = list(axes) or list(dict.fromkeys(k for v in tagged for k in v.split(",") if k))
    if not keys:
        cfg = [c for c in df if c.startswith(("model.", "data.", "train."))]
        keys = [c for c in cfg if df[c].nunique(dropna=False) > 1]
    return [k for k in keys if k not in SEEDS and k in df]


def _label(row: pd.Series, keys: list[str], precisions: bool, layout: str) -> str:
    """variant (as the grid's table `layout` names it: `layouts.display_name`) and grid
    values; `[precision]` where the sweep's runs ran in more than one; `(@commit)` for a result
    from other code than this checkout's, so that each is a row of its own in every table."""
    if pd.isna(row["model.variant"]):  # a trial that failed before logging its config
        return f"run {row['run_id'][:8]}"
    parts = [display_name(str(row["model.variant"]), layout)]
    parts += [f"{SHORT.get(k, k.rsplit('.', 1)[-1])}={num(row[k])}" for k in keys
              if k != "model.variant"]
    if precisions:
        parts.append(f"[{row.get('precision')}]")
    if isinstance(row.get("stale"), str):
        parts.append(f"(@{short_commit(row['stale'])})")
    return " ".join(parts)


def machine_line(runs: pd.DataFrame) -> str:
    """Where the runs ran (the GPU, else the CPU's kernel level; and the precision), with a
    warning when they ran on more than one: sums are ordered differently on each, so the last
    digits of their numbers differ, and rows across them compare with care."""
    if not {"cpu_capability", "precision"} <= set(runs):
        return "Machine: not recorded by these runs."

    def where(r: pd.Series) -> str:
        gpu = r.get("gpu")
        device = f"GPU {gpu}" if isinstance(gpu, str) else f"CPU, {r['cpu_capability']} kernels"
        return f"{device}, {r['precision']}"

    kinds = Counter(where(r) for _, r in runs.iterrows())
    cpus = sorted(set(runs["cpu"].dropna())) if "cpu" in runs else []
    text = "; ".join(f"{k} ({n} runs)" for k, n in kinds.items()) + (
        f"; CPU {', '.join(cpus)}" if cpus else "")
    if len(kinds) > 1:
        return (f"Machine: the rows come from more than one kernel level or precision: {text}. "
                "Compare rows across them with care.")
    return f"Machine: {text}."


def _derive(df: pd.DataFrame, keys: list[str], layout: str = "") -> pd.DataFrame:
    """Columns the tables share: label (variants as the grid's table `layout` names them:
    `layouts.display_name`), and what each run's layer said it is (`layer.*`, logged by
    the trainer from `Attention.describe()`): policies, heads and head widths, P_l and P_w;
    multiplies per token."""
    df = df.copy()
    if "model.variant" not in df:
        df["model.variant"] = "model"
    precisions = df.get("precision", pd.Series(dtype=object)).nunique() > 1
    df["label"] = df.apply(_label, axis=1, keys=keys, precisions=precisions, layout=layout)
    for k in ("span_policy", "mixing", "h_k", "h", "h_v", "d_k", "d_v", "P_l", "P_w"):
        df[k] = df.get(f"layer.{k}", pd.Series(np.nan, df.index))
    for k in ("P_l", "P_w"):
        df[k] = df[k].map({True: "yes", "true": "yes", False: "-", "false": "-"})
    flops = [df[c] for c in ("flops_counted", "flops_max") if c in df]
    df["flops"] = flops[0].fillna(flops[1]) if len(flops) == 2 else (flops or [np.nan])[0]
    return df


def _rank(values: list[Any]):
    """A sort key putting a column's entries in the order of `values` (an axis as the grid file
    lists it; logged params compare as numbers where they are numbers), unknown ones last."""
    def position(v: Any) -> int:
        for i, want in enumerate(values):
            same = (float(v) == float(want) if isinstance(want, int | float)
                    and not isinstance(want, bool) and _numeric(v) else str(v) == str(want))
            if same:
                return i
        return len(values)

    return lambda s: s.map(position)


def _numeric(v: Any) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


def order(df: pd.DataFrame, keys: list[str], axes: dict[str, list[Any]]) -> pd.DataFrame:
    """Rows in the grid's own order: by its axes as the file lists them, each axis in the order
    of its values (a key the file does not list: by value), then by seed."""
    by = list(dict.fromkeys(k for k in [*keys, *SEEDS] if k in df))
    return df.sort_values(by, kind="stable", key=lambda s: _rank(axes[s.name])(s)
                          if s.name in axes else s)


def load_sweep(found: reader.SweepRuns, grid: Grid | None) -> Sweep:
    """The report's view of a sweep's runs: finished ones (with final metrics) and the rest, a
    trial rerun by a later sweep counted once (its newest finished run, else its newest)."""
    df = found.runs
    axes = grid.grid if grid else {}
    keys = grid_keys(df, axes)
    df = order(_derive(df, keys, grid.report.table if grid else ""), keys, axes
               ).reset_index(drop=True)
    final = df.get("final_dev_bpc", pd.Series(np.nan, df.index))
    df = df.assign(done=(df["status"] == "FINISHED") & final.notna())
    newest = df.sort_values("start_time", ascending=False, kind="stable")
    runs = newest[newest["done"]].drop_duplicates("trial").sort_index()
    missing = newest[~newest["trial"].isin(runs["trial"])].drop_duplicates("trial").sort_index()
    return Sweep(found.experiment, runs.reset_index(drop=True), missing.reset_index(drop=True),
                 keys, grid, found.client)


def csv_sweep(runs: pd.DataFrame, grid: Grid) -> Sweep:
    """A committed result's runs (runs.csv, each a finished trial: `perseed.read`) as the report
    sees a sweep's, labelled and in the grid's order, with no store behind them: what its table
    is drawn from."""
    keys = grid_keys(runs, grid.grid)
    df = order(_derive(runs, keys, grid.report.table), keys, grid.grid).reset_index(drop=True)
    return Sweep(grid.name, df, pd.DataFrame(columns=["label", "status"]), keys, grid, None)


def missing_lines(sweep: Sweep) -> list[str]:
    """One line per trial that did not finish: label, seed, status and the failure reason."""
    out = []
    for _, r in sweep.missing.iterrows():
        seed = next((f" seed {num(r[s])}" for s in SEEDS if s in r and pd.notna(r[s])), "")
        why = next((r[f"tags.{t}"] for t in (FAILURE, STOPPED) if pd.notna(r.get(f"tags.{t}"))),
                   np.nan)
        status = r["status"] if r["status"] != "FINISHED" else "FINISHED without final metrics"
        out.append(f"{r['label']}{seed}: {status}" + (f": {why}" if pd.notna(why) else ""))
    return out


def run_result(run: pd.Series | None) -> RunResult | None:
    """The trial's run record (its result.json artifact); None when absent or not a record."""
    record = None if run is None else reader.artifact_dict(run["run_id"], "result.json")
    try:
        return None if record is None else RunResult.from_dict(record)
    except ValueError:  # another kind of file: the figure is skipped
        return None


def finished(uri: str, experiment: str, grid: Grid, trials: list[str]
             ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The finished runs of a running sweep's `trials` as the claims read them (`claim_runs`)
    and its other trials: what the runner judges between looks (`verdicts.undecided`)."""
    data = load_sweep(reader.sweep_runs(uri, experiment, identity(), trials=set(trials)), grid)
    return claim_runs(data), data.missing


def head_spans(sweep: Sweep) -> pd.Series:
    """Every finished run's per-head spans from its result.json (NaN where it has none)."""
    spans = [(res := run_result(r)) and res.head_spans for _, r in sweep.runs.iterrows()]
    return pd.Series([s if s else np.nan for s in spans], index=sweep.runs.index, dtype=object)


def code_records(runs: pd.DataFrame) -> dict[str, dict[str, str]]:
    """Each code_sha the runs record (`claim_runs`) -> its files' digests, from the code.json
    artifact of one run that records it: what code.json beside runs.csv holds."""
    if "code_sha" not in runs:
        return {}
    named = runs.dropna(subset=["code_sha"]).groupby("code_sha")["run_id"].first()
    return {sha: found for sha, run_id in named.items()
            if (found := reader.artifact_dict(run_id, CODE)) is not None}


def plan_records(runs: pd.DataFrame) -> dict[str, dict]:
    """Each plan_sha the runs record (`claim_runs`) -> the plan as registered, from the
    plan.json artifact of one run that records it: what plan.json beside runs.csv holds."""
    if "plan_sha" not in runs:
        return {}
    named = runs.dropna(subset=["plan_sha"]).groupby("plan_sha")["run_id"].first()
    return {sha: found[sha] for sha, run_id in named.items()
            if (found := reader.artifact_dict(run_id, PLANS)) is not None and sha in found}


def claim_runs(sweep: Sweep) -> pd.DataFrame:
    """The finished runs with what the claims read: their grid keys, seed, metrics, layer
    description, the plan and code records (`records.RECORDS`, from their tags), and head spans
    where a claim needs them (as runs.csv holds them)."""
    runs = sweep.runs.rename(columns={f"tags.{PLAN}{k}": k for k in RECORDS})
    if any(c.metric in HEAD_SPAN_METRICS for c in sweep.claims):
        runs = runs.assign(head_spans=head_spans(sweep))
    return runs
