"""Pre-registration checked by the machine: did every confirmation trial run from a commit that
holds the analysis plan it served, and was that plan committed before the first of them began?

The plan is what a verdict depends on beyond the data: the claims, the looks and futility,
the seeds' start, the design seeds, alpha, the trials the grid runs (any command-line override
makes another plan) and the version of the analysis code: every module that can move a verdict
from the per-seed values (`ANALYSIS`: reading runs.csv, the claims, the statistics, the
no-recall floors and vacuity, the sequence, this check), hashed as code, its docstrings and
comments aside (`analysis_version`), so that a reworded docstring or comment changes no plan.
When a sweep starts, its driver records with every trial (`record`): `plan_sha` (the plan's
hash), `seed_start`, `plan_file` (the grid file, relative to its repository), `run_commit`
(HEAD) and `run_clean` (whether what can change a run was as committed there: the tracked
files, results/ and runs/ aside, and the untracked files a trial imports or reads as its plan,
`uncommitted`; a notes file or a scratch grid beside them changes nothing); MLflow records
each trial's `start_time`, and the trial's own process, at the end of training, `code_sha`:
the code it imported (`bench.codehash.imported`; its files in code.json beside runs.csv,
`perseed.read`).

`check` reads those columns of the runs. The findings are:
- `confirmatory` where (a) every trial on a seed outside the design seeds ran clean from a
  commit whose grid file and analysis code give the plan it recorded, and that plan is the one
  verified now (the grid file as given; a seed start other than the file's must be one of its
  registered `replications`), and (b) the plan's first commit is an ancestor of every run
  commit and was committed before the first of those trials started, and no commit the check
  rests on has a date that cannot be true (older than one of its parents, or a run commit
  made after a trial that names it started), and the trials ran one version of the code that
  trains (`trained.apart`);
- `exploratory` where a trial ran under another plan, from a changed working tree, or from a
  commit that does not hold its plan, or the plan was committed after the trials began, or
  the trials ran different code that trains; the reason names the trial, or the file;
- `unverified` where the trials record none of this, or git cannot say (no repository, a
  commit that is not in it): never confirmatory.
The registered analysis is the code at the plan's first commit (`Registration.commit`): a
result stays what its plan made it when the code changes later, and `bench.verify` recomputes
it with that code as well as today's. A plan today's code does not give (a field added to the
schema since, another alpha) is computed by the code of the commit that recorded it
(`registered`), so a change of the code never turns a registered plan into "another plan".
Git's times are set by whoever commits, so the check catches mistakes and edits after the
fact, not a determined forger (docs/claims.md says what would anchor time outside git).
"""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.codehash import code
from bench.config import ConfigError
from bench.experiment.grid import Grid, Looks
from bench.experiment.open import GridText, open_grid

from . import registered
from .stats import ALPHA
from .trained import apart, git

ROOT = Path(__file__).resolve().parents[2]
# the modules whose code can move a verdict from a result's per-seed values: part of the plan
# (a test checks that every module of bench they import is here, or only parses the grid file,
# whose output the plan holds as data)
ANALYSIS = (*(f"bench/findings/{m}.py" for m in (
    "verdicts", "evidence", "sequential", "stats", "samples", "bounds", "numbers", "perseed",
    "prereg", "judge", "verify", "registered", "vacuity", "costs", "said", "trained")),
    "bench/experiment/claims.py", "bench/metrics.py", "bench/codehash.py",
    # the no-recall floors and their noise bars, closed forms of the grid's data (`vacuity`)
    "bench/experiment/floors.py", "bench/data/corpus.py",
    *(f"bench/data/probes/{m}.py" for m in ("base", "recall", "conjunctive", "mqar")))
# what plans recorded before the analysis was hashed as code held: these files' bytes
ANALYSIS_BYTES = tuple(f"bench/findings/{m}.py" for m in ("verdicts", "sequential", "stats",
                                                          "samples", "bounds"))
# what every trial records of the plan it serves (`record`), and of the code its own process
# imported by the end of training (code_sha: `bench.codehash.imported`, its files in code.json)
RECORDS = ("plan_sha", "seed_start", "plan_file", "run_commit", "run_clean", "code_sha")
PACKAGES = ("bench/", "variants/")  # the tree's code a trial imports
# the code a plan's hash can depend on: the analysis, the grid file's parser, the options
PLAN_CODE = ("bench/findings", "bench/experiment", "bench/config.py", "bench/metrics.py",
             "bench/declare.py", "variants")

