"""A sweep's report, read back from MLflow: the table its grid declares, its figures, and the
findings of its claims, into a folder and onto the sweep's run.

Finished trials are aggregated over seeds (mean, std, n) per configuration (the grid keys except
the seed); running or failed trials are listed. The report reads MLflow (`bench.tracking.reader`)
and the grid file, never the training code.
"""

import os
from pathlib import Path

import numpy as np
import pandas as pd

from bench.provenance import identity
from bench.tracking import reader, writer

from . import claims, stats, verdicts
from .figures import run_result, write_figures
from .runs import Sweep, load_sweep, machine_line, missing_lines
from .spec import GridSpec
from .tables import data_line, write_tables


class ReportError(RuntimeError):
    """A report that cannot be made; `code` is the CLI exit status (1 nothing finished, 2 bad
    input)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


FINDINGS_NOTE = (
    "Each test pairs runs by seed (seed k: same data order and initial weights for every "
    "variant): per seed, the claim's rows minus its baseline (compare), or the least-squares "
    "slope along the grid axis (trend, per doubling on a log2 axis). Effect: mean over seeds. "
    "Interval: the one that matches the test: the one-sided {level:.0%} bound for less / greater "
    "(a one-sided t-test against the margin), the {tost:.0%} interval for an equivalence (TOST, "
    "the larger of the two one-sided p's: the interval lies inside ±margin exactly when it "
    "rejects). p_adj: Holm-corrected across the grid's claims, a claim tested at each value of "
    "a key counting once with the largest p of its tests (it holds only if every test does), "
    "each test at its claim's Holm step. Verdict: `reproduced` when p_adj < {alpha}; "
    "`contradicted` when the test in the opposite direction (for an equivalence: the interval "
    "outside the margin) is significant after Holm across every test; `inconclusive` "
    "otherwise, with `detectable`, the smallest effect beyond the margin its seeds could have "
    "detected (80% power at the seeds' paired std, at the strictest Holm level {alpha} / "
    "claims; for an equivalence, the narrowest margin they would establish were the true "
    "difference the observed one), and `seeds`, how many seeds would detect the observed "
    "effect; or with the reason it could not be computed (a trial that did not finish, a "
    "metric the runs lack, fewer than {min_seeds} paired seeds, seeds that tie). A test whose "
    "outcome the setup decides (spans capped at S, a spread bounded by S / R) is `not tested`. "
    "A claim tested at each value of a key is reproduced when every tested test is, "
    "contradicted when one is, else inconclusive. Absence of evidence is never printed as "
    "evidence of absence.")


def head_spans(sweep: Sweep) -> pd.Series:
    """Every finished run's per-head spans from its result.json (NaN where it has none)."""
    spans = [(res := run_result(r)) and res.head_spans for _, r in sweep.runs.iterrows()]
    return pd.Series([s if s else np.nan for s in spans], index=sweep.runs.index, dtype=object)


def findings(sweep: Sweep) -> pd.DataFrame:
    """The grid's claims' tests and verdicts (`verdicts.evaluate`) on the sweep's runs."""
    runs, tested = sweep.runs, sweep.spec.claims
    if any(c.metric in claims.HEAD_SPAN_METRICS for c in tested):
        runs = runs.assign(head_spans=head_spans(sweep))
    return verdicts.evaluate(tested, runs, sweep.missing)


def interval(lo: float, hi: float) -> str:
    """The interval of a test as people read it: a one-sided bound (<= hi, >= lo) or [lo, hi]."""
    def num(v: float) -> str:
        return format(v, ".4g")

    if pd.isna(lo) or pd.isna(hi):
        return ""
    return f"≤ {num(hi)}" if np.isneginf(lo) else f"≥ {num(lo)}" if np.isposinf(hi) else (
        f"[{num(lo)}, {num(hi)}]")


