"""The paper-style table of a sweep: one row per configuration (mean ± std over seeds), each
compared with its baseline row by the per-seed paired difference; Markdown, LaTeX and CSV."""

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.experiment.claims import num
from bench.experiment.layouts import LAYOUTS
from bench.findings.reading.runs import Sweep, machine_line, missing_lines
from bench.findings.reading.samples import as_bool, match
from bench.findings.statistics import stats
from bench.metrics import SEEDS


def si_format(x: float, ref: float | None = None) -> str:
    """42_100_000 -> '42.1M': three significant digits (as the paper's #Params and #FLOPS), in
    the unit that suits `ref` (default x), so that a std reads in its mean's unit."""
    ref = abs(x if ref is None else ref)
    div, unit = next((u for u in ((1e9, "G"), (1e6, "M"), (1e3, "K")) if ref >= u[0]), (1, ""))
    return f"{x / div:.3g}{unit}"


def baselines(first: pd.DataFrame, keys: list[str], declared: dict[str, Any] | None
              ) -> pd.Series:
    """label -> baseline label: the row with the `declared` baseline values (the grid file's
    `report: {baseline: ...}`; default: the first row's value of the grid's first axis) and the
    same other grid values, else the first row."""
    want = declared or ({keys[0]: first[keys[0]].iloc[0]} if keys else {})
    others = [k for k in keys if k not in want]
    base = first[match(first, want)]

    def pick(label: str) -> str:
        same = base[(base[others] == first.loc[label, others]).all(axis=1)] if others else base
        return same.index[0] if len(same) else first.index[0]

    return pd.Series({label: pick(label) for label in first.index})


PAIRED = ("diff", "ci_low", "ci_high", "p", "p_adj", "n_pairs")


def differences(a: pd.Series, b: pd.Series) -> np.ndarray:
    """a - b paired by index (the seed): the seeds with a value on both sides."""
    return (a - b).dropna().to_numpy(dtype=float)


def paired_tests(runs: pd.DataFrame, src: str, base: pd.Series) -> pd.DataFrame:
    """Each row against its baseline row by the per-seed paired difference (row - baseline):
    mean, 95% CI, two-sided paired t-test p and Holm-adjusted p across the table's rows."""
    seed = next((c for c in SEEDS if c in runs), None)
    per = {lab: (grp.set_index(seed) if seed else grp.reset_index(drop=True))[src]
           for lab, grp in runs.groupby("label", sort=False)}
    rows = {lab: stats.paired_t(differences(per[lab], per[b])) for lab, b in base.items()
            if lab != b}
    df = pd.DataFrame({lab: dict(zip(("diff", "ci_low", "ci_high", "p", "n_pairs"), t,
                                     strict=True)) for lab, t in rows.items()},
                      index=list(PAIRED)).T.reindex(base.index)
    df["p_adj"] = stats.holm(df["p"].astype(float))
    return df[list(PAIRED)]


def _cell(kind: str, m: float, s: float) -> str:
    """mean ± std; the std only where it is known (bpc) or nonzero (sizes, spans)."""
    if pd.isna(m):
        return "-"
    if kind == "bpc":
        return f"{m:.3f}" + (f" ± {s:.3f}" if pd.notna(s) else "")
    if kind == "floor":  # fixed by the corpus and the model's reach: no spread over seeds
        return f"{m:.3f}"
    if kind == "span":
        return f"{m:.0f}" + (f" ± {s:.1f}" if pd.notna(s) and s > 0 else "")
    if kind == "rate":  # a machine's measure: the spread over seeds is its own noise
        return si_format(m) + (f" ± {si_format(s, m)}" if pd.notna(s) else "")
    if kind == "MB":
        return f"{m:,.0f}" + (f" ± {s:,.0f}" if pd.notna(s) else "")
    return si_format(m) + (f" ± {si_format(s, m)}" if pd.notna(s) and s > 0 else "")


def probe_columns(probes: list[str]) -> list[tuple[str, str, str]]:
    """Each probe's columns: bits per answer on the whole test split (test_probe_bpc.<probe>,
    what the claims read: a claim on the dev split is refused) and the floor beside it."""
    return [col for p in probes for col in (
        (f"test {p}", f"test_probe_bpc.{p}", "bpc"), (f"{p} floor", f"probe_floor.{p}", "floor"))]


MEASURED = {"tokens_per_s": ("tokens/s", "rate"), "peak_rss_mb": ("peak RSS MB", "MB"),
            "peak_cuda_mb": ("peak CUDA MB", "MB")}


def measured_columns(runs: pd.DataFrame) -> list[tuple[str, str, str]]:
    """Throughput and memory as the runs measured them on their machine, where they recorded
    them: tokens/s, the process's peak RSS (every device) and, on CUDA, the peak allocated by
    tensors."""
    return [(head, src, kind) for src, (head, kind) in MEASURED.items()
            if src in runs and runs[src].notna().any()]


