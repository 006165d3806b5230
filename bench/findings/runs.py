"""A sweep's runs as the report sees them: finished trials and the rest, each labelled by its
variant and grid values, with what its layer said it is, in the grid's own row order."""

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from mlflow import MlflowClient

import variants
from bench.provenance import short_commit
from bench.tracking.names import FAILURE, GRID_KEYS, SEEDS, STOPPED
from bench.tracking.reader import SweepRuns
from variants.attention import canonical_policy

from .numbers import num
from .spec import GridSpec

SHORT = {"model.span": "S", "model.n_heads": "h", "model.d_model": "D", "model.n_layers": "L",
         "data.name": "data"}


@dataclass
class Sweep:
    name: str
    runs: pd.DataFrame  # finished trials, one row each: dotted params, metrics, label, run_id
    missing: pd.DataFrame  # the other trials: label, status, failure
    keys: list[str]  # the grid keys, without the seed
    spec: GridSpec  # what the grid file says of its report: axes, claims, table, figures
    client: MlflowClient

    @property
    def probes(self) -> list[str]:
        """The probes the runs scored apart (their final probe_bpc.<probe>), `rest` left out,
        sorted (the store returns metrics in no fixed order)."""
        return sorted(c.split(".", 1)[1] for c in self.runs if c.startswith("probe_bpc.")
                      and c != "probe_bpc.rest")


def grid_keys(df: pd.DataFrame, spec: GridSpec) -> list[str]:
    """The grid's axes (the grid file's, else the runner's attnbench.grid_keys tag, else the
    config keys that vary), without the seed."""
    tagged = df.get(f"tags.{GRID_KEYS}", pd.Series(dtype=str)).dropna()
    keys = list(spec.grid) or list(dict.fromkeys(k for v in tagged for k in v.split(",") if k))
    if not keys:
        cfg = [c for c in df if c.startswith(("model.", "data.", "train."))]
        keys = [c for c in cfg if df[c].nunique(dropna=False) > 1]
    return [k for k in keys if k not in SEEDS and k in df]


def _label(row: pd.Series, keys: list[str], precisions: bool) -> str:
    """variant and grid values; `[precision]` where the sweep's runs ran in more than one;
    `(@commit)` for a result from other code than this checkout's, so that each is a row of its
    own in every table."""
    if pd.isna(row["model.variant"]):  # a trial that failed before logging its config
        return f"run {row['run_id'][:8]}"
    parts = [str(row["model.variant"])]
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


def _derive(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Columns the tables share: label, and what each run's layer said it is (`layer.*`, logged
    by the trainer from `Attention.describe()`): policies, heads and head widths, P_l and P_w;
    multiplies per token."""
    df = df.copy()
    if "model.variant" not in df:
        df["model.variant"] = "model"
    precisions = df.get("precision", pd.Series(dtype=object)).nunique() > 1
    df["label"] = df.apply(_label, axis=1, keys=keys, precisions=precisions)
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


def order(df: pd.DataFrame, keys: list[str], spec: GridSpec) -> pd.DataFrame:
    """Rows in the grid's own order: by its axes as the file lists them, each axis in the order
    of its values (a key the file does not list: by value), then by seed."""
    by = list(dict.fromkeys(k for k in [*keys, *SEEDS] if k in df))
    return df.sort_values(by, kind="stable", key=lambda s: _rank(spec.grid[s.name])(s)
                          if s.name in spec.grid else s)


def registered_names(df: pd.DataFrame) -> pd.DataFrame:
    """Runs as read back, with every variant and policy under its registered name: a run logged
    under an earlier name (an alias, before aliases resolved) is read as the same model."""
    df = df.copy()
    for col, to in (("model.variant", variants.canonical),
                    ("layer.span_policy", lambda v: canonical_policy("span_policy", v)),
                    ("layer.mixing", lambda v: canonical_policy("mixing", v))):
        if col in df:
            df[col] = df[col].map(lambda v, to=to: to(v) if isinstance(v, str) else v)
    return df


def load_sweep(found: SweepRuns, spec: GridSpec) -> Sweep:
    """The report's view of a sweep's runs: finished ones (with final metrics) and the rest, a
    trial rerun by a later sweep counted once (its newest finished run, else its newest)."""
    df = registered_names(found.runs)
    keys = grid_keys(df, spec)
    df = order(_derive(df, keys), keys, spec).reset_index(drop=True)
    final = df.get("final_dev_bpc", pd.Series(np.nan, df.index))
    df = df.assign(done=(df["status"] == "FINISHED") & final.notna())
    newest = df.sort_values("start_time", ascending=False, kind="stable")
    runs = newest[newest["done"]].drop_duplicates("trial").sort_index()
    missing = newest[~newest["trial"].isin(runs["trial"])].drop_duplicates("trial").sort_index()
    return Sweep(found.experiment, runs.reset_index(drop=True), missing.reset_index(drop=True),
                 keys, spec, found.client)


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
