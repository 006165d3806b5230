"""What a result's trials recorded beside their values, read back from the files beside runs.csv:
the plan each trial served (RECORDS, its tags and runs.csv columns; PLANS, plan.json: each
plan_sha's plan as registered, `PlanRecord`) and the code its process imported (code_sha;
CODE, code.json: each code_sha's files -> digest, `bench.codehash.imported`). Read into the
runs' `attrs` ("plans", "code"), where the pre-registration check finds them
(`bench.findings.provenance.prereg`). A file not of its form is refused with one line naming it
(ConfigError), and so is a code.json that is not there, or lacks a code_sha, where a row records
one; a plan plan.json does not hold is left to the pre-registration check (`read_plans`)."""

import json
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from bench.config import ConfigError

# what every trial records of the plan it serves (`provenance.plan.record`), and of the code its
# own process imported by the end of training (code_sha: `bench.codehash.imported`)
RECORDS = ("plan_sha", "seed_start", "plan_file", "run_commit", "run_clean", "code_sha")
PLANS, CODE = "plan.json", "code.json"  # beside runs.csv, and each trial run's artifacts


class PlanRecord(BaseModel):
    """One plan as it was registered, what a later reader needs and no code of that time: the
    plan itself (`plan`: the data whose JSON's sha256 is its plan_sha; its `analysis`, the
    analysis code's version) and the files that version hashed (`files`, paths from the
    repository's code folder, in order), each hashed as code (`bench.codehash.code`) or, for
    the plans registered before that, as bytes (`hashed`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: dict[str, Any]
    files: list[str]
    hashed: Literal["code", "bytes"] = "code"


def _json(where: Path, what: str) -> Any:
    """A JSON file beside runs.csv; ConfigError where it is not there or not JSON."""
    try:
        return json.loads(where.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{where}: not there: runs.csv records {what}") from None
    except (OSError, ValueError) as err:
        raise ConfigError(f"{where}: not JSON ({err})") from None


def _named(df: pd.DataFrame, col: str, found: dict, where: Path) -> None:
    """ConfigError for a row whose `col` the file beside runs.csv does not hold."""
    for i, sha in df[col].items():
        if isinstance(sha, str) and sha not in found:
            raise ConfigError(f"{where}: no {col} {sha}, which runs.csv line {i + 2} records")


def read_code(df: pd.DataFrame, path: Path) -> None:
    """Where the rows of runs.csv (`path`) record code_sha, code.json beside it as
    `df.attrs["code"]`, what the pre-registration check names a file that differs between
    looks with; ConfigError where it is not there, not JSON of that form, or lacks a code_sha a
    row records."""
    if "code_sha" not in df or df["code_sha"].isna().all():
        return
    where = path.parent / CODE
    records = _json(where, "code_sha (the code each trial imported), and code.json beside it "
                           "names each code_sha's files")
    if not isinstance(records, dict) or not all(
            isinstance(f, dict) and all(isinstance(v, str) for v in f.values())
            for f in records.values()):
        raise ConfigError(f"{where}: not a code record: a mapping of each code_sha to its "
                          "files' digests (path -> hex)")
    _named(df, "code_sha", records, where)
    df.attrs["code"] = records


def plans(found: Any, where: str) -> dict[str, PlanRecord]:
    """plan.json's content as records (each plan_sha -> `PlanRecord`); ConfigError naming
    `where` and what is wrong."""
    if not isinstance(found, dict):
        raise ConfigError(f"{where}: not a plan record: a mapping of each plan_sha to its plan, "
                          "files and hashing")
    out = {}
    for sha, record in found.items():
        try:
            out[str(sha)] = PlanRecord.model_validate(record)
        except ValidationError as err:
            first = err.errors()[0]
            at = ".".join(map(str, (sha, *first["loc"])))
            raise ConfigError(f"{where}: {at}: {first['msg']} (a plan record holds plan, files "
                              "and hashed)") from None
    return out


def read_plans(df: pd.DataFrame, path: Path) -> None:
    """Where the rows of runs.csv (`path`) record plan_sha, plan.json beside it as
    `df.attrs["plans"]` (`plans`); ConfigError where it is there but not of that form. A plan
    it lacks, or no plan.json (trials run before the plan was logged whole with them), is read
    as no record: the pre-registration check names the plan and the findings are unverified."""
    if "plan_sha" not in df or df["plan_sha"].isna().all():
        return
    where = path.parent / PLANS
    df.attrs["plans"] = plans(_json(where, "plan_sha"), str(where)) if where.is_file() else {}
