"""The figures of a sweep, drawn from its runs with seaborn: first the one that answers its
claims (`fig_claims`: each seed's value of a claim's metric, paired across the variants at each
setting, with the verdicts), then the ones `layouts.FIGURES` names, at the paper's column width:
adaptive-span Figures 3, 4 and 5, talking-heads Figure 1, learning curves."""

import json
from collections.abc import Callable, Mapping
from itertools import product
from pathlib import Path

import matplotlib as mpl
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from bench.experiment.claims import Claim, num
from bench.experiment.layouts import CLAIMS_FIGURE, FIGURES, display_name
from bench.findings.reading.runs import SHORT, Sweep, run_result
from bench.metrics import SEEDS
from bench.tracking import reader

DPI, WIDTH = 300, 3.3  # paper column width, inches
RC = {"font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "xtick.labelsize": 7,
      "ytick.labelsize": 7, "legend.fontsize": 6, "legend.title_fontsize": 7,
      "lines.linewidth": 1.0, "lines.markersize": 3, "pdf.fonttype": 42}
TRACE_CHARS = 40  # characters of the dynamic-span sample on the x axis of Figure 5
PANEL = 1.6  # inches: the claims figure's width per setting, its height per metric


def _pick(runs: pd.DataFrame, mask: pd.Series) -> pd.Series | None:
    """The run with the largest span limit / most heads (lowest seed) among `mask`."""
    sub = runs[mask]
    by = [c for c in ("model.span", "model.n_heads") if c in sub]
    return None if sub.empty else sub.sort_values(by, ascending=False, kind="stable").iloc[0]


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
        ax.set_xticks(S, labels=[num(s) for s in S])
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
    spans = (result := run_result(run)) and result.head_spans
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
           title=f"{run['label']}, seed {num(run.get('seed', 0))}: one bar per head")
    ax.set_yticks(ticks, labels=[f"{t:g}" for t in ticks])
    ax.minorticks_off()
    for d in planted:  # the corpus's dependencies: where spans that pay should stop
        ax.axhline(d, color="0.4", linestyle=":", linewidth=0.8)
        ax.annotate(f"d={d}", (1, d), xycoords=("axes fraction", "data"), fontsize=5,
                    ha="right", va="bottom", color="0.3")
    return True


def _planted(run: pd.Series) -> list[int]:
    """The distances the run's corpus says it planted (param dataset.planted; [] for real
    text or a run that did not log it)."""
    logged = run.get("dataset.planted")
    return json.loads(logged) if isinstance(logged, str) else []


def _char(c: str) -> str:
    return {" ": "␣", "\n": "↵", "\t": "→"}.get(c, c)


def fig_dynamic_span(sweep: Sweep, fig: Figure) -> bool:
    """Adaptive-span Figure 5: the dynamic span z_t + R (mean over layers and heads) along a
    text."""
    run = _pick(sweep.runs, sweep.runs["span_policy"] == "dynamic-span")
    trace = (result := run_result(run)) and result.dynamic_trace
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
    result = run_result(run)
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
    """Every run's evaluations, long: tokens, label, run, series (`total` and each probe's) and
    the dev bpc of that series."""
    series = {"dev_bpc": "total", **{f"dev_bpc.{p}": p for p in sweep.probes}}
    frames = [reader.history(sweep.client, r["run_id"], ("tokens", *series)).assign(
        run=r["run_id"], label=r["label"]) for _, r in sweep.runs.iterrows()]
    wide = pd.concat(frames)
    return wide.melt(["tokens", "label", "run"], list(series), "series", "bpc").assign(
        series=lambda d: d["series"].map(series)).dropna()


