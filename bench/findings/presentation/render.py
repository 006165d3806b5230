"""A sweep's report, read back from MLflow: the table its grid declares, its figures, and the
findings of its claims, into a folder and onto the sweep's run.

Finished trials are aggregated over seeds (mean, std, n) per configuration (the grid keys except
the seed); running or failed trials are listed. The report reads MLflow (`bench.tracking.reader`)
and the grid file, never the training code.
"""

import json
import os
import shlex
from pathlib import Path

import pandas as pd

from bench.experiment.claims import METRICS, PROBE_METRIC
from bench.experiment.grid import Grid
from bench.experiment.open import GridText, open_grid, read_grid_text
from bench.findings.provenance.judge import judge
from bench.findings.provenance.shared import shared_line
from bench.findings.reading import measurement, perseed
from bench.findings.reading.records import CODE, PLANS, RECORDS
from bench.findings.reading.runs import (
    Sweep,
    claim_runs,
    code_records,
    csv_sweep,
    load_sweep,
    missing_lines,
    plan_records,
)
from bench.metrics import SEEDS
from bench.provenance import identity
from bench.tracking import reader, writer

from . import costs
from .figures import write_figures
from .page import Local, findings_markdown, page_text, place
from .runpage import said, sweep_page
from .tables import DATA_COLUMNS, write_tables

# what changes the plan a grid file states, on bench.run's command line
OVERRIDES = ("--set", "--preset", "--data", "--seeds", "--seed-start")


def ran_as(command: str | None) -> str:
    """The leading comment of a run's copy of its grid file (grid.yaml): the command line it
    ran from, where an option there changed what the file plans (a corpus, a size, the seeds:
    what the copy alone cannot say; `--data enwik8` and the file's synthetic corpus read alike),
    else ''. A comment: what the copy plans, and its plan's hash, are the file's."""
    words = shlex.split(command or "")
    return f"# ran as: {command}\n" if any(w.split("=")[0] in OVERRIDES for w in words) else ""


