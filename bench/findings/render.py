"""A sweep's report, read back from MLflow: the table its grid declares, its figures, and the
findings of its claims, into a folder and onto the sweep's run.

Finished trials are aggregated over seeds (mean, std, n) per configuration (the grid keys except
the seed); running or failed trials are listed. The report reads MLflow (`bench.tracking.reader`)
and the grid file, never the training code.
"""

import json
import os
import re
import shlex
from pathlib import Path

import pandas as pd

from bench.experiment.claims import METRICS, PROBE_METRIC
from bench.experiment.grid import Grid
from bench.experiment.open import GridText, open_grid, read_grid_text
from bench.metrics import SEEDS
from bench.provenance import identity
from bench.tracking import reader, writer

from . import costs, perseed, prereg, stats
from .figures import write_figures
from .judge import judge
from .runpage import interval, said, sweep_page
from .runs import (
    Sweep,
    claim_runs,
    code_records,
    csv_sweep,
    load_sweep,
    machine_line,
    missing_lines,
)
from .shared import shared_line
from .tables import DATA_COLUMNS, data_line, write_tables

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


FINDINGS_NOTE = (
    "How to read this table (the standard, and every word in it, is defined once in "
    "docs/claims.md): the claims are one pre-registered family, tested in their written order "
    "(fixed sequence, each at alpha = {alpha} in each direction); the first claim not "
    "reproduced stops the sequence. Each test pairs runs by seed; `about` says what a verdict "
    "is about and `null` what its test rejects: the sign test, about the median of the "
    "per-seed values (the typical seed); the sign-flip test, about an effect (its null: the "
    "variant changes nothing, the paired values exchangeable; `effect` is their mean), for a "
    "difference against 0 only; `test` gives the scale (log(y + c)). `rule` is the exact "
    "boundary of the claim's look (seeds on the claimed side, or the p its test must reach), "
    "`level` the p it stands for; `reproduced`: p at most the level in every part; "
    "`contradicted`: a part's opposite p at most `level_opposite` (alpha over the parts); "
    "`inconclusive`: neither at the last look, or stopped for futility (neither direction's p "
    "below the bound); `not tested`: decided by construction, or after the sequence stopped. "
    "On seeds the claims were designed from, or from a grid file not committed before they "
    "ran (`evidence` exploratory), the words are `holds (exploratory)` and `fails "
    "(exploratory)`. `offsets`: the log offsets of a fixed ladder at which the verdict stands. "
    "`detectable`: for a mean, the smallest effect beyond the margin the seeds could detect "
    "(80% power), for a median the smallest share of seeds satisfying the claim; `seeds`: how "
    "many would detect what was seen. `unlearned`: in how many seeds each cell answered a probe "
    "at the no-recall floor within noise, and how many of the test's seeds were vacuous (their "
    "outcome could not tell a variant that learned the probe from one that learned nothing: "
    "counted on neither side; `reason` says why). `fixed`: in how many "
    "seeds the span's floor R fixed a raw span statistic. The per-seed values are in runs.csv "
    "beside this file.")


def per_seed(sweep: Sweep, runs: pd.DataFrame) -> pd.DataFrame:
    """runs.csv: one row per finished run: grid keys, seed, trial hash, precision, machine
    (cpu, gpu: what a table regenerated from it names), the plan and code records
    (`prereg.RECORDS`), every final metric and what the claims read, enough to recompute
    findings.csv (`verdicts.verdict_table` over it gives the same table) and the paper-style
    table (`findings_from_runs_csv`)."""
    metrics = sorted(c for c in runs if c in METRICS or PROBE_METRIC.match(c)
                     or c.startswith(("layer.", "dataset.planted", "dataset.no_recall")))
    keys = [k for k in [*sweep.axes, *SEEDS, "trial", "precision", "cpu_capability", "cpu", "gpu",
                        *DATA_COLUMNS, "model.span", "floor_bpc", "head_spans", "start_time",
                        *prereg.RECORDS] if k in runs]
    out = runs[list(dict.fromkeys([*keys, *metrics]))].copy()
    if "head_spans" in out:
        out["head_spans"] = out["head_spans"].map(
            lambda v: json.dumps(v) if isinstance(v, list) else v)
    return out


