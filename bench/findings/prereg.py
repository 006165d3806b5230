"""Pre-registration checked by the machine: did every confirmation trial run from a commit that
holds the analysis plan it served, and was that plan committed before the first of them began?

The plan is what a verdict depends on beyond the data: the claims, the looks and futility,
the seeds' start, the design seeds, alpha, the trials the grid runs (any command-line override
makes another plan) and the version of the analysis code (`ANALYSIS`). When a sweep starts, its
driver records with every trial (`record`): `plan_sha` (the plan's hash), `seed_start`,
`plan_file` (the grid file, relative to its repository), `run_commit` (HEAD) and `run_clean`
(whether the repository's files, results/ and runs/ aside, were as committed there); MLflow
records each trial's `start_time`.

`check` reads those columns of the runs. The findings are:
- `confirmatory` where (a) every trial on a seed outside the design seeds ran clean from a
  commit whose grid file and analysis code give the plan it recorded, and that plan is the one
  verified now (the grid file as given; a seed start other than the file's must be one of its
  registered `replications`), and (b) the plan's first commit is an ancestor of every run
  commit and was committed before the first of those trials started;
- `exploratory` where a trial ran under another plan, from a changed working tree, or from a
  commit that does not hold its plan, or the plan was committed after the trials began; the
  reason names the trial;
- `unverified` where the trials record none of this, or git cannot say (no repository, a
  commit that is not in it): never confirmatory.
Git's times are set by whoever commits, so the check catches mistakes and edits after the
fact, not a determined forger (docs/claims.md says what would anchor time outside git).
"""

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.config import ConfigError
from bench.experiment.grid import Grid, Looks
from bench.experiment.open import GridText, open_grid

from .stats import ALPHA

ROOT = Path(__file__).resolve().parents[2]
# the modules whose code decides a verdict from per-seed values: part of the plan
ANALYSIS = tuple(f"bench/findings/{m}.py" for m in ("verdicts", "sequential", "stats",
                                                    "samples", "bounds"))
RECORDS = ("plan_sha", "seed_start", "plan_file", "run_commit", "run_clean")