class ReportError(RuntimeError):
    """A report that cannot be made; `code` is the CLI exit status (1 nothing finished, 2 bad
    input)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def per_seed(sweep: Sweep, runs: pd.DataFrame) -> pd.DataFrame:
    """runs.csv: one row per finished run: grid keys, seed, trial hash, precision, machine
    (cpu, gpu: what a table regenerated from it names), the plan and code records
    (`records.RECORDS`), every final metric and what the claims read, enough to recompute
    findings.csv (`verdicts.verdict_table` over it gives the same table) and the paper-style
    table (`findings_from_runs_csv`)."""
    metrics = sorted(c for c in runs if c in METRICS or PROBE_METRIC.match(c)
                     or c.startswith(("layer.", "dataset.planted", "dataset.no_recall")))
    keys = [k for k in [*sweep.axes, *SEEDS, "trial", "precision", "cpu_capability", "cpu", "gpu",
                        *DATA_COLUMNS, "model.span", "floor_bpc", "head_spans", "start_time",
                        *RECORDS] if k in runs]
    out = runs[list(dict.fromkeys([*keys, *metrics]))].copy()
    if "head_spans" in out:
        out["head_spans"] = out["head_spans"].map(
            lambda v: json.dumps(v) if isinstance(v, list) else v)
    return out


def write_findings(grid: Grid, runs: pd.DataFrame, missing: pd.DataFrame, out_dir: Path,
                   grid_file: Path | None, cost: pd.DataFrame | None = None
                   ) -> tuple[list[Path], pd.DataFrame, str]:
    """findings.md and findings.csv (columns verdicts.COLUMNS): the grid's claims' verdicts
    (`verdicts.verdict_table`) on `runs` as `claim_runs` gives them (what runs.csv holds: a test
    recomputes every committed findings.csv from it), with whether `grid_file` pre-registered
    them (`prereg`) and which results beside out_dir share its trials (`shared_line`), and,
    where `cost` (cost.csv) was measured, the cost block at the end (`costs.block`); returns
    the paths, the table and the table as Markdown."""
    judged = judge(grid, runs, missing, grid_file, cost=cost)
    table = judged.table
    md = findings_markdown(table)
    paths = [out_dir / "findings.md", out_dir / "findings.csv"]
    paths[0].write_text(place(page_text(grid.name, grid, runs, md), Local(
        judged.registered.line, shared_line(runs, out_dir), costs.block(cost, runs))))
    table.to_csv(paths[1], index=False)
    return paths, table, md


def findings_from_runs_csv(runs_csv: Path, grid_file: Path, out_dir: Path) -> list[Path]:
    """The findings of a grid file's claims and its paper-style table recomputed from a
    runs.csv (a committed result's per-seed values, no MLflow store), into out_dir with the
    grid file beside them; ConfigError for a runs.csv that is not the grid's
    (`perseed.read`). The grid file is read once: the grid copied is the text the findings
    were computed from. The table's machine line names what runs.csv records of the machine
    (its kernels and precision; not the CPU's model, a param of the store's runs). The cost
    claims and block read the cost.csv beside runs.csv, where there is one."""
    source = read_grid_text(grid_file)
    grid = open_grid(source, imports=False)  # the runs hold what the findings read
    runs = perseed.read(runs_csv, grid)
    cost = measurement.read(runs_csv.parent / measurement.FILE)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths, _, md = write_findings(grid, runs, pd.DataFrame(), out_dir, grid_file, cost)
    paths += write_tables(csv_sweep(runs, grid), out_dir)
    print(f"findings ({paths[0]}):\n{md}")
    if grid_file.resolve() != (out_dir / "grid.yaml").resolve():
        paths.append(out_dir / "grid.yaml")
        paths[-1].write_text(source.text)
    return paths


# ---- the whole report

def load(uri: str, experiment: str, sweep: str | None = None,
         grid: Grid | None = None) -> tuple[Sweep, reader.SweepRuns]:
    """The report's view of sweep `sweep` (default: the experiment's newest) and what the store
    holds of it; `grid` (the sweep's own, or a grid file's), else the grid file logged with the
    sweep, says what to report."""
    found = reader.sweep_runs(uri, experiment, identity(), sweep)
    if grid is None and found.grid_text is not None:  # its plugins relative to where it lay
        folder = Path(found.sweep.data.params.get("grid_file", ".")).parent
        where = f"the grid file logged with {experiment}'s sweep"
        grid = open_grid(GridText(found.grid_text, where, folder))
    return load_sweep(found, grid), found


def render_sweep(uri: str, experiment: str, out_dir: Path, sweep: str | None = None,
                 grid: Grid | None = None, source: GridText | None = None) -> list[Path]:
    """Write the report of sweep `sweep` (a parent run id; default: the experiment's newest):
    runs.csv and the findings its grid declares first (plotting packages other than the pins, a GPU
    image's, can break the figures, never these), then its table and figures (`grid`, read from the
    grid file `source`, as the command read it; default: the grid file logged with the sweep), of
    exactly the trials it covers, under out_dir, and print the findings; log them as artifacts
    (report/) of the sweep's run, and make its page the report (`sweep_page`, `page.publish`).
    Raises ReportError (or reader.StoreError) when nothing can be reported; ConfigError for a logged
    grid file that cannot be read."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bars in logs
    data, found = load(uri, experiment, sweep, grid)
    if data.runs.empty:
        status = ", ".join(f"{n} {s.lower()}" for s, n in
                           found.runs["status"].value_counts().items())
        raise ReportError(f"{experiment}: no finished trials yet ({status}) in {uri}", 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    for line in missing_lines(data):
        print(f"not finished: {line}")
    runs = claim_runs(data)  # reads each run's result.json where a claim needs head spans
    paths = [out_dir / "runs.csv"]  # every seed's values, a pilot's too; then the findings,
    per_seed(data, runs).to_csv(paths[-1], index=False)  # before plotting can fail
    for name, records in ((CODE, code_records(runs)), (PLANS, plan_records(runs))):
        if records:  # each code_sha's files, each plan_sha's plan: read back beside runs.csv
            paths.append(out_dir / name)
            paths[-1].write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    logged = found.sweep.data.params.get("grid_file") if found.sweep else None
    path = source.path if source else (Path(logged) if logged else None)
    text = source.text if source else found.grid_text
    if text is not None:  # what the sweep ran and tested
        paths.append(out_dir / "grid.yaml")
        paths[-1].write_text(ran_as(found.sweep.data.params.get("command") if found.sweep
                                    else None) + text)
    table, cost = None, measurement.read(out_dir / measurement.FILE)  # measured after the trials
    if cost is not None:
        paths.append(out_dir / measurement.FILE)
    if data.claims:  # from runs.csv read back: what bench.verify recomputes them from
        written, table, md = write_findings(data.grid, perseed.read(paths[0]), data.missing,
                                            out_dir, path, cost)
        paths += written
        print(f"\nfindings ({written[0]}):\n{md}")
    claims = None if table is None else table[table["claim"].isin(
        [c.id for c in data.claims])]  # the claims, not their parts
    verdicts_of = {} if claims is None else {  # as the figure states them: with the reason
        r.claim: said(r.verdict, r.reason) for r in claims.itertuples()}  # one cannot be made
    paths += write_tables(data, out_dir) + write_figures(data, out_dir, verdicts_of)
    if found.sweep is not None:
        writer.log_report(found.client, found.sweep, paths,
                          sweep_page(runs, paths, claims, out_dir))
    return paths
