"""findings.md, the findings for people, whole: its table (`findings_markdown`), the page as
the findings' code writes it from grid.yaml and runs.csv (`page_text`: title, Data, Machine,
grid status, table, how to read it, the claims in their test order), and the paragraphs today's
code computes from the repository around the folder instead (`Local`: the pre-registration
line, from git; the Shared runs line, from the other runs.csv files), placed into it (`place`).

`bench.verify` regenerates a committed page whole (`regenerate`): the registered code's page
where today's analysis code is not the registered one, else today's, with today's local
paragraphs placed in, and names where the committed page differs (`differs`): a table cell by
its line, claim and column, else the first line that differs. A page cannot say more, less or
otherwise than its grid file, runs and git give, in the table or outside it.
"""

import re
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path

import pandas as pd

from bench.experiment.grid import Grid
from bench.experiment.open import open_grid
from bench.findings.provenance.verify import Checked, relabelled
from bench.findings.reading import measurement, perseed
from bench.findings.reading.runs import machine_line
from bench.findings.statistics import stats

from . import costs
from .runpage import interval
from .tables import data_line

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
# the paragraphs of a page that today's code writes, whatever code wrote the rest (`Local`)
LOCAL = ("Pre-registration:", "Shared runs:")


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


@dataclass(frozen=True)
class Local:
    """The paragraphs of findings.md that today's code computes from the repository around the
    folder, not from its grid.yaml and runs.csv, so that a page regenerated by older code (in a
    scratch folder) still says them as they are now: `registration`, the pre-registration line
    (from git: `prereg.check`, with today's checks of the runs, `judge`), and `shared`, the
    Shared runs line (from the other runs.csv files: `shared.shared_line`; None: none), and
    `cost`, the cost block that ends the page (from cost.csv beside runs.csv: `costs.block`;
    '': not measured), which no registered code older than the measurement writes."""

    registration: str
    shared: str | None = None
    cost: str = ""


def page_text(name: str, grid: Grid, runs: pd.DataFrame, md: str) -> str:
    """findings.md as the findings' code writes it from the grid and its runs (module doc),
    `md` its table (`findings_markdown`), without the `Local` paragraphs (`place` puts them)."""
    texts = [f"{i}. `{c.id}`: {c.text}" for i, c in enumerate(grid.claims, 1)]
    return "\n".join([
        f"# {name}: findings", "", data_line(runs), "", machine_line(runs), "",
        f"Grid status: {grid.status_line} (docs/grids.md).", "", md, "",
        FINDINGS_NOTE.format(alpha=stats.ALPHA), "",
        "## Claims, in their test order", "", *texts, ""])


def place(page: str, local: Local) -> str:
    """`page` with its `Local` paragraphs (those it has: any code's) replaced by `local`'s,
    right before the table, the one place every version of the page has put them, and its cost
    block (`costs.block`) by `local.cost`, at the end."""
    body = costs.without_block(page).rstrip("\n")
    parts = [p for p in body.split("\n\n") if not p.startswith(LOCAL)]
    at = next((i for i, p in enumerate(parts) if p.startswith("|")), len(parts))
    return "\n\n".join([*parts[:at], local.registration, *filter(None, [local.shared]),
                        *parts[at:], *filter(None, [local.cost])]) + "\n"


def _with_table(page: str, md: str) -> str:
    """`page` with its table paragraph replaced by `md`."""
    return "\n\n".join(md if p.startswith("|") else p for p in page.split("\n\n"))


def regenerate(checked: Checked) -> str:
    """A verified folder's findings.md as it must read: the registered code's page (its table
    rewritten where today's checks relabel its findings: `verify.relabelled`), else today's
    from the folder's grid.yaml and runs.csv, with today's `Local` paragraphs (the cost block
    among them)."""
    md = findings_markdown(checked.table)
    grid = open_grid(checked.folder / "grid.yaml", imports=False)
    runs = perseed.read(checked.folder / "runs.csv", grid)
    if checked.page is not None:
        base = _with_table(checked.page, md) if relabelled(checked.registered) else checked.page
    else:
        base = page_text(grid.name, grid, runs, md)
    cost = measurement.read(checked.folder / measurement.FILE)
    return place(base, Local(checked.registered.line, checked.shared, costs.block(cost, runs)))


def _table_rows(lines: list[str]) -> list[tuple[int, tuple[str, ...]]]:
    """A Markdown page's table rows as (line number, cells): the padding and the separator row
    aside."""
    return [(i, tuple(c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]))
            for i, line in enumerate(lines, 1)
            if line.startswith("|") and not re.fullmatch(r"\|[-:| ]+\|", line.strip())]


def _cells(page: Path, theirs: list[str], mine: list[str]) -> list[str]:
    """Where the committed table (`theirs`' rows) says otherwise than the regenerated one:
    each cell by its line, claim and column, or a row one of them lacks."""
    theirs_rows, mine_rows = _table_rows(theirs), _table_rows(mine)
    header = mine_rows[0][1] if mine_rows else ()
    out = []
    for (i, a), (_, b) in zip(theirs_rows, mine_rows, strict=False):
        if len(a) != len(b):
            out.append(f"{page}: line {i}: {len(a)} cells, where the regenerated page has "
                       f"{len(b)}")
        out += [f"{page}: line {i} ({a[0]}), {h}: {x!r} on the page, {y!r} regenerated"
                for h, x, y in zip(header, a, b, strict=False) if x != y and len(a) == len(b)]
    if len(theirs_rows) != len(mine_rows):
        out.append(f"{page}: {len(theirs_rows) - 1} table rows, where the regenerated page has "
                   f"{len(mine_rows) - 1}")
    return out


def differs(page: Path, regenerated: str) -> list[str]:
    """Where the committed findings.md `page` is not `regenerated`: its table's cells
    (`_cells`), then the first line that differs where the two are not both table rows, by
    its number, committed and regenerated ('(none)' past a page's end)."""
    theirs = page.read_text(encoding="utf-8", errors="replace").splitlines()
    mine = regenerated.splitlines()
    first = next(((i, a, b) for i, (a, b) in enumerate(zip_longest(
        theirs, mine, fillvalue="(none)"), 1) if a != b and not (
        a.startswith("|") and b.startswith("|"))), None)  # two table rows: `_cells` names them
    return _cells(page, theirs, mine) + ([] if first is None else [
        f"{page}: line {first[0]}: {first[1]!r} committed, {first[2]!r} regenerated"])
