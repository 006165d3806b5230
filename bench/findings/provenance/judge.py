"""A result's verdicts as the findings state them: the claims' tests on the runs of the plan's
seeds (`verdicts`; each cell's probe floors without recall from the grid, `floors.of_grid`),
labelled by whether the trials served a plan registered before they ran (`prereg`) and whether
they are the plan's trials (`perseed.coverage`): rows on seeds the plan never runs, or rows
that contradict themselves (a seed label that is not the trial's seed, a later look's trial
started before an earlier look's: `perseed.contradictions`), make a result exploratory; a
setting short of a seed of the look it reached, or a sweep stopped before the look its claims
wait for, unverified; a grid registered as a pilot grid (status pilot, once spelled design) is
exploratory whatever its seeds. Each names what it found."""

from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from bench.experiment import floors
from bench.experiment.grid import Grid
from bench.findings.decision import evidence, verdicts
from bench.findings.reading import perseed

from . import prereg


@dataclass(frozen=True)
class Recomputed:
    """Each row of a result held against the trial its grid, setting, seed and precision make
    (`bench.sweep.recompute`, which builds configs and corpora: the findings cannot): `wrong`,
    each row whose recorded trial hash or corpus is not that trial's, named; `unchecked`, why
    the rows could not be recomputed ("" where they were)."""

    wrong: list[str]
    unchecked: str = ""


@dataclass(frozen=True)
class Judged:
    """The findings' table (verdicts.COLUMNS) and the registration as the findings state it
    (`prereg.Registration`, its evidence and line including what the coverage found);
    `valid`, the registration under the checks of what counts as a valid result alone (rows,
    seeds, records, files: today's code judges them for every result), without today's
    decision of which looks had to run, which `waits` says ("": none), as the registered
    analysis code decides it where it is not today's (`bench.findings.provenance.verify`)."""

    table: pd.DataFrame
    registered: prereg.Registration
    valid: prereg.Registration
    waits: str = ""


def _label(registered: prereg.Registration, evidence: str, why: str) -> prereg.Registration:
    """The registration made `evidence` (exploratory outranks unverified) for `why`."""
    if registered.evidence == "exploratory" or registered.evidence is None:
        return registered
    if registered.evidence == "unverified" and evidence == "unverified":
        why = f"{registered.why}; {why}"
    return replace(registered, line=f"Pre-registration: {evidence}: {why}.", evidence=evidence,
                   why=why)


def _rows(registered: prereg.Registration, grid: Grid, rows: Recomputed | None
          ) -> prereg.Registration:
    """The registration under the rows' recomputation: rows that are not their trials make
    the result exploratory (a result of design seeds only too, so that they are named), rows
    that could not be recomputed unverified."""
    if rows is None or not grid.claims:
        return registered
    if rows.wrong:
        why = "rows whose trial is not the grid's: " + "; ".join(rows.wrong)
        if registered.evidence is None:
            return prereg.Registration(f"Pre-registration: exploratory: {why}.", "exploratory",
                                       why)
        return _label(registered, "exploratory", why)
    if rows.unchecked:
        return _label(registered, "unverified", f"the rows' trials could not be recomputed: "
                      f"{rows.unchecked}")
    return registered


def _waits(found: verdicts.SequenceResult) -> str:
    """The claim the sweep stopped short of deciding, and the look it waits for, in words ("":
    the runs decide every claim they reach)."""
    if not found.waiting:
        return ""
    claim = found.waiting[0].id
    look = found.table.loc[found.table["claim"] == claim, "look"].dropna().astype(str)
    at = look.iloc[-1].split(" of ") if len(look) else []
    return (f"{claim} waits for look {int(at[0]) + 1} of {at[1]}, which the sweep did not run"
            if len(at) == 2 else f"{claim} waits for a look the sweep did not run")


def judge(grid: Grid, runs: pd.DataFrame, missing: pd.DataFrame, grid_file: Path | None,
          rows: Recomputed | None = None, cost: pd.DataFrame | None = None) -> Judged:
    """The grid's claims' verdicts on `runs` (as runs.csv holds them) at the plan's seeds,
    labelled exploratory or unverified where the registration check, the plan's trials or the
    rows' recomputation (`rows`: bench.verify's) say so (module doc); `missing`: the sweep's
    other trials, for the reasons; `cost`: the interleaved measurement its cost claims read
    (cost.csv, `measurement.read`; None: not made)."""
    registered = prereg.check(grid_file, grid, runs)
    start = perseed.start_of(grid, runs) if grid.claims else None
    looks = grid.looks.model_copy(update={"start": start}) if grid.looks else None
    found = verdicts.judge_sequence(grid.claims, runs, missing, looks, grid.design_seeds,
                                    verdicts.Reading(floors.of_grid(grid), cost=cost))
    waits = ""
    if grid.claims and set(grid.grid) <= set(runs):
        cover = perseed.coverage(grid, runs, start)
        if cover.missing:
            registered = _label(registered, "unverified", "the runs lack trials of the plan: "
                                + "; ".join(cover.missing))
        waits = "" if cover.missing else _waits(found)  # short of a look it reached: not waiting
        if cover.extra:
            registered = _label(registered, "exploratory", "rows on seeds the plan never runs "
                                f"(seeds from {start}): " + "; ".join(cover.extra))
        if wrong := perseed.contradictions(grid, runs, start):
            registered = _label(registered, "exploratory", "rows that contradict themselves: "
                                + "; ".join(wrong))
    if grid.claims and grid.status == "pilot":
        registered = _label(registered, "exploratory", f"{grid.name} is registered as a pilot "
                            f"grid of {grid.of}: its findings are exploratory whatever its seeds")
    valid = _rows(registered, grid, rows)
    registered = valid if not waits else _label(
        valid, "unverified", f"the sweep stopped before the look {found.waiting[0].id} waits for")
    table = found.table
    if registered.evidence == "exploratory":
        table = evidence.exploratory(table, registered.why)
    elif registered.evidence == "unverified":
        table = evidence.unverified(table, registered.why)
    return Judged(table, registered, valid, waits)
