"""Pre-registration checked by the machine: did every confirmation trial run from a commit that
holds the analysis plan it served, and was that plan committed before the first of them began?

The plan (`plan`) is recorded by every trial as its hash (plan_sha, with seed_start, plan_file,
run_commit, run_clean; MLflow records each trial's start_time and the trial's process its
code_sha), and whole in plan.json beside runs.csv: the plan's data, whose hash is plan_sha, and
the files its analysis version hashed (`records.PlanRecord`). A commit holds a plan where its
grid file states the plan's sections as the grid file given states them (the YAML's claims,
seeds, design seeds, base, axes, exclusions, status and scheduler, as far as the plan holds
them) and the files the plan names, hashed as it hashed them, give its analysis version: read
from git with today's code (`bench.codehash.code`), never with the code of that time.

`check` reads those columns of the runs, and plan.json. The findings are:
- `confirmatory` where (a) every trial on a seed outside the design seeds ran clean from a
  commit that holds the plan it recorded, that plan is the grid file's as given (no
  command-line override; a seed start other than the file's must be one of its registered
  `replications`), and (b) the plan's first commit is an ancestor of every run commit and was
  committed before the first of those trials started, and no commit the check rests on has a
  date that cannot be true (older than one of its parents, or a run commit made after a trial
  that names it started), and the trials ran one version of the code that trains
  (`trained.apart`);
- `exploratory` where a trial ran under another plan, from a changed working tree, or from a
  commit that does not hold its plan, or the plan was committed after the trials began, or
  the trials ran different code that trains; the reason names the trial, or the file;
- `unverified` where the trials record none of this, their plan is not in plan.json (or is
  not the plan its hash names), or git cannot say (no repository, a commit that is not in
  it): never confirmatory.
The registered analysis is the code at the plan's first commit (`Registration.commit`): a
result stays what its plan made it when the code changes later, and `bench.verify` recomputes
it with that code as well as today's (`verify`: the command every version has). Git's times
are set by whoever commits, so the check catches mistakes and edits after the fact, not a
determined forger (docs/claims.md says what would anchor time outside git).
"""

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bench.experiment.grid import Grid, Looks
from bench.experiment.open import data_of
from bench.findings.reading.records import PlanRecord

from . import plan
from .git import git
from .trained import apart

# the grid file's sections a plan holds (the rest of a plan is alpha, the analysis version and
# the command line's overrides): where a commit's grid file states them as the grid file given
# does, it states that plan
SECTIONS = ("claims", "seeds", "design_seeds", "base", "grid", "exclude", "status", "scheduler")


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


def sections(text: str | None, record: PlanRecord) -> dict | None:
    """The sections of a grid file's text that `record`'s plan holds (SECTIONS), as YAML data
    (comments and layout aside), the seeds' withdrawn starts aside (publication metadata, not
    the plan: `plan.plan_of` leaves them out); None where there is no file or it is not YAML."""
    if (data := data_of(text)) is None:
        return None
    out = {k: data.get(k) for k in SECTIONS if k in record.plan}
    if isinstance(out.get("seeds"), dict):
        out["seeds"] = {k: v for k, v in out["seeds"].items() if k != "withdrawn"}
    return out