def _git(where: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                             check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def analysis_version(files: dict[str, bytes]) -> str:
    """The first 12 hex digits of the sha256 of the analysis modules' sources (path -> bytes)."""
    h = hashlib.sha256()
    for path in ANALYSIS:
        h.update(path.encode() + b"\0" + files.get(path, b"") + b"\0")
    return h.hexdigest()[:12]


def _analysis_here() -> str:
    return analysis_version({p: (ROOT / p).read_bytes() for p in ANALYSIS if (ROOT / p).is_file()})


def plan_sha(grid: Grid, start: int | None, analysis: str, overrides: dict | None = None) -> str:
    """The first 16 hex digits of the sha256 of the plan (module doc) as JSON: the grid's claims,
    seeds (looks and futility, the start given), design seeds, base, axes and exclusions, alpha,
    the analysis code's version and any command-line overrides."""
    seeds = grid.seeds
    if isinstance(seeds, Looks):
        seeds = {"looks": seeds.looks, "futility": seeds.futility, "start": start}
    plan = {"claims": [c.model_dump(mode="json") for c in grid.claims], "seeds": seeds,
            "design_seeds": grid.design_seeds, "alpha": ALPHA, "analysis": analysis,
            "base": grid.base.model_dump(mode="json"), "grid": grid.grid,
            "exclude": grid.exclude, "overrides": overrides or {}}
    text = json.dumps(plan, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _start(grid: Grid) -> int | None:
    return grid.seeds.start if isinstance(grid.seeds, Looks) else None


def record(grid: Grid, grid_file: Path, overrides: dict) -> dict[str, str]:
    """What a sweep's trials record of the plan they serve (RECORDS), from the grid file as read
    with the seeds it runs (`grid`: a --seed-start applied, nothing else) and the command line's
    other overrides (empty: none)."""
    start = _start(grid)
    top = _git(grid_file.resolve().parent, "rev-parse", "--show-toplevel")
    out = {"plan_sha": plan_sha(grid, start, _analysis_here(), overrides),
           "seed_start": "" if start is None else str(start), "plan_file": "",
           "run_commit": "", "run_clean": "false"}
    if top is None:
        return out
    root = Path(top.strip())
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", ".",
                  ":(exclude)results", ":(exclude)runs")
    return out | {"plan_file": grid_file.resolve().relative_to(root).as_posix(),
                  "run_commit": (_git(root, "rev-parse", "HEAD") or "").strip(),
                  "run_clean": "true" if status == "" else "false"}


@dataclass(frozen=True)
class Registration:
    """What the findings say of pre-registration: `line`; `evidence` (confirmatory,
    exploratory or unverified; None without claims or confirmation trials) and `why` not
    confirmatory."""

    line: str
    evidence: str | None = None
    why: str = ""


class _Repo:
    """The plans a repository's commits hold (cached per commit and start)."""

    def __init__(self, root: Path, plan_file: str) -> None:
        self.root, self.plan_file, self.seen = root, plan_file, {}
        top = ROOT.resolve()  # the analysis code's folder in the repository ("" at its top)
        rel = top.relative_to(root).as_posix() if top.is_relative_to(root) else None
        self.code = None if rel is None else "" if rel == "." else f"{rel}/"

    def plan(self, commit: str, start: int | None) -> str | None:
        """The plan's hash at `commit` for seed start `start` (the file's own start or one of
        its registered replications); None where the commit holds no readable grid file or
        does not register that start."""
        key = (commit, start)
        if key not in self.seen:
            self.seen[key] = self._plan(commit, start)
        return self.seen[key]

    def _plan(self, commit: str, start: int | None) -> str | None:
        text = _git(self.root, "show", f"{commit}:{self.plan_file}")
        try:
            grid = open_grid(GridText(text or "", f"{self.plan_file} at {commit[:10]}",
                                      self.root), imports=False)
        except ConfigError:
            return None
        if isinstance(grid.seeds, Looks) and start not in (grid.seeds.start,
                                                            *grid.seeds.replications):
            return None
        files = ({p: (_git(self.root, "show", f"{commit}:{self.code}{p}") or "").encode()
                  for p in ANALYSIS} if self.code is not None else None)
        return plan_sha(grid, start, analysis_version(files) if files else _analysis_here())

    def first(self, want: str, start: int | None) -> tuple[str, pd.Timestamp] | None:
        """The first commit whose plan is `want` (of those that changed the plan file or the
        analysis code: the plan can change nowhere else), and its committer time."""
        code = [f"{self.code}{p}" for p in ANALYSIS] if self.code is not None else []
        log = _git(self.root, "log", "--reverse", "--format=%H %cI", "--", self.plan_file,
                   *code) or ""
        for line in log.splitlines():
            commit, when = line.split()
            if self.plan(commit, start) == want:
                return commit, pd.Timestamp(when).tz_convert("UTC")
        return None


def _confirmation(grid: Grid, runs: pd.DataFrame) -> pd.DataFrame:
    seeds = runs.get("seed", runs.get("train.seed", pd.Series(dtype=float)))
    return runs[~seeds.isin(grid.design_seeds or [])]


def _name(row: pd.Series) -> str:
    return str(row.get("trial", row.name))


def check(grid_file: Path | None, grid: Grid, runs: pd.DataFrame) -> Registration:
    """Whether the confirmation trials of `runs` served the plan of `grid` (read from
    `grid_file`), registered in git before they began (see the module doc)."""
    conf = _confirmation(grid, runs)
    if not grid.claims or conf.empty:
        return Registration("")
    lacking = [k for k in ("start_time", "plan_sha", "run_commit", "run_clean")
               if k not in conf or conf[k].isna().any()]
    if lacking:
        why = (f"{len(conf)} confirmation trials do not record {', '.join(lacking)} (they "
               "predate the plan records)")
        return Registration(f"Pre-registration: unverified: {why}.", "unverified", why)
    files = set(conf["plan_file"].fillna("").astype(str))
    top = _git((grid_file or ROOT).resolve().parent, "rev-parse", "--show-toplevel")
    if top is None or len(files) != 1 or "" in files:
        why = (f"{grid_file} is not in a git checkout" if top is None else
               "the trials ran from a grid file outside a git checkout" if "" in files else
               f"the trials ran from {len(files)} grid files ({', '.join(sorted(files))})")
        return Registration(f"Pre-registration: unverified: {why}.", "unverified", why)
    repo = _Repo(Path(top.strip()), files.pop())
    return _verify(repo, grid, conf)


def _verify(repo: _Repo, grid: Grid, conf: pd.DataFrame) -> Registration:
    """Conditions (a) and (b) of the module doc, trial by trial."""
    starts = {int(s) if str(s) not in ("", "nan") else None for s in conf["seed_start"]}
    begun = pd.to_datetime(conf["start_time"], utc=True, errors="coerce").min()
    said, firsts = [], []
    absent = {c for c in set(conf["run_commit"].astype(str))  # asked of git once each
              if _git(repo.root, "cat-file", "-e", f"{c}^{{commit}}") is None}
    for start in sorted(starts, key=str):
        if isinstance(grid.seeds, Looks) and start not in (grid.seeds.start,
                                                            *grid.seeds.replications):
            why = f"seed start {start} is not registered in {repo.plan_file} (seeds.replications)"
            return Registration(f"Pre-registration: exploratory: {why}.", "exploratory", why)
        want = plan_sha(grid, start, _analysis_here())
        for _, row in conf[conf["seed_start"].astype(str) == ("" if start is None
                                                              else str(start))].iterrows():
            commit = str(row["run_commit"])
            if commit in absent:
                why = f"trial {_name(row)} ran from commit {commit[:10]}, not in this repository"
                return Registration(f"Pre-registration: unverified: {why}.", "unverified", why)
            why = _trial_fault(repo, row, want, start)
            if why:
                return Registration(f"Pre-registration: exploratory: {why}.", "exploratory", why)
        found = repo.first(want, start)
        if found is None:
            why = f"no commit of {repo.plan_file} holds this plan (plan {want})"
            return Registration(f"Pre-registration: exploratory: {why}.", "exploratory", why)
        firsts.append(found)
        said.append(f"plan {want} (seeds from {start}) first committed in {found[0][:10]} at "
                    f"{found[1]:%Y-%m-%d %H:%M:%S} UTC")
    for commit, when in firsts:
        late = when > begun
        apart = [c for c in set(conf["run_commit"].astype(str))
                 if _git(repo.root, "merge-base", "--is-ancestor", commit, c) is None]
        if late or apart:
            why = (f"{repo.plan_file}'s plan was committed in {commit[:10]} at "
                   f"{when:%Y-%m-%d %H:%M:%S} UTC, after the first confirmation trial started "
                   f"({begun:%Y-%m-%d %H:%M:%S} UTC)" if late else
                   f"the plan's first commit {commit[:10]} is not an ancestor of run commit "
                   f"{apart[0][:10]}")
            return Registration(f"Pre-registration: exploratory: {why}.", "exploratory", why)
    commits = ", ".join(sorted({c[:10] for c in conf["run_commit"].astype(str)}))
    return Registration(
        f"Pre-registration: confirmatory: {'; '.join(said)}, before the first confirmation "
        f"trial started ({begun:%Y-%m-%d %H:%M:%S} UTC); all {len(conf)} confirmation trials "
        f"ran from commits holding it ({commits}), with the grid file and the code as "
        "committed.", "confirmatory")


def _trial_fault(repo: _Repo, row: pd.Series, want: str, start: int | None) -> str:
    """Why one trial breaks condition (a), or ""."""
    commit, name = str(row["run_commit"]), _name(row)
    if str(row["run_clean"]).lower() != "true":
        return (f"trial {name} ran from a working tree that differed from its commit "
                f"{commit[:10]} (the grid file or the code changed)")
    if str(row["plan_sha"]) != want:
        return f"trial {name} ran under another plan ({row['plan_sha']}; this grid's is {want})"
    if repo.plan(commit, start) != want:
        return f"trial {name} ran from commit {commit[:10]}, which does not hold its plan"
    return ""
