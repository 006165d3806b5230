"""The plan a sweep's trials serve, registered when the sweep starts: what a verdict depends on
beyond the data. The claims (their words too), the looks and futility, the seeds' start and
registered replications, the design seeds, the grid's status, its scheduler, alpha, the trials
the grid runs (any command-line override makes another plan) and the version of the analysis
code: every module that can move a verdict from the per-seed values (`ANALYSIS`: reading
runs.csv and the files beside it, the claims, the statistics, the no-recall floors and
vacuity, the sequence, the registration check), hashed as code, its docstrings and comments
aside (`version`), so that a reworded docstring or comment changes no plan.

When a sweep starts, its driver records with every trial (`record`): `plan_sha` (the hash of the
plan's JSON), `seed_start`, `plan_file` (the grid file, relative to its repository),
`run_commit` (HEAD) and `run_clean` (whether what can change a run was as committed there: the
tracked files, results/ and runs/ aside, and the untracked files a trial imports or reads as
its plan, `uncommitted`); and the plan itself (`registered`: the plan's JSON and the files its
analysis version hashed, plan.json), which the report writes beside runs.csv. A later reader
authenticates it by its hash and recomputes its analysis version at any commit from the files
it names, with no code of that time (`bench.findings.provenance.prereg`).
"""

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.codehash import code
from bench.experiment.grid import Grid, Looks
from bench.findings.reading.records import PlanRecord
from bench.findings.statistics.stats import ALPHA

from .git import git

ROOT = Path(__file__).resolve().parents[3]
# the modules whose code can move a verdict from a result's per-seed values: part of the plan
# (a test checks that every module of bench they import is here, or only parses the grid file,
# whose output the plan holds as data)
ANALYSIS = (
    *(f"bench/findings/statistics/{m}.py" for m in ("stats", "sequential", "bounds")),
    *(f"bench/findings/reading/{m}.py" for m in ("perseed", "samples", "records",
                                                  "measurement")),
    *(f"bench/findings/decision/{m}.py" for m in ("verdicts", "parts", "evidence", "said",
                                                   "vacuity", "costs")),
    *(f"bench/findings/provenance/{m}.py" for m in ("plan", "prereg", "git", "trained",
                                                     "judge", "verify")),
    "bench/experiment/claims.py", "bench/metrics.py", "bench/codehash.py",
    # the no-recall floors and their noise bars, closed forms of the grid's data (`vacuity`)
    "bench/experiment/floors.py", "bench/data/corpus.py",
    *(f"bench/data/probes/{m}.py" for m in ("base", "recall", "conjunctive", "mqar")))
PACKAGES = ("bench/", "variants/")  # the tree's code a trial imports


def version(files: dict[str, bytes], paths: Iterable[str] = ANALYSIS,
            hashed: str = "code") -> str:
    """The first 12 hex digits of the sha256 of the files `paths` (path -> source, a missing
    one empty), each as code (`bench.codehash.code`) or, as the plans registered before that
    hashed them, as bytes (`hashed`)."""
    h = hashlib.sha256()
    for path in paths:
        source = files.get(path, b"")
        h.update(path.encode() + b"\0" + (code(source) if hashed == "code" else source) + b"\0")
    return h.hexdigest()[:12]


def here(paths: Iterable[str] = ANALYSIS) -> dict[str, bytes]:
    """The files `paths` as this checkout holds them (path -> source)."""
    return {p: (ROOT / p).read_bytes() for p in paths if (ROOT / p).is_file()}


def plan_of(grid: Grid, start: int | None, analysis: str, overrides: dict | None = None
            ) -> dict[str, Any]:
    """The plan (module doc) as data: the grid's claims, seeds (looks, futility and registered
    replications, the start given), design seeds, base, axes and exclusions, status (a pilot
    promoted after its data is another plan), scheduler, alpha, the analysis code's version
    and any command-line overrides."""
    seeds: Any = grid.seeds
    if isinstance(seeds, Looks):
        seeds = {"looks": seeds.looks, "futility": seeds.futility, "start": start,
                 "replications": seeds.replications}
    return {"claims": [c.model_dump(mode="json") for c in grid.claims], "seeds": seeds,
            "design_seeds": grid.design_seeds, "alpha": ALPHA, "analysis": analysis,
            "base": grid.base.model_dump(mode="json"), "grid": grid.grid,
            "exclude": grid.exclude, "overrides": overrides or {}, "status": grid.status,
            "scheduler": grid.scheduler.model_dump(mode="json")}