def findings_markdown(table: pd.DataFrame) -> str:
    """The findings table for people: effect and the interval matching its test in the
    metric's units, corrected p's, verdict, and what an inconclusive test could detect."""
    def num(v: float, fmt: str = ".4g") -> str:
        return "" if pd.isna(v) else format(v, fmt)

    md = pd.DataFrame({
        "claim": table["claim"], "expected": table["expect"], "metric": table["metric"],
        "effect": table["effect"].map(num),
        "interval": [interval(lo, hi) for lo, hi in
                     zip(table["ci_low"], table["ci_high"], strict=True)],
        "p_adj": table["p_adj"].map(lambda v: num(v, ".3g")),
        "p_adj opposite": table["p_opposite_adj"].map(lambda v: num(v, ".3g")),
        "n": table["n"].map(lambda v: num(v, ".0f")), "verdict": table["verdict"],
        "detectable": table["detectable"].map(num),
        "seeds": table["seeds_needed"].map(lambda v: num(v, ".0f")),
        "reason": table["reason"].fillna("")})
    md = md.map(lambda v: v.replace("|", "\\|") if isinstance(v, str) else v)  # cell text
    return md.to_markdown(index=False, disable_numparse=True)


def write_findings(sweep: Sweep, out_dir: Path) -> tuple[list[Path], pd.DataFrame, str]:
    """findings.md and findings.csv (columns verdicts.COLUMNS); returns the paths, the table and
    the table as Markdown."""
    table, tested = findings(sweep), sweep.spec.claims
    md = findings_markdown(table)
    texts = [f"- `{c.id}`: {c.text}" for c in tested]
    paths = [out_dir / "findings.md", out_dir / "findings.csv"]
    paths[0].write_text("\n".join([
        f"# {sweep.name}: findings", "", data_line(sweep), "", machine_line(sweep.runs), "", md,
        "",
        FINDINGS_NOTE.format(alpha=stats.ALPHA, min_seeds=claims.MIN_SEEDS, level=1 - stats.ALPHA,
                             tost=1 - 2 * stats.ALPHA), "", "## Claims",
        "", *texts, ""]))
    table.to_csv(paths[1], index=False)
    return paths, table, md


# ---- the whole report

def load(uri: str, experiment: str, sweep: str | None = None,
         grid_file: Path | None = None) -> tuple[Sweep, reader.SweepRuns]:
    """The report's view of sweep `sweep` (default: the experiment's newest) and what the store
    holds of it; the grid file logged with the sweep, or `grid_file`, says what to report."""
    found = reader.sweep_runs(uri, experiment, identity(), sweep)
    spec = GridSpec.read(grid_file) if grid_file else GridSpec.from_text(
        found.grid_text, f"the grid file logged with {experiment}'s sweep")
    return load_sweep(found, spec), found


def render_sweep(uri: str, experiment: str, out_dir: Path, sweep: str | None = None,
                 grid_file: Path | None = None) -> list[Path]:
    """Write the report of sweep `sweep` (a parent run id; default: the experiment's newest):
    the table, figures and findings its grid declares (the grid file logged with the sweep, or
    `grid_file`), of exactly the trials it covers, under out_dir, and print the findings; log
    them as artifacts (report/) of the sweep's run, with each claim's verdict as a tag
    attnbench.claim.<id>. Raises ReportError (or reader.StoreError) when nothing can be
    reported; ConfigError for a grid file that cannot be read."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bars in logs
    data, found = load(uri, experiment, sweep, grid_file)
    spec = data.spec
    if data.runs.empty:
        status = ", ".join(f"{n} {s.lower()}" for s, n in
                           found.runs["status"].value_counts().items())
        raise ReportError(f"{experiment}: no finished trials yet ({status}) in {uri}", 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = write_tables(data, out_dir) + write_figures(data, out_dir)
    for line in missing_lines(data):
        print(f"not finished: {line}")
    verdicts = {}
    if spec.claims:
        written, table, md = write_findings(data, out_dir)
        paths += written
        print(f"\nfindings ({written[0]}):\n{md}")
        verdicts = table.set_index("claim")["verdict"].reindex([c.id for c in spec.claims])
    if found.sweep is not None:
        writer.log_report(found.client, found.sweep.info.run_id, paths, dict(verdicts))
    return paths
