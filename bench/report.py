"""Paper-style tables and figures for a sweep, read back from MLflow.

python -m bench.report ablations/span_limit.yaml          # or an experiment (grid) name
python -m bench.report span_limit --tracking-uri sqlite:///results/mlflow.db --out DIR

A grid file reports exactly its trials, with the --set, --data, --preset and --seeds the sweep
was run with (the experiment also keeps the runs of the grid's earlier configurations); an
experiment name reports every run in it.

Finished trials are aggregated over seeds (mean, std, n) per configuration (the grid keys except
the seed) into the table of the paper the grid reproduces (Markdown, booktabs LaTeX, CSV) and the
figures its runs have data for (PNG and PDF, 3.3 in wide). Running or failed trials are listed.
"""

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
import mlflow
import numpy as np
import pandas as pd
import seaborn as sns
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter
from mlflow import MlflowClient
from pydantic import ValidationError

from . import claims, plugins, stats
from .config import ConfigError
from .grid import add_trial_args, load_grid, resolve_trials
from .provenance import ROOT, identity, short_commit
from .record import RunResult
from .tracking import DATASET_KEYS, FINAL_RENAMED, stale

DEFAULT_URI = f"sqlite:///{ROOT / 'results' / 'mlflow.db'}"
SEEDS = ("seed", "train.seed")
ORDER = ("fixed", "adaptive", "dynamic", "logits-only", "weights-only", "talking-heads", "gbma")
SHORT = {"model.span": "S", "model.n_heads": "h", "model.d_model": "D", "model.n_layers": "L",
         "data.name": "data"}
DPI, WIDTH = 300, 3.3  # paper column width, inches
RC = {"font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "xtick.labelsize": 7,
      "ytick.labelsize": 7, "legend.fontsize": 6, "legend.title_fontsize": 7,
      "lines.linewidth": 1.0, "lines.markersize": 3, "pdf.fonttype": 42}
TRACE_CHARS = 40  # characters of the dynamic-span sample on the x axis of Figure 5


class ReportError(RuntimeError):
    """A report that cannot be made; `code` is the CLI exit status (1 nothing finished, 2 bad
    input)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Sweep:
    name: str
    runs: pd.DataFrame  # finished trials, one row each: dotted params, metrics, label, run_id
    missing: pd.DataFrame  # the other trials: label, status, failure
    keys: list[str]  # the grid keys, without the seed
    client: MlflowClient


# ---- reading MLflow

def _frame(found: pd.DataFrame, now: dict[str, str]) -> pd.DataFrame:
    """mlflow.search_runs' frame -> one row per run: params and metrics under their own names
    (params numeric where they parse), tags as tags.<name>, the final summaries under the names
    the tables use, and `stale`, what a run from other code than `now` ran on (tracking.stale)."""
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


def _grid_keys(df: pd.DataFrame) -> list[str]:
    """The runner's attnbench.grid_keys tag (union over runs), else the config keys that vary."""
    tagged = df.get("tags.attnbench.grid_keys", pd.Series(dtype=str)).dropna()
    keys = list(dict.fromkeys(k for v in tagged for k in v.split(",") if k))
    if not keys:
        cfg = [c for c in df if c.startswith(("model.", "data.", "train."))]
        keys = [c for c in cfg if df[c].nunique(dropna=False) > 1]
    return [k for k in keys if k not in SEEDS and k in df]


def _num(v: object) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _label(row: pd.Series, keys: list[str]) -> str:
    """variant and grid values; `(@commit)` for a result from other code than this checkout's,
    so that it is a row of its own in every table."""
    if pd.isna(row["model.variant"]):  # a trial that failed before logging its config
        return f"run {row['run_id'][:8]}"
    parts = [str(row["model.variant"])]
    parts += [f"{SHORT.get(k, k.rsplit('.', 1)[-1])}={_num(row[k])}" for k in keys
              if k != "model.variant"]
    if isinstance(row.get("stale"), str):
        parts.append(f"(@{short_commit(row['stale'])})")
    return " ".join(parts)


