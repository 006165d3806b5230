"""Pre-registration checked by the machine: was the grid file, with the claims its trials were
run for, committed before the first confirmation trial started?

Every trial records when it started (MLflow's start time: `start_time` in runs.csv, UTC) and
the hash of the claims it was run to test (`claims_sha`, `claims_sha` below). The grid file's
git history (or that of `ablations/<name>.yaml`, the file a result's copy was run from) says
when each version was committed (committer time): the earliest commit whose claims hash the
same is the registration. Where it came after the first trial on a seed outside
`design_seeds`, or no commit holds these claims, the findings are exploratory. Runs that predate
start times, and a grid file outside a git checkout, cannot be checked, and the findings say so.
"""

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from bench.experiment.claims import Claim, parse
from bench.experiment.grid import Grid


def claims_sha(claims: list[Claim]) -> str:
    """The first 16 hex digits of the sha256 of the claims as JSON (their order included)."""
    text = json.dumps([c.model_dump(mode="json") for c in claims], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Registration:
    """What the findings say of pre-registration: `line`, and `late`: the reason the findings
    are exploratory (None where the grid file was registered in time or cannot be checked)."""

    line: str
    late: str | None = None


def _git(where: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                             check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def _first(root: Path, rel: str, sha: str) -> tuple[str, pd.Timestamp, str] | None:
    """(commit, its time, rel) of the first commit of file `rel` whose claims hash to `sha`."""
    for line in (_git(root, "log", "--reverse", "--format=%H %cI", "--", rel) or "").splitlines():
        commit, when = line.split()
        try:
            raw = yaml.safe_load(_git(root, "show", f"{commit}:{rel}") or "") or {}
            found = claims_sha(parse(raw.get("claims")))
        except (yaml.YAMLError, ValueError, AttributeError):
            continue
        if found == sha:
            return commit, pd.Timestamp(when).tz_convert("UTC"), rel
    return None


def _registered(grid_file: Path, name: str, sha: str
                ) -> tuple[str, pd.Timestamp, str] | None | str:
    """(commit, its time, the path in the repository) of the first commit of the grid file, or
    of the repository's `ablations/<name>.yaml` (the file a result's copy was run from), whose
    claims hash to `sha`; None where none does; a reason string where git cannot say."""
    top = _git(grid_file.resolve().parent, "rev-parse", "--show-toplevel")
    if top is None:
        return f"{grid_file} is not in a git checkout"
    root = Path(top.strip())
    rels = dict.fromkeys([grid_file.resolve().relative_to(root).as_posix(),
                          f"ablations/{name}.yaml"])
    if not any(_git(root, "log", "-1", "--format=%H", "--", rel) for rel in rels):
        return f"{', '.join(rels)}: no git history here (a shallow clone, or never committed)"
    found = [f for rel in rels if (f := _first(root, rel, sha))]
    return min(found, key=lambda f: f[1]) if found else None


def check(grid_file: Path | None, grid: Grid, runs: pd.DataFrame) -> Registration:
    """Whether `grid_file` (or `ablations/<name>.yaml` beside it in git) with the grid's claims
    was committed before the first trial of `runs` on a seed outside its design seeds started
    (see the module doc)."""
    if not grid.claims:
        return Registration("")
    seeds = runs.get("seed", runs.get("train.seed", pd.Series(dtype=float)))
    starts = pd.to_datetime(runs.get("start_time", pd.Series(dtype=object)), utc=True,
                            errors="coerce")[~seeds.isin(grid.design_seeds or [])].dropna()
    if starts.empty:
        return Registration("Pre-registration: not checked (the runs record no start times: "
                            "they predate them).")
    first, sha = starts.min(), claims_sha(grid.claims)
    other = runs.get("claims_sha", pd.Series(dtype=object)).dropna()
    note = (f" {int((other != sha).sum())} of the runs were run for other claims."
            if (other != sha).any() else "")
    if grid_file is None:
        return Registration("Pre-registration: not checked (no grid file path)." + note)
    found = _registered(grid_file, grid.name, sha)
    if isinstance(found, str):
        return Registration(f"Pre-registration: not checked ({found})." + note)
    if found is None:
        why = (f"no commit of {grid_file.name} holds these claims (claims {sha}); the first "
               f"confirmation trial started {first:%Y-%m-%d %H:%M} UTC")
        return Registration(f"Pre-registration: exploratory: {why}." + note, why)
    commit, when, rel = found
    said = (f"{rel} with these claims (claims {sha}) was committed in {commit[:10]} at "
            f"{when:%Y-%m-%d %H:%M:%S} UTC")
    if when <= first:
        return Registration(f"Pre-registration: {said}, before the first confirmation trial "
                            f"started ({first:%Y-%m-%d %H:%M:%S} UTC)." + note)
    why = f"{said}, after the first confirmation trial started ({first:%Y-%m-%d %H:%M:%S} UTC)"
    return Registration(f"Pre-registration: exploratory: {why}." + note, why)