class _Repo:
    """A repository read at its commits: the grid file and the analysis code's files (cached
    per commit and path), and whether a commit holds a plan (module doc)."""

    def __init__(self, root: Path, plan_file: str) -> None:
        self.root, self.plan_file = root, plan_file
        self.files: dict[tuple[str, str], str | None] = {}
        top = plan.ROOT.resolve()  # the analysis code's folder in the repository ("" at its top)
        rel = top.relative_to(root).as_posix() if top.is_relative_to(root) else None
        self.code = None if rel is None else "" if rel == "." else f"{rel}/"

    def show(self, commit: str, path: str) -> str | None:
        """A file's text at `commit` (None: not there)."""
        if (commit, path) not in self.files:
            self.files[commit, path] = git(self.root, "show", f"{commit}:{path}")
        return self.files[commit, path]

    def version(self, commit: str, paths: list[str], hashed: str = "code") -> str:
        """The analysis version of the files `paths` at `commit` (`plan.version`); of today's
        files where the analysis code is not in the repository."""
        if self.code is None:
            return plan.version(plan.here(paths), paths, hashed)
        return plan.version({p: (self.show(commit, f"{self.code}{p}") or "").encode()
                             for p in paths}, paths, hashed)

    def holds(self, commit: str, record: PlanRecord, given: dict | None) -> bool:
        """Whether `commit` holds the plan of `record`: its grid file states the plan's sections
        as `given` does, and its files give the plan's analysis version."""
        at = sections(self.show(commit, self.plan_file), record)
        return at is not None and at == given and self.version(
            commit, record.files, record.hashed) == record.plan.get("analysis")

    def first(self, record: PlanRecord, given: dict | None, run: str
              ) -> tuple[str, pd.Timestamp] | None:
        """The plan's first commit: the first of the unbroken line of commits that hold it
        (`holds`) ending at run commit `run`, walking back through the commits that changed
        the grid file or a file the plan names (it can change nowhere else); None where `run`
        does not hold it."""
        paths = [self.plan_file, *(f"{self.code}{p}" for p in record.files
                                   if self.code is not None)]
        log = git(self.root, "log", "--format=%H %cI", run, "--", *paths) or ""
        found = None
        for line in log.splitlines():
            commit, when = line.split()
            if not self.holds(commit, record, given):
                break
            found = commit, pd.Timestamp(when).tz_convert("UTC")
        return found

    def moved(self, commit: str) -> bool:
        """Whether today's analysis code differs from the code of `commit` (`plan.ANALYSIS`)."""
        return self.version(commit, list(plan.ANALYSIS)) != plan.version(plan.here())

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
    `grid_file`), registered in git before they began (see the module doc); the plans as
    registered are `runs.attrs["plans"]` (plan.json: `records.read_plans`)."""
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
    top = git((grid_file or plan.ROOT).resolve().parent, "rev-parse", "--show-toplevel")
    if top is None or len(files) != 1 or "" in files:
        return _registered("unverified", f"{grid_file} is not in a git checkout" if top is None else
                     "the trials ran from a grid file outside a git checkout" if "" in files
                     else f"the trials ran from {len(files)} grid files "
                          f"({', '.join(sorted(files))})")
    repo = _Repo(Path(top.strip()), files.pop())
    text = grid_file.read_text() if grid_file is not None and grid_file.is_file() else None
    return _verify(repo, grid, conf, text, runs.attrs)


def _plan_of(conf: pd.DataFrame, start: int | None, plans: dict[str, PlanRecord]
             ) -> tuple[str, PlanRecord] | Registration:
    """The plan the trials of seed start `start` recorded and its record as registered
    (plan.json); else the registration it makes: several plans (exploratory), a plan no record
    holds, or a record that is not the plan its hash names (unverified)."""
    recorded = sorted(set(conf["plan_sha"].astype(str)))
    if len(recorded) > 1:
        return _registered("exploratory", f"the trials of seed start {start} ran under "
                           f"{len(recorded)} plans ({', '.join(recorded)})")
    want = recorded[0]
    record = plans.get(want)
    if record is None:
        return _registered("unverified", f"the trials record plan {want}, which no plan record "
                           "(plan.json beside runs.csv) holds")
    if (found := plan.digest(record.plan)) != want:
        return _registered("unverified", f"plan.json's record of plan {want} is not that plan "
                           f"(its hash is {found})")
    return want, record


def _verify(repo: _Repo, grid: Grid, conf: pd.DataFrame, grid_text: str | None,
            attrs: dict) -> Registration:
    """Conditions (a) and (b) of the module doc, trial by trial, and one version of the code
    that trains (`trained.apart`; `attrs["code"]`: code.json, `records.read_code`)."""
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
        got = _plan_of(mine, start, attrs.get("plans", {}))
        if isinstance(got, Registration):
            return got
        want, record = got
        first_run = str(mine.at[began[mine.index].idxmin(), "run_commit"])
        given = sections(grid_text if grid_text is not None else
                         repo.show(first_run, repo.plan_file), record)
        for _, row in mine.iterrows():
            commit = str(row["run_commit"])
            if commit in absent:
                return _registered("unverified", f"trial {_name(row)} ran from commit "
                                           f"{commit[:10]}, not in this repository")
            if why := _trial_fault(repo, row, (want, record, start), given):
                return _registered("exploratory", why)
        found = repo.first(record, given, first_run)
        if found is None:
            return _registered("exploratory", f"no commit of {repo.plan_file} holds this plan "
                                        f"(plan {want})")
        firsts.append(found)
        said.append(f"plan {want} (seeds from {start}) first committed in {found[0][:10]} at "
                    f"{found[1]:%Y-%m-%d %H:%M:%S} UTC")
    if why := _timeline(repo, conf, began, firsts) or apart(
            repo.root, repo.code or "", conf, repo.plan_file, attrs.get("code", {})):
        return _registered("exploratory", why)
    commits = ", ".join(sorted({c[:10] for c in conf["run_commit"].astype(str)}))
    first = min(firsts, key=lambda f: f[1])[0]
    return Registration(
        f"Pre-registration: confirmatory: {'; '.join(said)}, before the first confirmation "
        f"trial started ({began.min():%Y-%m-%d %H:%M:%S} UTC); all {len(conf)} confirmation "
        f"trials ran from commits holding it ({commits}), with the grid file and the code as "
        "committed.", "confirmatory", commit=first, code_moved=repo.moved(first))


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


def _trial_fault(repo: _Repo, row: pd.Series, served: tuple[str, PlanRecord, int | None],
                 given: dict | None) -> str:
    """Why one trial breaks condition (a), or "": a working tree that differed from its
    commit; a plan that is not the grid file's as given (`served`: the plan's hash, its
    record and the trial's seed start; `given`: the grid file's sections, `sections`), run with
    command-line overrides, from another seed start or from another grid file; a commit that
    does not hold its plan."""
    commit, name = str(row["run_commit"]), _name(row)
    want, record, start = served
    if str(row["run_clean"]).lower() != "true":
        return (f"trial {name} ran from a working tree that differed from its commit "
                f"{commit[:10]} (the grid file or the code changed)")
    seeds, overrides = record.plan.get("seeds"), record.plan.get("overrides")
    ran = sections(repo.show(commit, repo.plan_file), record)
    if overrides or isinstance(seeds, dict) and seeds.get("start") != start or ran != given:
        what = (f"the command line's {', '.join(sorted(overrides))}" if overrides else
                f"seeds from {seeds.get('start')}" if ran == given else
                f"its grid file at {commit[:10]} states other "
                + ", ".join(k for k in SECTIONS if (ran or {}).get(k) != (given or {}).get(k))
                + " than this one")
        return f"trial {name} ran under another plan ({want}: {what})"
    if not repo.holds(commit, record, given):
        return (f"trial {name} ran from commit {commit[:10]}, which does not hold its plan "
                "(its analysis code is not the plan's)")
    return ""