def analysis_version(files: dict[str, bytes]) -> str:
    """The first 12 hex digits of the sha256 of the ANALYSIS modules as code (`code`;
    path -> source, a missing one empty)."""
    h = hashlib.sha256()
    for path in ANALYSIS:
        h.update(path.encode() + b"\0" + code(files.get(path, b"")) + b"\0")
    return h.hexdigest()[:12]


def _bytes_version(files: dict[str, bytes]) -> str:
    """The analysis version the plans recorded before `analysis_version`: ANALYSIS_BYTES's
    bytes, so that those trials' records can still be matched."""
    h = hashlib.sha256()
    for path in ANALYSIS_BYTES:
        h.update(path.encode() + b"\0" + files.get(path, b"") + b"\0")
    return h.hexdigest()[:12]


def _here() -> dict[str, bytes]:
    return {p: (ROOT / p).read_bytes() for p in {*ANALYSIS, *ANALYSIS_BYTES}
            if (ROOT / p).is_file()}


def _analysis_here() -> str:
    return analysis_version(_here())


def plan_sha(grid: Grid, start: int | None, analysis: str, overrides: dict | None = None) -> str:
    """The first 16 hex digits of the sha256 of the plan (module doc) as JSON: the grid's claims,
    seeds (looks, futility and registered replications, the start given), design seeds, base,
    axes and exclusions, status (a pilot promoted after its data is another plan), scheduler,
    alpha, the analysis code's version and any command-line overrides."""
    seeds = grid.seeds
    if isinstance(seeds, Looks):
        seeds = {"looks": seeds.looks, "futility": seeds.futility, "start": start}
        seeds["replications"] = grid.seeds.replications
    plan = {"claims": [c.model_dump(mode="json") for c in grid.claims], "seeds": seeds,
            "design_seeds": grid.design_seeds, "alpha": ALPHA, "analysis": analysis,
            "base": grid.base.model_dump(mode="json"), "grid": grid.grid,
            "exclude": grid.exclude, "overrides": overrides or {}, "status": grid.status,
            "scheduler": grid.scheduler.model_dump(mode="json")}
    text = json.dumps(plan, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _start(grid: Grid) -> int | None:
    return grid.seeds.start if isinstance(grid.seeds, Looks) else None


def record(grid: Grid, grid_file: Path, overrides: dict, plugins: Iterable[str] = ()
           ) -> dict[str, str]:
    """What a sweep's trials record of the plan they serve (RECORDS), from the grid file as read
    with the seeds it runs (`grid`: a --seed-start applied, nothing else), the command line's
    other overrides (empty: none) and the plugins its trials import; `run_clean` where nothing
    that can change a run differs from the commit (`uncommitted`)."""
    start = _start(grid)
    top = git(grid_file.resolve().parent, "rev-parse", "--show-toplevel")
    out = {"plan_sha": plan_sha(grid, start, _analysis_here(), overrides),
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
        code, path = line[:2], line[3:].split(" -> ")[-1].strip('"')
        if code != "??" or path.startswith(PACKAGES) or (root / path).resolve() in read:
            out.append(path)
    return out


@dataclass(frozen=True)
class Registration:
    """What the findings say of pre-registration: `line`; `evidence` (confirmatory,
    exploratory or unverified; None without claims or confirmation trials) and `why` not
    confirmatory; `commit`, the plan's first commit where one was found (its analysis code is
    the registered one), and `code_moved`, whether today's analysis code differs from it."""

    line: str
    evidence: str | None = None
    why: str = ""
    commit: str | None = None
    code_moved: bool = False


class _Repo:
    """The plans a repository's commits hold (cached per commit and start)."""

    def __init__(self, root: Path, plan_file: str) -> None:
        self.root, self.plan_file, self.seen, self.code_at = root, plan_file, {}, {}
        self.owned: dict[tuple[str, str, int | None], str | None] = {}
        top = ROOT.resolve()  # the analysis code's folder in the repository ("" at its top)
        rel = top.relative_to(root).as_posix() if top.is_relative_to(root) else None
        self.code = None if rel is None else "" if rel == "." else f"{rel}/"

    def analyses(self, commit: str) -> tuple[str, str]:
        """The analysis code's version at `commit` (`analysis_version`), and the one plans
        recorded before it (`_bytes_version`); today's where the code is not in the
        repository."""
        if commit not in self.code_at:
            files = _here() if self.code is None else {
                p: (git(self.root, "show", f"{commit}:{self.code}{p}") or "").encode()
                for p in {*ANALYSIS, *ANALYSIS_BYTES}}
            self.code_at[commit] = (analysis_version(files), _bytes_version(files))
        return self.code_at[commit]

    def plans(self, commit: str, start: int | None) -> set[str]:
        """The plan's hashes at `commit` for seed start `start` (the file's own start or one
        of its registered replications), with its analysis code either way (`analyses`);
        empty where the commit holds no readable grid file or does not register that start."""
        key = (commit, start)
        if key not in self.seen:
            self.seen[key] = self._plans(commit, start)
        return self.seen[key]

    def _plans(self, commit: str, start: int | None) -> set[str]:
        text = git(self.root, "show", f"{commit}:{self.plan_file}")
        try:
            grid = open_grid(GridText(text or "", f"{self.plan_file} at {commit[:10]}",
                                      self.root), imports=False)
        except ConfigError:
            return set()
        if isinstance(grid.seeds, Looks) and start not in (grid.seeds.start,
                                                            *grid.seeds.replications):
            return set()
        return {plan_sha(grid, start, a) for a in self.analyses(commit)}

    def own(self, commit: str, text: str, start: int | None) -> str | None:
        """The plan's hash of grid file `text` for seed start `start` as the code of `commit`
        computes it (its bench/ and variants/ from git into a scratch folder, run there: the
        plan its trials recorded, whatever today's schema, parser or alpha), None where that
        code cannot read it or git cannot give it. Today's code first (`plans`); this where a
        field, an option or the analysis changed since."""
        key = (commit, hashlib.sha256(text.encode()).hexdigest(), start)
        if key not in self.owned:
            self.owned[key] = registered.plan(self.root, self.code or "", commit, text,
                                              Path(self.plan_file).name, start)
        return self.owned[key]

    def holds(self, commit: str, want: str, start: int | None) -> bool:
        """Whether `commit` holds plan `want` for `start`: with today's code (`plans`), else
        with its own (`own`)."""
        if want in self.plans(commit, start):
            return True
        text = git(self.root, "show", f"{commit}:{self.plan_file}")
        return text is not None and self.own(commit, text, start) == want

    def first_own(self, want: str, start: int | None, run: str
                  ) -> tuple[str, pd.Timestamp] | None:
        """Where today's code finds no commit of plan `want` (`first`): the first commit of
        the unbroken line of commits holding it by their own code (`holds`) that ends at the
        first trial's run commit, walking back through the commits that changed the plan
        file or the code that reads it (PLAN_CODE); None where none holds it."""
        paths = [self.plan_file, *(f"{self.code}{p}" for p in PLAN_CODE
                                   if self.code is not None)]
        log = git(self.root, "log", "--format=%H %cI", run, "--", *paths) or ""
        found = None
        for line in log.splitlines():
            commit, when = line.split()
            if not self.holds(commit, want, start):
                break
            found = commit, pd.Timestamp(when).tz_convert("UTC")
        return found

    def first(self, want: str, start: int | None) -> tuple[str, pd.Timestamp] | None:
        """The first commit whose plan is `want` (of those that changed the plan file or the
        analysis code: the plan can change nowhere else), and its committer time."""
        code = ([f"{self.code}{p}" for p in sorted({*ANALYSIS, *ANALYSIS_BYTES})]
                if self.code is not None else [])
        log = git(self.root, "log", "--reverse", "--format=%H %cI", "--", self.plan_file,
                   *code) or ""
        for line in log.splitlines():
            commit, when = line.split()
            if want in self.plans(commit, start):
                return commit, pd.Timestamp(when).tz_convert("UTC")
        return None

    def dates(self, commit: str) -> tuple[pd.Timestamp, list[tuple[str, pd.Timestamp]]]:
        """A commit's committer time and its parents' (hash, time)."""
        lines = (git(self.root, "log", "-1", "--format=%cI", commit) or "").split()
        parents = (git(self.root, "log", "-1", "--format=%P", commit) or "").split()
        theirs = [(c, pd.Timestamp((git(self.root, "log", "-1", "--format=%cI", c) or "")
                                   .strip()).tz_convert("UTC")) for c in parents]
        return pd.Timestamp(lines[0]).tz_convert("UTC"), theirs


def _confirmation(grid: Grid, runs: pd.DataFrame) -> pd.DataFrame:
    seeds = runs.get("seed", runs.get("train.seed", pd.Series(dtype=float)))
    return runs[~seeds.isin(grid.design_seeds or [])]


def _name(row: pd.Series) -> str:
    return str(row.get("trial", row.name))


def _registered(evidence: str, why: str) -> Registration:
    return Registration(f"Pre-registration: {evidence}: {why}.", evidence, why)


def check(grid_file: Path | None, grid: Grid, runs: pd.DataFrame) -> Registration:
    """Whether the confirmation trials of `runs` served the plan of `grid` (read from
    `grid_file`), registered in git before they began (see the module doc)."""
    conf = _confirmation(grid, runs)
    if not grid.claims or conf.empty:
        return Registration("")
    lacking = [k for k in ("start_time", "plan_sha", "run_commit", "run_clean")
               if k not in conf or conf[k].isna().any()]
    if some := [k for k in lacking if k in conf and conf[k].notna().any()]:
        blank = conf.index[conf[some[0]].isna()]
        named = ", ".join(_name(conf.loc[i]) for i in blank[:3]) + (", ..." if len(blank) > 3
                                                                    else "")
        return _registered("unverified", f"{len(blank)} of {len(conf)} confirmation trials "
                           f"record no {some[0]} ({named}), which the others record: a record "
                           "lost or removed")
    if lacking:
        return _registered("unverified", f"{len(conf)} confirmation trials do not record "
                                   f"{', '.join(lacking)} (they predate the plan records)")
    files = set(conf["plan_file"].fillna("").astype(str))
    top = git((grid_file or ROOT).resolve().parent, "rev-parse", "--show-toplevel")
    if top is None or len(files) != 1 or "" in files:
        return _registered("unverified", f"{grid_file} is not in a git checkout" if top is None else
                     "the trials ran from a grid file outside a git checkout" if "" in files
                     else f"the trials ran from {len(files)} grid files "
                          f"({', '.join(sorted(files))})")
    repo = _Repo(Path(top.strip()), files.pop())
    text = grid_file.read_text() if grid_file is not None and grid_file.is_file() else None
    return _verify(repo, grid, conf, text, runs.attrs.get("code", {}))


def _verify(repo: _Repo, grid: Grid, conf: pd.DataFrame, grid_text: str | None = None,
            records: dict[str, dict[str, str]] | None = None) -> Registration:
    """Conditions (a) and (b) of the module doc, trial by trial, and one version of the code
    that trains (`trained.apart`; `records`: code.json, `perseed.read`)."""
    starts = {_recorded(s) for s in conf["seed_start"]}
    began = pd.to_datetime(conf["start_time"], utc=True, format="ISO8601")
    said, firsts = [], []
    absent = {c for c in set(conf["run_commit"].astype(str))  # asked of git once each
              if git(repo.root, "cat-file", "-e", f"{c}^{{commit}}") is None}
    for start in sorted(starts, key=str):
        if isinstance(grid.seeds, Looks) and start not in (grid.seeds.start,
                                                            *grid.seeds.replications):
            return _registered("exploratory", f"seed start {start} is not registered in "
                                        f"{repo.plan_file} (seeds.replications)")
        mine = conf[conf["seed_start"].map(lambda s, st=start: _recorded(s) == st)]
        recorded = sorted(set(mine["plan_sha"].astype(str)))
        if len(recorded) > 1:
            return _registered("exploratory", f"the trials of seed start {start} ran under "
                                        f"{len(recorded)} plans ({', '.join(recorded)})")
        want = recorded[0]
        for _, row in mine.iterrows():
            commit = str(row["run_commit"])
            if commit in absent:
                return _registered("unverified", f"trial {_name(row)} ran from commit "
                                           f"{commit[:10]}, not in this repository")
            if why := _trial_fault(repo, grid, row, want, start, grid_text):
                return _registered("exploratory", why)
        found = repo.first(want, start) or repo.first_own(
            want, start, str(mine.at[began[mine.index].idxmin(), "run_commit"]))
        if found is None:
            return _registered("exploratory", f"no commit of {repo.plan_file} holds this plan "
                                        f"(plan {want})")
        firsts.append(found)
        said.append(f"plan {want} (seeds from {start}) first committed in {found[0][:10]} at "
                    f"{found[1]:%Y-%m-%d %H:%M:%S} UTC")
    if why := _timeline(repo, conf, began, firsts) or apart(
            repo.root, repo.code or "", conf, repo.plan_file, records or {}):
        return _registered("exploratory", why)
    commits = ", ".join(sorted({c[:10] for c in conf["run_commit"].astype(str)}))
    first = min(firsts, key=lambda f: f[1])[0]
    return Registration(
        f"Pre-registration: confirmatory: {'; '.join(said)}, before the first confirmation "
        f"trial started ({began.min():%Y-%m-%d %H:%M:%S} UTC); all {len(conf)} confirmation "
        f"trials ran from commits holding it ({commits}), with the grid file and the code as "
        "committed.", "confirmatory", commit=first,
        code_moved=repo.analyses(first)[0] != _analysis_here())


def _recorded(value: object) -> int | None:
    """A recorded seed start as a number (None: none recorded)."""
    return None if str(value) in ("", "nan") else int(float(str(value)))


def _timeline(repo: _Repo, conf: pd.DataFrame, began: pd.Series,
              firsts: list[tuple[str, pd.Timestamp]]) -> str:
    """Why the commits' times cannot be true, or "": a plan committed after the first trial
    began or not an ancestor of a run commit; a commit the check rests on older than one of its
    parents (backdated); a run commit made after a trial that names it started."""
    runs = sorted(set(conf["run_commit"].astype(str)))
    for commit, when in firsts:
        if when > began.min():
            return (f"{repo.plan_file}'s plan was committed in {commit[:10]} at "
                    f"{when:%Y-%m-%d %H:%M:%S} UTC, after the first confirmation trial started "
                    f"({began.min():%Y-%m-%d %H:%M:%S} UTC)")
        if apart := [c for c in runs if git(repo.root, "merge-base", "--is-ancestor", commit,
                                             c) is None]:
            return (f"the plan's first commit {commit[:10]} is not an ancestor of run commit "
                    f"{apart[0][:10]}")
    for commit in sorted({*runs, *(c for c, _ in firsts)}):
        when, parents = repo.dates(commit)
        if older := [c for c, t in parents if t > when]:
            return (f"commit {commit[:10]} is dated {when:%Y-%m-%d %H:%M:%S} UTC, before its "
                    f"parent {older[0][:10]}: a date that cannot be true")
        named = began[conf["run_commit"].astype(str) == commit]
        if len(named) and when > named.min():
            return (f"run commit {commit[:10]} is dated {when:%Y-%m-%d %H:%M:%S} UTC, after "
                    f"trial {_name(conf.loc[named.idxmin()])} that ran from it started "
                    f"({named.min():%Y-%m-%d %H:%M:%S} UTC)")
    return ""


def _trial_fault(repo: _Repo, grid: Grid, row: pd.Series, want: str, start: int | None,
                 grid_text: str | None = None) -> str:
    """Why one trial breaks condition (a), or "": a working tree that differed from its
    commit; a plan that is not the grid file's as given (with the code of that commit); a
    commit that does not hold its plan."""
    commit, name = str(row["run_commit"]), _name(row)
    if str(row["run_clean"]).lower() != "true":
        return (f"trial {name} ran from a working tree that differed from its commit "
                f"{commit[:10]} (the grid file or the code changed)")
    given = {plan_sha(grid, start, a) for a in repo.analyses(commit)}
    if want not in given and grid_text is not None and (
            own := repo.own(commit, grid_text, start)) is not None:
        given.add(own)
    if want not in given:
        return (f"trial {name} ran under another plan ({want}; this grid file's is "
                f"{min(given)} with the code of {commit[:10]})")
    if not repo.holds(commit, want, start):
        return f"trial {name} ran from commit {commit[:10]}, which does not hold its plan"
    return ""