def findings_markdown(table: pd.DataFrame) -> str:
    """The findings table for people: effect and the interval matching its test in the
    metric's units, corrected p's, verdict, and what an inconclusive test could detect."""
    def num(v: float, fmt: str = ".4g") -> str:
        return "" if pd.isna(v) else format(v, fmt)

    def text(col: str) -> pd.Series:
        return table[col].astype(object).where(table[col].notna(), "")

    md = pd.DataFrame({
        "claim": table["claim"], "about": text("about"), "null": text("null"),
        "expected": table["expect"], "metric": table["metric"],
        "effect": table["effect"].map(num),
        "interval": [interval(lo, hi) for lo, hi in
                     zip(table["ci_low"], table["ci_high"], strict=True)],
        "p": table["p"].map(lambda v: num(v, ".3g")), "rule": text("rule"),
        "level": table["level"].map(lambda v: num(v, ".3g")),
        "p opposite": table["p_opposite"].map(lambda v: num(v, ".3g")),
        "level opposite": table["level_opposite"].map(lambda v: num(v, ".3g")),
        "look": text("look"), "n": table["n"].map(lambda v: num(v, ".0f")),
        "seeds run": text("seed_range"), "evidence": text("evidence"),
        "test": text("test"), "verdict": table["verdict"],
        "offsets": text("offsets"),
        "detectable": table["detectable"].map(num),
        "seeds": table["seeds_needed"].map(lambda v: num(v, ".0f")),
        "unlearned": text("unlearned"), "fixed": text("fixed_by_floor"),
        "reason": text("reason")})
    md = md.loc[:, [c for c in md if c in ("claim", "verdict") or (md[c] != "").any()]]
    md = md.map(lambda v: v.replace("|", "\\|") if isinstance(v, str) else v)  # cell text
    return md.to_markdown(index=False, disable_numparse=True)


def _table_rows(text: str) -> list[tuple[int, tuple[str, ...]]]:
    """A Markdown page's table rows as (line number, cells): the padding and the separator row
    aside."""
    return [(i, tuple(c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]))
            for i, line in enumerate(text.splitlines(), 1)
            if line.startswith("|") and not re.fullmatch(r"\|[-:| ]+\|", line.strip())]


def page_differs(folder: Path) -> list[str]:
    """Where a result's findings.md table does not say what its findings.csv says (a hand edit
    of a verdict, an interval, a rule or a reason on the page): each cell by its line, claim and
    column, or a row one of them lacks. findings.csv itself is held against the recomputed
    findings (`bench.findings.verify`)."""
    page = folder / "findings.md"
    theirs = _table_rows(costs.without_block(page.read_text(encoding="utf-8", errors="replace")))
    mine = _table_rows(findings_markdown(pd.read_csv(folder / "findings.csv")))
    header = mine[0][1] if mine else ()
    out = []
    for (i, a), (_, b) in zip(theirs, mine, strict=False):
        if len(a) != len(b):
            out.append(f"{page}: line {i}: {len(a)} cells, where findings.csv gives {len(b)}")
        out += [f"{page}: line {i} ({a[0]}), {h}: {x!r} on the page, {y!r} in findings.csv"
                for h, x, y in zip(header, a, b, strict=False) if x != y and len(a) == len(b)]
    if len(theirs) != len(mine):
        out.append(f"{page}: {len(theirs) - 1} table rows, where findings.csv gives "
                   f"{len(mine) - 1}")
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
    table, registered = judged.table, judged.registered
    md = findings_markdown(table)
    texts = [f"{i}. `{c.id}`: {c.text}" for i, c in enumerate(grid.claims, 1)]
    paths = [out_dir / "findings.md", out_dir / "findings.csv"]
    shared = shared_line(runs, out_dir)
    paths[0].write_text("\n".join([
        f"# {grid.name}: findings", "", data_line(runs), "", machine_line(runs), "",
        f"Grid status: {grid.status_line} (docs/grids.md).", "",
        registered.line, "", *([shared, ""] if shared else []), md, "",
        FINDINGS_NOTE.format(alpha=stats.ALPHA), "",
        "## Claims, in their test order", "", *texts, "",
        *([costs.block(cost, runs), ""] if cost is not None else [])]))
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
    cost = costs.read(runs_csv.parent / costs.FILE)
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
    if records := code_records(runs):  # each code_sha's files, read back beside runs.csv
        paths.append(out_dir / "code.json")
        paths[-1].write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    logged = found.sweep.data.params.get("grid_file") if found.sweep else None
    path = source.path if source else (Path(logged) if logged else None)
    text = source.text if source else found.grid_text
    if text is not None:  # what the sweep ran and tested
        paths.append(out_dir / "grid.yaml")
        paths[-1].write_text(ran_as(found.sweep.data.params.get("command") if found.sweep
                                    else None) + text)
    table, cost = None, costs.read(out_dir / costs.FILE)  # measured after the trials
    if cost is not None:
        paths.append(out_dir / costs.FILE)
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