def fig_curves(sweep: Sweep, fig: Figure) -> bool:
    """Learning curves: dev bpc against training tokens, one line per setting with its seeds'
    spread (std) as a band, the total and, beside it, each probe's bpc on its own target
    symbols, with the floor of the model's reach dashed. The evaluations during training read
    the first `train.eval_tokens` dev characters when that is set (the final dev bpc reads all
    of them), and the axis says so."""
    h = _history(sweep)
    if h.empty:
        return False
    n = sweep.runs.get("train.eval_tokens", pd.Series(dtype=float)).dropna().unique()
    ylabel = f"dev bpc, first {num(n[0])} chars" if len(n) == 1 else "dev bpc (bits/char)"
    panels = ["total", *sweep.probes]
    cols = min(2, len(panels))
    rows = -(-len(panels) // cols)
    fig.set_size_inches(WIDTH, 0.9 + 1.5 * rows)
    axes = fig.subplots(rows, cols, sharex=True, squeeze=False).ravel()
    for ax, panel in zip(axes, panels, strict=False):
        if not (h["series"] == panel).any():
            _no_data(ax)
            continue
        sns.lineplot(h[h["series"] == panel], x="tokens", y="bpc", hue="label",
                     hue_order=list(dict.fromkeys(sweep.runs["label"])), errorbar="sd",
                     marker="o", markersize=2, ax=ax, legend=ax is axes[0])
        floor = sweep.runs.get("floor_bpc" if panel == "total" else f"probe_floor.{panel}")
        if floor is not None and floor.nunique() == 1:
            ax.axhline(floor.iloc[0], color="0.3", linestyle="--", linewidth=0.8)
        ax.set(xlabel="training tokens", ylabel=ylabel if panel == "total" else
               f"{panel} answers", title=panel if len(panels) > 1 else None)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    for ax in axes[len(panels):]:
        ax.remove()
    handles, labels = axes[0].get_legend_handles_labels()
    if axes[0].get_legend():  # none where the total had no data
        axes[0].get_legend().remove()
    for ncols in (3, 2, 1):  # as many columns as fit the figure's width, one at the least
        legend = fig.legend(handles, labels, loc="outside lower center", ncols=ncols,
                            frameon=False)
        if ncols == 1 or legend.get_window_extent(fig.canvas.get_renderer()).width <= \
                fig.bbox.width:
            break
        legend.remove()
    return True


def _no_data(ax) -> None:
    """A panel whose setting has no finished trial (a cut sweep's partial report): said so
    on it, where a plot would raise."""
    ax.text(0.5, 0.5, "no finished trial", transform=ax.transAxes, ha="center", va="center",
            fontsize=6, color="0.4")


def _paired_key(sweep: Sweep) -> str | None:
    """The grid key whose values a claim compares within a seed: the first a claim's baseline
    changes, else the variant; None where the grid does not vary it."""
    key = next((k for c in sweep.claims for k in c.baseline or {}), "model.variant")
    return key if key in sweep.keys and sweep.runs[key].nunique() > 1 else None


def _log_scale(ax, claims: list[Claim], values: pd.Series) -> str:
    """The y axis on the claims' own scale, log(y + c), where they test one (`log_offset`),
    ticked at 0 and the powers of ten above c up to the values' largest; else linear. Returns
    the scale in words."""
    c = next((c.log_offset for c in claims if c.log_offset), None)
    if c is None:
        return "linear"
    ax.set_yscale("function", functions=(lambda y: np.log(np.maximum(y + c, c / 10)),
                                         lambda z: np.exp(z) - c))
    top = max(values.max(), c)
    ticks = [0.0, *10.0 ** np.arange(np.ceil(np.log10(c)), np.floor(np.log10(top)) + 1)]
    ax.set_ylim(0, (top + c) * 1.3 - c)
    ax.set_yticks(ticks, labels=[f"{t:g}" for t in ticks])
    ax.minorticks_off()
    return f"log(y + {c:g})"


def fig_claims(sweep: Sweep, fig: Figure, verdicts: Mapping[str, str]) -> bool:
    """The figure that answers the grid's claims: each seed's value of a claim's metric (a row
    of panels per metric), paired across the values of the key the claims compare (the
    variants, as the paper's table names them) at each setting of the other axes (a panel
    each), a line per seed; under them each claim's verdict (`verdicts`: claim id -> words)."""
    key, runs = _paired_key(sweep), sweep.runs
    metrics = [m for m in dict.fromkeys(c.metric for c in sweep.claims) if m in runs]
    seed = next((s for s in SEEDS if s in runs), None)
    if key is None or not metrics or seed is None:
        return False
    pairs = [v for v in sweep.axes.get(key, runs[key].unique()) if (runs[key] == v).any()]
    others = [k for k in sweep.keys if k != key]
    settings = [dict(zip(others, vs, strict=True)) for vs in product(
        *(sweep.axes.get(k, sorted(runs[k].unique())) for k in others))]
    fig.set_size_inches(max(WIDTH, PANEL * len(settings)),
                        PANEL * len(metrics) + 0.3 + 0.12 * len(sweep.claims))
    axes = fig.subplots(len(metrics), len(settings), squeeze=False, sharey="row")
    scale = "linear"
    for row, metric in zip(axes, metrics, strict=True):
        for ax, at in zip(row, settings, strict=True):
            cell = runs[np.logical_and.reduce([runs[k] == v for k, v in at.items()] or
                                              [np.ones(len(runs), bool)])]
            cell = cell.assign(x=cell[key].map({v: i for i, v in enumerate(pairs)})).dropna(
                subset=["x", metric])
            if cell.empty:  # a cut sweep: no trial of this setting finished (seaborn's
                _no_data(ax)  # lineplot raises on an empty frame)
            else:
                sns.lineplot(cell, x="x", y=metric, units=seed, estimator=None, color="0.6",
                             linewidth=0.6, ax=ax)
                sns.scatterplot(cell, x="x", y=metric, hue=key, hue_order=pairs, legend=False,
                                ax=ax, zorder=3)
            ax.set_xticks(range(len(pairs)), rotation=20, labels=[
                display_name(num(v), sweep.report.table) for v in pairs])
            ax.set(xlim=(-0.4, len(pairs) - 0.6), xlabel=None, ylabel=metric,
                   title=", ".join(f"{SHORT.get(k, k.rsplit('.', 1)[-1])}={num(v)}"
                                   for k, v in at.items()) or None)
            if runs[metric].notna().any():
                scale = _log_scale(ax, [c for c in sweep.claims if c.metric == metric],
                                   runs[metric])
    lines = [f"{i}. {c.id}: {verdicts.get(c.id, 'not judged')}"
             for i, c in enumerate(sweep.claims, 1)]
    fig.supxlabel("\n".join([f"a line per seed; y on the claims' scale, {scale}", *lines]),
                  fontsize=6, ha="left", x=0.02)
    return True


# The figures a grid may name (`layouts.FIGURES`, read without matplotlib by the grid check),
# each drawn by its function: a name without one fails the test that compares the two lists.
DRAW: dict[str, Callable[[Sweep, Figure], bool]] = {
    "span_limit": fig_span_limit, "head_spans": fig_head_spans,
    "dynamic_span": fig_dynamic_span, "mixing": fig_mixing, "curves": fig_curves}


def _save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    paths = [out_dir / f"{stem}.{ext}" for ext in ("png", "pdf")]
    for path in paths:
        fig.savefig(path, dpi=DPI)
    return paths


def write_figures(sweep: Sweep, out_dir: Path, verdicts: Mapping[str, str]) -> list[Path]:
    """The claims' figure (`fig_claims`, with `verdicts`), then the figures the grid declares
    (`report: {figures: [...]}`; none declared: every figure) that the runs have data for, as
    PNG (DPI) and PDF."""
    paths = []
    with sns.axes_style("whitegrid"), mpl.rc_context(RC):
        fig = Figure(layout="constrained")
        FigureCanvasAgg(fig)
        if fig_claims(sweep, fig, verdicts):
            paths += _save(fig, out_dir, CLAIMS_FIGURE)
    for name in sweep.report.figures or list(FIGURES):
        stem, height = FIGURES[name]
        with sns.axes_style("whitegrid"), mpl.rc_context(RC):
            fig = Figure(figsize=(WIDTH, height), layout="constrained")
            FigureCanvasAgg(fig)
            if not DRAW[name](sweep, fig):
                if sweep.report.figures:  # declared, so say why it is missing
                    print(f"figure {name}: the runs have no data for it")
                continue
            paths += _save(fig, out_dir, stem)
    return paths


# ---- findings: the grid's claims computed from the runs