def digest(plan: dict[str, Any]) -> str:
    """A plan's hash, its plan_sha: the first 16 hex digits of the sha256 of its JSON."""
    text = json.dumps(plan, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan_sha(grid: Grid, start: int | None, analysis: str, overrides: dict | None = None) -> str:
    """The hash of the plan of `grid` from seed `start` (`plan_of`, `digest`)."""
    return digest(plan_of(grid, start, analysis, overrides))


def start_of(grid: Grid) -> int | None:
    """The grid's seed start (None: a seed list)."""
    return grid.seeds.start if isinstance(grid.seeds, Looks) else None


def registered(grid: Grid, overrides: dict | None = None) -> PlanRecord:
    """The plan the trials of `grid` serve (its seeds as it runs them), as registered: its data
    with this checkout's analysis version, and the files that version hashed."""
    plan = plan_of(grid, start_of(grid), version(here()), overrides)
    return PlanRecord(plan=json.loads(json.dumps(plan, default=str)), files=list(ANALYSIS))


def plans_json(records: Iterable[PlanRecord]) -> str:
    """plan.json's text: each record by its plan_sha."""
    return json.dumps({digest(r.plan): r.model_dump() for r in records}, indent=1,
                      sort_keys=True) + "\n"


def record(grid: Grid, grid_file: Path, overrides: dict, plugins: Iterable[str] = ()
           ) -> dict[str, str]:
    """What a sweep's trials record of the plan they serve, as tags (`records.RECORDS`), from
    the grid file as read with the seeds it runs (`grid`: a --seed-start applied, nothing
    else), the command line's other overrides (empty: none) and the plugins its trials import;
    `run_clean` where nothing that can change a run differs from the commit (`uncommitted`)."""
    start = start_of(grid)
    top = git(grid_file.resolve().parent, "rev-parse", "--show-toplevel")
    out = {"plan_sha": digest(registered(grid, overrides).plan),
           "seed_start": "" if start is None else str(start), "plan_file": "",
           "run_commit": "", "run_clean": "false"}
    if top is None:
        return out
    root = Path(top.strip())
    return out | {"plan_file": grid_file.resolve().relative_to(root).as_posix(),
                  "run_commit": (git(root, "rev-parse", "HEAD") or "").strip(),
                  "run_clean": "false" if uncommitted(grid_file, plugins) else "true"}


def uncommitted(grid_file: Path, plugins: Iterable[str] = ()) -> list[str]:
    """What can change a run but differs from the commit, as paths relative to the grid file's
    repository: every tracked file changed (results/ and runs/ aside), and the untracked files a
    trial can import or read as its plan: under the packages (PACKAGES), the grid file itself
    and its file plugins (absolute paths, or relative to the grid file's folder). An untracked
    notes file or scratch grid is none of these. Outside a repository: the grid file."""
    top = git(grid_file.resolve().parent, "rev-parse", "--show-toplevel")
    status = None if top is None else git(Path(top.strip()), "status", "--porcelain",
                                          "--untracked-files=all", "--", ".",
                                          ":(exclude)results", ":(exclude)runs")
    if status is None:
        return [str(grid_file)]
    root = Path(top.strip())
    read = {grid_file.resolve(), *((grid_file.parent / p).resolve() for p in plugins
                                   if p.endswith(".py") or "/" in p)}
    out = []
    for line in status.splitlines():
        state, path = line[:2], line[3:].split(" -> ")[-1].strip('"')
        if state != "??" or path.startswith(PACKAGES) or (root / path).resolve() in read:
            out.append(path)
    return out
