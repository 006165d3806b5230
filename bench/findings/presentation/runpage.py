"""What the sweep's MLflow page shows of its report (`bench.tracking.page.Page`), read top to
bottom: a line per claim (claim, verdict, effect with its interval, p against its rule,
evidence), the pre-registration line, the cost table (findings.md's cost block: what the rows
cost against their baseline, measured interleaved), the paper-style tables, the figures; the
rest of the findings (reasons, offsets, unlearned counts) stays in findings.md, which the page
links."""

import re
from pathlib import Path

import numpy as np
import pandas as pd

from bench.findings.reading.runs import machine_line
from bench.tracking.page import REPORT, ClaimResult, Page, Part

from .costs import END, START


def interval(lo: float, hi: float) -> str:
    """The interval of a test as people read it: a one-sided bound (<= hi, >= lo) or [lo, hi]."""
    def num(v: float) -> str:
        return format(v, ".4g")

    if pd.isna(lo) or pd.isna(hi):
        return ""
    if np.isinf(lo) and np.isinf(hi):
        return "unbounded (too few seeds)"
    return f"≤ {num(hi)}" if np.isneginf(lo) else f"≥ {num(lo)}" if np.isposinf(hi) else (
        f"[{num(lo)}, {num(hi)}]")


def said(verdict: str, reason: object) -> str:
    """A claim's verdict as the page and the claims' figure state it: with its reason where
    the data cannot make the comparison, 'inconclusive (unanswerable: ...)'."""
    why = reason.split(";")[0] if isinstance(reason, str) else ""
    return f"{verdict} ({why})" if why.startswith("unanswerable") else verdict


def _cells(*cells: str) -> str:
    """A Markdown table row, a `|` in a cell escaped."""
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def claim_lines(table: pd.DataFrame) -> list[str]:
    """A line per claim of the findings (`table`: a row per claim, verdicts.COLUMNS) as a
    Markdown table: header, rule, then claim, verdict, effect with its interval, p against the
    rule of its look, evidence (`said`: with the reason a comparison cannot be made)."""
    def given(v: object) -> bool:
        return isinstance(v, str) and v != "" or isinstance(v, float) and not np.isnan(v)

    rows = [_cells("claim", "verdict", "effect (interval)", "p (rule)", "evidence"),
            _cells(*["---"] * 5)]
    for r in table.itertuples():
        bound = interval(r.ci_low, r.ci_high)
        effect = f"{r.effect:.4g}" + (f" ({bound})" if bound else "") if given(r.effect) else ""
        p = f"{r.p:.3g}" + (f" (rule {r.rule})" if given(r.rule) else "") if given(r.p) else ""
        rows.append(_cells(r.claim, said(r.verdict, r.reason), effect, p,
                           r.evidence if given(r.evidence) else ""))
    return rows


def _compact(line: str) -> str:
    """A Markdown table row without the padding that aligns it in the file (the store counts
    every character; the UI renders the table the same)."""
    if not line.startswith("|"):
        return line
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    return "| " + " | ".join(re.sub(r"^(:?)-+(:?)$", r"\1---\2", c) for c in cells) + " |"


def _tables(paths: list[Path]) -> list[Part]:
    """Each paper-style table (a .md beside findings.md) as a part of the page: its title as a
    heading, its lines compacted, a <name> in the text as words (MLflow's Markdown drops it as
    an HTML tag)."""
    parts = []
    for md in (p for p in paths if p.suffix == ".md" and p.name != "findings.md"):
        lines = md.read_text().splitlines()
        title = lines[0].removeprefix("# ") if lines and lines[0].startswith("# ") else md.stem
        text = "\n".join([f"### {title}", *map(_compact, lines[1:])])
        text = re.sub(r"<(\w+)>", r"&lt;\1&gt;", re.sub(r"\n{3,}", "\n\n", text)).strip()
        parts.append(Part(text, title, f"{REPORT}/{md.name}"))
    return parts


def _registration(paths: list[Path]) -> list[Part]:
    """findings.md's pre-registration line, as a part of the page (none without findings)."""
    found = [p for p in paths if p.name == "findings.md"]
    lines = found[0].read_text().splitlines() if found else []
    return [Part(line, "the pre-registration line", f"{REPORT}/findings.md")
            for line in lines if line.startswith("Pre-registration:")]


def _cost(paths: list[Path]) -> list[Part]:
    """findings.md's cost block (`costs.block`), as a part of the page (none where the sweep
    measured no cost)."""
    found = [p for p in paths if p.name == "findings.md"]
    text = found[0].read_text() if found else ""
    if START not in text:
        return []
    inside = text.split(START, 1)[1].split(END, 1)[0].strip().splitlines()
    body = "\n".join(map(_compact, inside)).replace("## ", "### ", 1)
    return [Part(body, "the cost table", f"{REPORT}/findings.md")]


def sweep_page(runs: pd.DataFrame, paths: list[Path], table: pd.DataFrame | None,
               out_dir: Path) -> Page:
    """What the sweep's run page shows of the report written to `paths` (`page.Page`):
    `table`, the findings' rows of the claims (None: no claims), as a line each, then the
    pre-registration line, the tables and the figures (PNG, in the order written: the claims'
    figure first); findings.md is the whole report's link (else the report's folder)."""
    claims = [] if table is None else [
        ClaimResult(r.claim, r.verdict, r.effect, r.p) for r in table.itertuples()]
    precision = ", ".join(sorted(runs["precision"].dropna().astype(str).unique())) \
        if "precision" in runs else "not recorded"
    whole = f"{REPORT}/findings.md" if any(p.name == "findings.md" for p in paths) else REPORT
    return Page(claims, [] if table is None else claim_lines(table),
                _registration(paths) + _cost(paths) + _tables(paths),
                machine_line(runs).removeprefix("Machine: "), precision,
                [p for p in paths if p.suffix == ".png"], whole, out_dir.resolve())