def _derive(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Columns the tables share: label, and what each run's layer said it is (`layer.*`, logged
    by the trainer from `Attention.describe()`): policies, heads and head widths, P_l and P_w;
    multiplies per token."""
    df = df.copy()
    if "model.variant" not in df:
        df["model.variant"] = "model"
    df["label"] = df.apply(_label, axis=1, keys=keys)
    for k in ("span_policy", "mixing", "h_k", "h", "h_v", "d_k", "d_v", "P_l", "P_w"):
        df[k] = df.get(f"layer.{k}", pd.Series(np.nan, df.index))
    for k in ("P_l", "P_w"):
        df[k] = df[k].map({True: "yes", "true": "yes", False: "-", "false": "-"})
    flops = [df[c] for c in ("flops_counted", "flops_max") if c in df]
    df["flops"] = flops[0].fillna(flops[1]) if len(flops) == 2 else (flops or [np.nan])[0]
    return df


def _sort(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    rank = {v: i for i, v in enumerate(ORDER)}
    by = list(dict.fromkeys(k for k in ["model.variant", *keys, *SEEDS] if k in df))
    return df.sort_values(by, kind="stable", key=lambda s: s.map(
        lambda v: rank.get(v, len(rank))) if s.name == "model.variant" else s)


def _store_exists(uri: str) -> None:
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        raise ReportError(f"no MLflow store at {uri.removeprefix('sqlite:///')} "
                          "(run a sweep first, or pass --tracking-uri)", 2)


def load_sweep(name: str, tracking_uri: str, trials: set[str] | None = None) -> Sweep:
    """The sweep's trial runs: finished ones (with final metrics) and the rest; only those of
    `trials` (hashes) when given, since the experiment keeps the runs of every configuration
    the grid ever had (a grid file edited since, or run with other --set/--data)."""
    _store_exists(tracking_uri)
    mlflow.set_tracking_uri(tracking_uri)  # for search_runs and load_dict
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        known = ", ".join(e.name for e in client.search_experiments()) or "none"
        raise ReportError(f"no experiment {name!r} in {tracking_uri} (known: {known})", 2)
    df = _frame(mlflow.search_runs([exp.experiment_id], max_results=50_000,
                                   output_format="pandas"), identity())
    if "tags.attnbench.role" in df:
        df = df[df["tags.attnbench.role"] != "sweep"]
    if df.empty:
        raise ReportError(f"{name}: no trial runs yet in {tracking_uri}", 1)
    keys = _grid_keys(df)
    df = _sort(_derive(df, keys), keys).reset_index(drop=True)
    final = df.get("final_dev_bpc", pd.Series(np.nan, df.index))
    trial = df.get("tags.attnbench.trial_hash", df["run_id"]).fillna(df["run_id"])
    df = df.assign(done=(df["status"] == "FINISHED") & final.notna(), trial=trial)
    if trials is not None:
        other = ~df["trial"].isin(trials)
        if other.all():
            raise ReportError(
                f"{name}: none of the grid's {len(trials)} trials has a run in {tracking_uri} "
                f"({len(df)} runs of other configurations); give bench.report the --set, "
                "--data, --preset and --seeds the sweep was run with", 1)
        if other.any():
            print(f"{name}: {other.sum()} runs of other configurations of the grid left out")
        df = df[~other]
    # a trial rerun by a later sweep has several runs: its newest finished one counts, and a trial
    # with none is missing once (its newest run says why)
    newest = df.sort_values("start_time", ascending=False, kind="stable")
    runs = newest[newest["done"]].drop_duplicates("trial").sort_index()
    missing = newest[~newest["trial"].isin(runs["trial"])].drop_duplicates("trial").sort_index()
    if runs.empty:
        status = ", ".join(f"{n} {s.lower()}" for s, n in df["status"].value_counts().items())
        raise ReportError(f"{name}: no finished trials yet ({status}) in {tracking_uri}", 1)
    return Sweep(name, runs.reset_index(drop=True), missing.reset_index(drop=True), keys, client)


def missing_lines(sweep: Sweep) -> list[str]:
    """One line per trial that did not finish: label, seed, status and the failure reason."""
    out = []
    for _, r in sweep.missing.iterrows():
        seed = next((f" seed {_num(r[s])}" for s in SEEDS if s in r and pd.notna(r[s])), "")
        why = next((r[t] for t in ("tags.attnbench.failure", "tags.attnbench.stopped")
                    if pd.notna(r.get(t))), np.nan)
        status = r["status"] if r["status"] != "FINISHED" else "FINISHED without final metrics"
        out.append(f"{r['label']}{seed}: {status}" + (f": {why}" if pd.notna(why) else ""))
    return out


# ---- tables

# (header, source column, kind); kinds: text as is, bpc (mean ± std, bold min, significance
# marker), count (K/M/G), flops (K/M/G, bold min), span (chars)
DEV, TEST = ("dev", "final_dev_bpc", "bpc"), ("test", "final_test_bpc", "bpc")
PARAMS, MODEL = ("#Params", "params", "count"), ("Model", "label", "text")
LAYOUTS = {
    "as_table1": ("Adaptive-span Table 1", [MODEL, ("#layers", "model.n_layers", "text"),
                  ("Avg. span", "mean_span", "span"), PARAMS,
                  ("#FLOPS", "flops_mean", "flops"), DEV, TEST]),
    "as_table3": ("Adaptive-span Table 3", [MODEL, ("Avg. span", "mean_span", "span"), DEV]),
    "th_table1": ("Talking-heads Table 1", [MODEL, ("h", "h", "text"), ("d_k", "d_k", "text"),
                  ("d_v", "d_v", "text"), PARAMS, ("Multiplies/token", "flops", "flops"),
                  DEV, TEST]),
    "th_table3": ("Talking-heads Table 3", [MODEL, ("P_l", "P_l", "text"), ("P_w", "P_w", "text"),
                  ("h_k", "h_k", "text"), ("h", "h", "text"), ("h_v", "h_v", "text"), PARAMS,
                  ("Multiplies/token", "flops", "flops"), DEV, TEST]),
    "generic": ("Results", [MODEL, PARAMS, ("FLOPs/token", "flops", "flops"),
                ("Avg. span", "mean_span", "span"), DEV, TEST]),
}
BY_NAME = {"span_limit": "as_table1", "adaptive_vs_dynamic": "as_table3",
           "heads_grid": "th_table1", "projections": "th_table3"}


def choose_layout(sweep: Sweep) -> str:
    """The paper table this grid reproduces: by grid name, else by what the grid varies."""
    if sweep.name in BY_NAME:
        return BY_NAME[sweep.name]
    policies, mixings = set(sweep.runs["span_policy"]), set(sweep.runs["mixing"])
    if "model.n_heads" in sweep.keys:
        return "th_table1"
    if {"adaptive", "dynamic"} <= policies:
        return "as_table3"
    if {"logits", "weights"} & mixings:
        return "th_table3"
    if "model.span" in sweep.keys or {"adaptive", "dynamic"} & policies:
        return "as_table1"
    return "generic"


def baselines(first: pd.DataFrame, keys: list[str]) -> pd.Series:
    """label -> baseline label: the multi-head `fixed` row with the same other grid values, else
    the first `fixed` row, else the first row."""
    others = [k for k in keys if k != "model.variant"]
    fixed = first[first["model.variant"] == "fixed"]

    def pick(label: str) -> str:
        same = fixed[(fixed[others] == first.loc[label, others]).all(axis=1)] if others else fixed
        return same.index[0] if len(same) else fixed.index[0] if len(fixed) else first.index[0]

    return pd.Series({label: pick(label) for label in first.index})


PAIRED = ("diff", "ci_low", "ci_high", "p", "p_adj", "n_pairs")


def paired_tests(runs: pd.DataFrame, src: str, base: pd.Series) -> pd.DataFrame:
    """Each row against its baseline row by the per-seed paired difference (row - baseline):
    mean, 95% CI, two-sided paired t-test p and Holm-adjusted p across the table's rows."""
    seed = next((c for c in SEEDS if c in runs), None)
    per = {lab: (grp.set_index(seed) if seed else grp.reset_index(drop=True))[src]
           for lab, grp in runs.groupby("label", sort=False)}
    rows = {lab: stats.paired(per[lab], per[b]) for lab, b in base.items() if lab != b}
    df = pd.DataFrame({lab: {"diff": e.effect, "ci_low": e.ci_low, "ci_high": e.ci_high,
                             "p": e.p, "n_pairs": e.n} for lab, e in rows.items()},
                      index=list(PAIRED)).T.reindex(base.index)
    df["p_adj"] = stats.holm(df["p"].astype(float))
    return df[list(PAIRED)]