def build_table(sweep: Sweep, layout: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(numbers for the CSV, formatted cells with † markers, bold mask) with one row per
    configuration, in the columns of `layout`."""
    cols = [*LAYOUTS[layout][1], *probe_columns(sweep.probes), *measured_columns(sweep.runs)]
    runs = sweep.runs.assign(**{src: np.nan for _, src, _ in cols if src not in sweep.runs})
    g = runs.groupby("label", sort=False)
    first, n = g.first(), g.size()
    base = baselines(first, sweep.keys, sweep.report.baseline)
    nums, cells = pd.DataFrame(index=first.index), pd.DataFrame(index=first.index)
    bold = pd.DataFrame(False, index=first.index, columns=[h for h, _, _ in cols] + ["n"])
    for head, src, kind in cols:
        if kind == "text":
            nums[head] = first[src] if src != "label" else first.index
            cells[head] = nums[head].map(lambda v: "-" if pd.isna(v) else num(v))
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
        "paired seeds (the CSV has each row's mean difference, 95% CI, p and p_adj). The marks "
        "are descriptive, outside the grid's error family: its verdicts are in findings.md "
        "(docs/claims.md).")
# What a column means, said under a table only when the table has that column.
COLUMN_NOTES = {
    "#FLOPS": "#FLOPS: multiply-adds per predicted token in the adaptive-span paper's convention "
              "(4 D² + 2 D F + 2 D s per layer, without the relative-position term q.p or the "
              "cache re-projection, which are logged as flops_position and "
              "flops_cache_reprojection), at the mean span over the dev split (the paper's "
              "estimate).",
    "Multiplies/token": "Multiplies/token: multiply-adds per predicted token, fvcore-counted "
                        "where logged (q.p included), else analytic at the executed windows.",
    "FLOPs/token": "FLOPs/token: multiply-adds per predicted token, fvcore-counted where logged "
                   "(q.p included), else analytic at the executed windows.",
}
PROBE_NOTE = ("test <probe>: bits per answer on a capability probe's answers over the whole "
              "test split (test_probe_bpc.<probe>, the metric and split the claims read), beside "
              "the lowest reachable at the model's reach (<probe> floor).")
MEASURED_NOTES = {"tokens/s": "tokens/s: training throughput over all steps, as each trial "
                               "measured it beside the trials that ran with it (for what a "
                               "variant costs against its baseline, interleaved and alone: "
                               "findings.md's cost table)",
                  "peak RSS MB": "peak RSS MB: the process's peak resident memory, imports and "
                                 "data included",
                  "peak CUDA MB": "peak CUDA MB: the peak allocated by tensors on the GPU"}


def note(headers: list[str]) -> str:
    """The footnote of a table with these column headers: the shared note, then what each of
    its cost columns means, then the splits', the probe columns' and the measured columns'
    meaning where it has them."""
    parts = [NOTE, *(text for head, text in COLUMN_NOTES.items() if head in headers)]
    if splits := [h for h in ("dev", "test") if h in headers]:
        parts.append(f"{', '.join(splits)}: bits per character over the whole "
                     f"{' and '.join(splits)} split" + (" (dev chose each run's checkpoint)"
                                                        if "dev" in splits else "") + ".")
    if any(h.startswith("test ") for h in headers):
        parts.append(PROBE_NOTE)
    if measured := [text for head, text in MEASURED_NOTES.items() if head in headers]:
        parts.append("; ".join(measured) + ": measured on the machine the Machine line names, "
                     "so not comparable across machines.")
    return " ".join(parts)


DATA_COLUMNS = [f"dataset.{k}" for k in ("name", "n_bytes", "sha256", "prefix")]


def data_line(runs: pd.DataFrame) -> str:
    """What the runs trained on, from their dataset params: name, size, digest, and whether it is
    a prefix (split 90/5/5, so its numbers are not the full corpus's)."""
    if not set(DATA_COLUMNS) <= set(runs):
        return "Data: not recorded by these runs."
    parts = []
    for name, n, sha, prefix in runs[DATA_COLUMNS].drop_duplicates().itertuples(index=False):
        what = f"a {int(n):,}-byte prefix of {name}" if as_bool(prefix) else (
            f"{name} ({int(n):,} bytes)")
        parts.append(f"{what}, sha256 {str(sha)[:12]}")
    prefix = runs["dataset.prefix"].map(as_bool).any()
    note = (" Prefix results: split 90/5/5, not comparable with the papers' full-corpus "
            "numbers.") if prefix else ""
    return "Data: " + "; ".join(parts) + "." + note


def write_tables(sweep: Sweep, out_dir: Path) -> list[Path]:
    """<layout>.md (with notes and the missing trials), .tex (booktabs) and .csv, in the layout
    the grid declares (`report: {table: ...}`)."""
    layout = sweep.report.table
    title, _ = LAYOUTS[layout]
    nums, cells, bold = build_table(sweep, layout)
    missing = missing_lines(sweep)
    md = [f"# {sweep.name}: {title} (in shape)", "", data_line(sweep.runs), "",
          machine_line(sweep.runs), "", _markdown(cells, bold), "", note(list(cells.columns)), ""]
    if missing:
        md += [f"## Not finished ({len(missing)} of {len(missing) + len(sweep.runs)} trials)",
               "", *(f"- {line}" for line in missing), ""]
    paths = [out_dir / f"{layout}.{ext}" for ext in ("md", "tex", "csv")]
    paths[0].write_text("\n".join(md))
    paths[1].write_text(_latex(cells, bold, f"{sweep.name}: {title} (in shape)"))
    nums.to_csv(paths[2], index=False)
    return paths