def human(x: float, ref: float | None = None) -> str:
    """42_100_000 -> '42.1M': three significant digits (as the paper's #Params and #FLOPS), in
    the unit that suits `ref` (default x), so that a std reads in its mean's unit."""
    ref = abs(x if ref is None else ref)
    div, unit = next((u for u in ((1e9, "G"), (1e6, "M"), (1e3, "K")) if ref >= u[0]), (1, ""))
    return f"{x / div:.3g}{unit}"


def _cell(kind: str, m: float, s: float) -> str:
    """mean ± std; the std only where it is known (bpc) or nonzero (sizes, spans)."""
    if pd.isna(m):
        return "-"
    if kind == "bpc":
        return f"{m:.3f}" + (f" ± {s:.3f}" if pd.notna(s) else "")
    if kind == "span":
        return f"{m:.0f}" + (f" ± {s:.1f}" if pd.notna(s) and s > 0 else "")
    return human(m) + (f" ± {human(s, m)}" if pd.notna(s) and s > 0 else "")


def build_table(sweep: Sweep, layout: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(numbers for the CSV, formatted cells with † markers, bold mask) with one row per
    configuration, in the columns of `layout`."""
    _, cols = LAYOUTS[layout]
    runs = sweep.runs.assign(**{src: np.nan for _, src, _ in cols if src not in sweep.runs})
    g = runs.groupby("label", sort=False)
    first, n = g.first(), g.size()
    base = baselines(first, sweep.keys)
    nums, cells = pd.DataFrame(index=first.index), pd.DataFrame(index=first.index)
    bold = pd.DataFrame(False, index=first.index, columns=[h for h, _, _ in cols] + ["n"])
    for head, src, kind in cols:
        if kind == "text":
            nums[head] = first[src] if src != "label" else first.index
            cells[head] = nums[head].map(lambda v: "-" if pd.isna(v) else _num(v))
            continue
        mean, std = g[src].mean(), g[src].std()
        nums[f"{head} mean"], nums[f"{head} std"] = mean, std
        cells[head] = [_cell(kind, m, s) for m, s in zip(mean, std, strict=True)]
        if kind in ("bpc", "flops"):
            bold[head] = np.isclose(mean, mean.min()) & mean.notna()
        if kind == "bpc":
            tests = paired_tests(runs, src, base)
            flag = ~(tests["p_adj"] < stats.ALPHA) & (base != first.index)
            for c in PAIRED:
                nums[f"{head} {c}"] = tests[c]
            nums[f"{head} not significant"] = flag
            cells[head] = cells[head] + flag.map({True: "†", False: ""})
    nums["n"], cells["n"] = n, n.astype(str)
    nums["baseline"] = base
    return nums.reset_index(drop=True), cells.reset_index(drop=True), bold.reset_index(drop=True)


def _markdown(cells: pd.DataFrame, bold: pd.DataFrame) -> str:
    md = cells.where(~bold, "**" + cells + "**")
    return md.to_markdown(index=False, disable_numparse=True,
                          colalign=["left"] + ["right"] * (len(md.columns) - 1))


def _latex(cells: pd.DataFrame, bold: pd.DataFrame, caption: str) -> str:
    css = bold.map(lambda b: "font-weight: bold;" if b else "")
    styler = cells.style.hide(axis="index").apply(lambda _: css, axis=None)
    tex = styler.format(escape="latex").format_index(escape="latex", axis=1).to_latex(
        hrules=True, convert_css=True, caption=caption, position_float="centering",
        column_format="l" + "r" * (len(cells.columns) - 1))
    return tex.replace("±", r"$\pm$").replace("†", r"$^\dagger$")


NOTE = ("Mean ± std over n seeds; **bold**: best (lowest) in its column; †: difference from the "
        "baseline row (multi-head `fixed` at the same other settings, else the first row) not "
        "significant: paired by seed (seed k: same data order and initial weights), two-sided "
        "paired t-test, Holm-corrected across the table's rows, p_adj ≥ 0.05 or fewer than 2 "
        "paired seeds (the CSV has each row's mean difference, 95% CI, p and p_adj). "
        "#FLOPS: multiply-adds per predicted "
        "token in the adaptive-span paper's convention (4 D² + 2 D F + 2 D s per layer, "
        "without the relative-position term q.p or the cache re-projection, which are logged "
        "as flops_position and flops_cache_reprojection), at the mean span over the dev split "
        "(the paper's estimate); Multiplies/token and FLOPs/token: fvcore-counted where logged "
        "(q.p included), else analytic at the executed windows.")


def data_line(sweep: Sweep) -> str:
    """What the runs trained on, from their dataset params: name, size, digest, and whether it is
    a prefix (split 90/5/5, so its numbers are not the full corpus's)."""
    cols = [f"dataset.{k}" for k in DATASET_KEYS]
    if not set(cols) <= set(sweep.runs):
        return "Data: not recorded by these runs."
    parts = []
    for name, n, sha, prefix in sweep.runs[cols].drop_duplicates().itertuples(index=False):
        what = f"a {int(n):,}-byte prefix of {name}" if str(prefix) == "True" else (
            f"{name} ({int(n):,} bytes)")
        parts.append(f"{what}, sha256 {str(sha)[:12]}")
    prefix = sweep.runs["dataset.prefix"].astype(str).eq("True").any()
    note = (" Prefix results: split 90/5/5, not comparable with the papers' full-corpus "
            "numbers.") if prefix else ""
    return "Data: " + "; ".join(parts) + "." + note


def write_tables(sweep: Sweep, out_dir: Path) -> list[Path]:
    """<layout>.md (with notes and the missing trials), .tex (booktabs) and .csv."""
    layout = choose_layout(sweep)
    title, _ = LAYOUTS[layout]
    nums, cells, bold = build_table(sweep, layout)
    missing = missing_lines(sweep)
    md = [f"# {sweep.name}: {title} (in shape)", "", data_line(sweep), "", _markdown(cells, bold),
          "", NOTE, ""]
    if missing:
        md += [f"## Not finished ({len(missing)} of {len(missing) + len(sweep.runs)} trials)",
               "", *(f"- {line}" for line in missing), ""]
    paths = [out_dir / f"{layout}.{ext}" for ext in ("md", "tex", "csv")]
    paths[0].write_text("\n".join(md))
    paths[1].write_text(_latex(cells, bold, f"{sweep.name}: {title} (in shape)"))
    nums.to_csv(paths[2], index=False)
    return paths


# ---- figures

def _pick(runs: pd.DataFrame, mask: pd.Series) -> pd.Series | None:
    """The run with the largest span limit / most heads (lowest seed) among `mask`."""
    sub = runs[mask]
    by = [c for c in ("model.span", "model.n_heads") if c in sub]
    return None if sub.empty else sub.sort_values(by, ascending=False, kind="stable").iloc[0]


def _result(sweep: Sweep, run: pd.Series | None) -> RunResult | None:
    """The trial's run record (its result.json artifact); None when absent or not a record."""
    if run is None:
        return None
    try:
        return RunResult.from_dict(mlflow.artifacts.load_dict(f"runs:/{run['run_id']}/result.json"))
    except Exception:  # noqa: BLE001  (no artifact, or another kind: the figure is skipped)
        return None


def fig_span_limit(sweep: Sweep, fig: Figure) -> bool:
    """Adaptive-span Figure 3: dev bpc, average span and #FLOPS (the paper's convention and
    estimate, at the mean span) against the span limit S, one line per variant, mean and std
    over seeds."""
    r = sweep.runs
    if "model.span" not in sweep.keys or r["model.span"].nunique() < 2:
        return False
    S = sorted(r["model.span"].unique())
    panels = (("final_dev_bpc", "dev bpc (bits/char)"), ("mean_span", "avg. span (chars)"),
              ("flops_mean", "#FLOPS per token"))
    axes = fig.subplots(3, 1, sharex=True)
    for i, (ax, (y, ylabel)) in enumerate(zip(axes, panels, strict=True)):
        if y in r:
            sns.lineplot(r, x="model.span", y=y, hue="model.variant", marker="o", errorbar="sd",
                         ax=ax, legend=i == 0)
        ax.set(ylabel=ylabel, xscale="log", xlabel="span limit S (chars)")
        ax.set_xticks(S, labels=[_num(s) for s in S])
        ax.minorticks_off()
    if "floor_bpc" in r and r["floor_bpc"].notna().any():  # the lowest bpc each S can reach
        floor = r.groupby("model.span")["floor_bpc"].first()
        axes[0].plot(floor.index, floor.values, color="0.3", linestyle="--", marker="_",
                     label="floor_bpc")
    axes[2].yaxis.set_major_formatter(EngFormatter(sep=""))
    if axes[0].get_legend():
        axes[0].legend(title=None)
    return True


def fig_head_spans(sweep: Sweep, fig: Figure) -> bool:
    """Adaptive-span Figure 4: the final span of every head, by layer (log scale)."""
    run = _pick(sweep.runs, sweep.runs["span_policy"] == "adaptive")
    spans = (result := _result(sweep, run)) and result.head_spans
    if not spans:
        return False
    df = pd.DataFrame([(layer + 1, h, s) for layer, heads in enumerate(spans)
                       for h, s in enumerate(heads)], columns=["layer", "head", "span"])
    planted = _planted(run)
    ax = fig.subplots()
    sns.barplot(df, x="layer", y="span", hue="head", palette="crest", legend=False, ax=ax)
    # the axis spans powers of 2 from below half the shortest span or planted distance (so every
    # bar and line shows) to above the longest span
    low, high = np.log2(min([df["span"].min(), *planted]) / 2), np.log2(df["span"].max())
    ticks = 2 ** np.arange(np.floor(low), np.ceil(high) + 1)
    ax.set(yscale="log", ylim=(ticks[0], ticks[-1]), ylabel="span (chars, log)", xlabel="layer",
           title=f"{run['label']}, seed {_num(run.get('seed', 0))}: one bar per head")
    ax.set_yticks(ticks, labels=[f"{t:g}" for t in ticks])
    ax.minorticks_off()
    for d in planted:  # the corpus's dependencies: where spans that pay should stop
        ax.axhline(d, color="0.4", linestyle=":", linewidth=0.8)
        ax.annotate(f"d={d}", (1, d), xycoords=("axes fraction", "data"), fontsize=5,
                    ha="right", va="bottom", color="0.3")
    return True


def _planted(run: pd.Series) -> list[int]:
    """The copy distances planted in the run's corpus (from its config.json; [] for real text)."""
    try:
        info = mlflow.artifacts.load_dict(f"runs:/{run['run_id']}/config.json")
    except Exception:  # noqa: BLE001  (no artifact: no reference lines)
        return []
    return list(info.get("dataset", {}).get("distances") or [])


def _char(c: str) -> str:
    return {" ": "␣", "\n": "↵", "\t": "→"}.get(c, c)


def fig_dynamic_span(sweep: Sweep, fig: Figure) -> bool:
    """Adaptive-span Figure 5: the dynamic span z_t + R (mean over layers and heads) along a
    text."""
    run = _pick(sweep.runs, sweep.runs["span_policy"] == "dynamic")
    trace = (result := _result(sweep, run)) and result.dynamic_trace
    if not trace:
        return False
    text, z = trace["text"][:TRACE_CHARS], trace["z"][:TRACE_CHARS]
    ax = fig.subplots()
    ax.plot(range(len(z)), z, marker="o")
    ax.set_xticks(range(len(text)), labels=[_char(c) for c in text], family="monospace",
                  fontsize=6)
    ax.set(xlim=(-0.5, len(text) - 0.5), xlabel="input character",
           ylabel=r"avg. span $z_t + R$ (chars)", title=run["label"])
    ax.grid(axis="x", visible=False)
    return True


def identity_distance(m: np.ndarray) -> float:
    """||P - I|| / ||I|| (Frobenius; I rectangular for h_in != h_out): 0 at the default start,
    about 1 or more for a matrix with no diagonal structure."""
    eye = np.eye(*m.shape)
    return float(np.linalg.norm(m - eye) / np.linalg.norm(eye))


def fig_mixing(sweep: Sweep, fig: Figure) -> bool:
    """Talking-heads Figure 1: P_l, P_w and P_l.P_w of one layer, each scaled to [-1, 1], with
    each matrix's distance from the identity under it and, in the caption, the start they were
    trained from (identity + noise by default, `mix_init=random` otherwise)."""
    run = _pick(sweep.runs, sweep.runs["mixing"] == "both")
    result = _result(sweep, run)
    layers = [m for m in (result.mixing if result else []) if {"P_l", "P_w"} <= set(m)]
    if not layers:
        return False
    P_l, P_w = np.array(layers[-1]["P_l"]), np.array(layers[-1]["P_w"])
    axes = fig.subplots(1, 3)
    mats = ((r"$P_l$", P_l, "h_k", "h"), (r"$P_w$", P_w, "h", "h_v"),
            (r"$P_l P_w$", P_l @ P_w, "h_k", "h_v"))
    for i, (ax, (title, m, ylabel, xlabel)) in enumerate(zip(axes, mats, strict=True)):
        sns.heatmap(m / np.abs(m).max(), ax=ax, cmap="RdBu_r", vmin=-1, vmax=1, square=True,
                    cbar=i == 2, xticklabels=False, yticklabels=False)
        ax.set(title=title, ylabel=f"${ylabel}$ (heads)")
        ax.set_xlabel(f"${xlabel}$ (heads)\n$\\|P-I\\|/\\|I\\|$ = {identity_distance(m):.2f}",
                      fontsize=5)
    init = run.get("model.attn.mix_init")
    init = "identity" if pd.isna(init) else init
    start = ("identity + noise, the default: a fresh layer is multi-head" if init == "identity"
             else f"{init} (mix_init={init})")
    fig.suptitle(f"{run['label']}, last layer\ntrained from {start}", fontsize=5)
    return True


def _history(sweep: Sweep) -> pd.DataFrame:
    keys = ("dev_bpc", "tokens", "train_time_s")
    frames = []
    for _, r in sweep.runs.iterrows():
        cols = {k: {m.step: m.value for m in sweep.client.get_metric_history(r["run_id"], k)}
                for k in keys}
        frames.append(pd.DataFrame(cols, columns=list(keys)).assign(run=r["run_id"],
                                                                    label=r["label"]))
    return pd.concat(frames).dropna()


def fig_curves(sweep: Sweep, fig: Figure) -> bool:
    """Learning curves: dev bpc against training tokens and against wall time, every seed. The
    evaluations during training read the first `train.eval_tokens` dev characters when that is
    set (the final dev bpc reads all of them), and the axis says so."""
    h = _history(sweep)
    if h.empty:
        return False
    n = sweep.runs.get("train.eval_tokens", pd.Series(dtype=float)).dropna().unique()
    ylabel = f"dev bpc, first {_num(n[0])} chars" if len(n) == 1 else "dev bpc (bits/char)"
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (x, xlabel) in zip(axes, (("tokens", "training tokens"),
                                      ("train_time_s", "wall time (s)")), strict=True):
        sns.lineplot(h, x=x, y="dev_bpc", hue="label", units="run", estimator=None,
                     marker="o", ax=ax, legend=ax is axes[0])
        ax.set(xlabel=xlabel, ylabel=ylabel)
    axes[0].xaxis.set_major_formatter(EngFormatter(sep=""))
    handles, labels = axes[0].get_legend_handles_labels()
    axes[0].get_legend().remove()
    for ncols in (3, 2, 1):  # as many columns as fit the figure's width, one at the least
        legend = fig.legend(handles, labels, loc="outside lower center", ncols=ncols,
                            frameon=False)
        if ncols == 1 or legend.get_window_extent(fig.canvas.get_renderer()).width <= \
                fig.bbox.width:
            break
        legend.remove()
    return True


FIGURES = {  # stem: (height in inches at WIDTH, drawing function)
    "as_fig3_span_limit": (4.2, fig_span_limit), "as_fig4_head_spans": (1.8, fig_head_spans),
    "as_fig5_dynamic_span": (1.6, fig_dynamic_span), "th_fig1_mixing": (1.8, fig_mixing),
    "learning_curves": (2.4, fig_curves),
}


def write_figures(sweep: Sweep, out_dir: Path) -> list[Path]:
    """Every figure the runs have data for, as PNG (DPI) and PDF."""
    paths = []
    for stem, (height, draw) in FIGURES.items():
        with sns.axes_style("whitegrid"), mpl.rc_context(RC):
            fig = Figure(figsize=(WIDTH, height), layout="constrained")
            FigureCanvasAgg(fig)
            if not draw(sweep, fig):
                continue
            for ext in ("png", "pdf"):
                paths.append(out_dir / f"{stem}.{ext}")
                fig.savefig(paths[-1], dpi=DPI)
    return paths


# ---- findings: the grid's claims computed from the runs

FINDINGS_NOTE = (
    "Each test pairs runs by seed (seed k: same data order and initial weights for every "
    "variant): per seed, the claim's rows minus its baseline (compare), or the least-squares "
    "slope along the grid axis (trend, per doubling on a log2 axis). Effect: mean over seeds, "
    "with its 95% t interval; p: one-sided t-test against the margin (less / greater), or TOST "
    "(equivalent: the larger of the two one-sided p's); p_adj: Holm-corrected across the "
    "grid's claims, a claim tested at each value of a key counting once with the largest p of "
    "its tests (it holds only if every test does), each test at its claim's Holm step. "
    "Verdict: `reproduced` when p_adj < {alpha}; `not reproduced` otherwise; "
    "`inconclusive` when a test cannot be computed (a trial that did not finish, a metric the "
    "runs lack, fewer than {min_seeds} paired seeds). A claim tested at each value of a key "
    "is reproduced when every test is, not reproduced when one is not.")


def grid_claims(sweep: Sweep, grid_file: Path | None, parent_run_id: str | None
                ) -> list[claims.Claim]:
    """The claims of `grid_file`, else of the grid file logged with the sweep's run (the given
    one, else the experiment's newest sweep run); [] when there is none."""
    if grid_file is None:
        if parent_run_id is None:
            exp = sweep.client.get_experiment_by_name(sweep.name)
            newest = sweep.client.search_runs([exp.experiment_id],
                                              "tags.`attnbench.role` = 'sweep'", max_results=1,
                                              order_by=["attributes.start_time DESC"])
            parent_run_id = newest[0].info.run_id if newest else None
        logged = [a.path for a in sweep.client.list_artifacts(parent_run_id)
                  if a.path.endswith((".yaml", ".yml"))] if parent_run_id else []
        if not logged:
            return []
        raw = yaml.safe_load(mlflow.artifacts.load_text(f"runs:/{parent_run_id}/{logged[0]}"))
    else:
        raw = yaml.safe_load(grid_file.read_text())
    return claims.parse((raw or {}).get("claims") if isinstance(raw, dict) else None)


def head_spans(sweep: Sweep) -> pd.Series:
    """Every finished run's per-head spans from its result.json (NaN where it has none)."""
    spans = [(res := _result(sweep, r)) and res.head_spans for _, r in sweep.runs.iterrows()]
    return pd.Series([s if s else np.nan for s in spans], index=sweep.runs.index, dtype=object)


def findings(sweep: Sweep, tested: list[claims.Claim]) -> pd.DataFrame:
    """The claims' tests and verdicts (bench.claims.evaluate) on the sweep's runs."""
    runs = sweep.runs
    if any(c.metric in claims.HEAD_SPAN_METRICS for c in tested):
        runs = runs.assign(head_spans=head_spans(sweep))
    return claims.evaluate(tested, runs, sweep.missing)


def findings_markdown(table: pd.DataFrame) -> str:
    """The findings table for people: effect and CI in the metric's units, p's, verdict."""
    def num(v: float, fmt: str = ".4g") -> str:
        return "" if pd.isna(v) else format(v, fmt)

    md = pd.DataFrame({
        "claim": table["claim"], "expected": table["expect"], "metric": table["metric"],
        "effect": table["effect"].map(num),
        "95% CI": [f"[{num(lo)}, {num(hi)}]" if pd.notna(lo) else ""
                   for lo, hi in zip(table["ci_low"], table["ci_high"], strict=True)],
        "p": table["p"].map(lambda v: num(v, ".3g")),
        "p_adj": table["p_adj"].map(lambda v: num(v, ".3g")),
        "n": table["n"].map(lambda v: num(v, ".0f")), "verdict": table["verdict"],
        "reason": table["reason"].fillna("")})
    md = md.map(lambda v: v.replace("|", "\\|") if isinstance(v, str) else v)  # cell text
    return md.to_markdown(index=False, disable_numparse=True)


def write_findings(sweep: Sweep, tested: list[claims.Claim], out_dir: Path
                   ) -> tuple[list[Path], pd.DataFrame, str]:
    """findings.md and findings.csv (columns claims.COLUMNS); returns the paths, the table and
    the table as Markdown."""
    table = findings(sweep, tested)
    md = findings_markdown(table)
    texts = [f"- `{c.id}`: {c.text}" for c in tested]
    paths = [out_dir / "findings.md", out_dir / "findings.csv"]
    paths[0].write_text("\n".join([
        f"# {sweep.name}: findings", "", data_line(sweep), "", md, "",
        FINDINGS_NOTE.format(alpha=stats.ALPHA, min_seeds=claims.MIN_SEEDS), "", "## Claims",
        "", *texts, ""]))
    table.to_csv(paths[1], index=False)
    return paths, table, md


# ---- entry points

def render_sweep(grid_name: str, tracking_uri: str, out_dir: Path,
                 parent_run_id: str | None = None, grid_file: Path | None = None,
                 trials: set[str] | None = None) -> list[Path]:
    """Write the sweep's table, figures and findings (the grid's claims, from `grid_file` or
    the grid file logged with the sweep) under out_dir and print the findings; log them as
    artifacts (report/) of the parent run when given, with each claim's verdict as a tag
    attnbench.claim.<id>. Only the runs of `trials` (hashes) when given, else every run of the
    experiment. Raises ReportError when nothing can be reported."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bars in logs
    sweep = load_sweep(grid_name, tracking_uri, trials)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = write_tables(sweep, out_dir) + write_figures(sweep, out_dir)
    for line in missing_lines(sweep):
        print(f"not finished: {line}")
    verdicts = {}
    try:
        tested = grid_claims(sweep, grid_file, parent_run_id)
    except (OSError, yaml.YAMLError, ValidationError) as err:
        print(f"findings: the grid's claims could not be read ({err})", file=sys.stderr)
        tested = []
    if tested:
        written, table, md = write_findings(sweep, tested, out_dir)
        paths += written
        print(f"\nfindings ({written[0]}):\n{md}")
        verdicts = table.set_index("claim")["verdict"].reindex([c.id for c in tested]).to_dict()
    if parent_run_id:
        for p in paths:
            sweep.client.log_artifact(parent_run_id, str(p), "report")
        for cid, verdict in verdicts.items():
            sweep.client.set_tag(parent_run_id, f"attnbench.claim.{cid}", verdict)
    return paths


def grid_name(target: str) -> str:
    """A grid file's `name` (else its stem), or the argument itself as the experiment name."""
    path = Path(target)
    if path.suffix not in (".yaml", ".yml"):
        return target
    if not path.is_file():
        raise ReportError(f"grid file {target} not found", 2)
    grid = yaml.safe_load(path.read_text()) or {}
    return str(grid.get("name") or path.stem) if isinstance(grid, dict) else path.stem


def grid_trials(grid_file: Path | None, args: argparse.Namespace) -> set[str] | None:
    """The hashes of the trials a grid file defines under the sweep's --set, --data, --preset
    and --seeds, as bench.run computes them (None without a grid file: every run)."""
    if grid_file is None:
        return None
    return {t.hash for t in resolve_trials(load_grid(grid_file), args, dry_run=True)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n")[0])
    p.add_argument("target", help="grid YAML (its name) or an MLflow experiment name")
    p.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI))
    p.add_argument("--out", type=Path, help="output folder (default results/<grid>/)")
    add_trial_args(p)
    args = p.parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        plugins.load(plugins.from_grid(args.target))
        name = grid_name(args.target)
        grid_file = Path(args.target) if Path(args.target).suffix in (".yaml", ".yml") else None
        paths = render_sweep(name, args.tracking_uri, args.out or ROOT / "results" / name,
                             grid_file=grid_file, trials=grid_trials(grid_file, args))
    except ConfigError as err:
        print(f"bench.report: {err}", file=sys.stderr)
        return 2
    except ReportError as err:
        print(f"bench.report: {err}", file=sys.stderr)
        return err.code
    except plugins.PluginError as err:
        print(f"bench.report: {err}", file=sys.stderr)
        return 2
    print("wrote", *map(str, paths), sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
