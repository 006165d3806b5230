"""Plain helpers that several test files share (their fixtures are in tests/conftest.py), so no
test file imports another: the smoke grid written under changes, a sweep's environment and its
MLflow runs, a tracking server, the smoke preset's small training config and trials, scratch git
repositories at given dates, and the family rule as it was before each claim's own contrary
counted."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml
from mlflow import MlflowClient

import variants
from bench.config import parse_sets, resolve
from bench.experiment.open import Overrides, open_grid
from bench.findings.statistics import sequential
from bench.findings.statistics.stats import ALPHA
from bench.sweep.trials import resolve_trials
from tests.limits import HANG
from tests.plugins import hold

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "examples" / "smoke.yaml"

# --- grid files -------------------------------------------------------------------------------


def write_grid(tmp: Path, name: str, **changes) -> Path:
    """The smoke grid under `changes`; a grid given claims names no design seeds unless told."""
    grid = {**yaml.safe_load(SMOKE.read_text()), "name": name,
            **({"design_seeds": []} if "claims" in changes else {}), **changes}
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


# --- a sweep's processes and its MLflow runs ----------------------------------------------------


def cli_env(tmp: Path) -> dict:
    """This environment for a command the test starts: no tracking URI or Ray address of the
    session's, its temporary files under `tmp`, its output unbuffered."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    return {**env, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}


def held_env(tmp: Path, k: int) -> dict:
    """cli_env with the hold plugin (tests/plugins/hold.py): the first k trials to start
    training train, every later one waits in its worker, so a test that cuts a sweep knows how
    many trials finished, whatever the CPU's speed or core count."""
    return {**cli_env(tmp), **hold.env(k)}


def client(tmp: Path) -> MlflowClient:
    """The client of the store a sweep into `tmp`/results writes."""
    return MlflowClient(f"sqlite:///{tmp / 'results' / 'mlflow.db'}")


def trial_runs(tmp: Path, grid: str) -> list:
    """The trial runs of grid `grid` in that store."""
    c = client(tmp)
    exp = c.get_experiment_by_name(grid)
    return c.search_runs([exp.experiment_id], "tags.`attnbench.role` = 'trial'")


def wait_for_a_finished_run(tmp: Path, grid: str, driver: subprocess.Popen) -> None:
    """Until one trial's MLflow run is FINISHED (result.json is written just before its run is
    closed, so waiting for that file alone races the close)."""
    trials = tmp / "results" / grid / "trials"
    deadline = time.time() + HANG
    while time.time() < deadline and driver.poll() is None:
        if list(trials.glob("*/result.json")) and any(
                r.info.status == "FINISHED" for r in trial_runs(tmp, grid)):
            return
        time.sleep(0.2)
    raise AssertionError(f"no trial of {grid} finished in time")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlflow_server(store: Path, tmp: Path) -> tuple[subprocess.Popen, str]:
    """`mlflow server` over HTTP on 127.0.0.1 (the recipe's shared store), once it answers;
    as the recipe starts it, without MLflow's job runner (seven Huey processes for its GenAI
    jobs, which a store of runs never asks for)."""
    port = free_port()
    server = subprocess.Popen(
        [Path(sys.executable).parent / "mlflow", "server", "--backend-store-uri",
         f"sqlite:///{store}", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=tmp, env={**cli_env(tmp), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + HANG
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return server, url
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"mlflow server at {url} did not answer in {HANG} s")


# --- training configs and trials --------------------------------------------------------------

SMALL = ["model.dropout=0.1", "train.steps=12", "train.eval_every=4", "train.eval_tokens=400",
         "train.warmup=4", "data.n_chars=40000"]  # on the smoke preset's sizes


def small_cfg(*extra):
    """The smoke preset, SMALL and `extra` on top, and a ramp of 8 where the variant's spans
    are learned."""
    tree = parse_sets(SMALL + list(extra))
    if "ramp" in variants.options(tree["model"].get("variant", "fixed")):
        tree["model"].setdefault("attn", {})["ramp"] = 8
    return resolve(tree, "smoke")


def smoke_trials(sets: list[str], data: str | None = None) -> list:
    """The smoke grid's trials (bench.trial.Trial) under `sets` and `data`, as a sweep
    resolves them."""
    overrides = Overrides(parse_sets(sets), data=data)
    return resolve_trials(open_grid(SMOKE, overrides), dry_run=False)


# --- scratch git repositories -----------------------------------------------------------------

BEFORE, RAN = "2026-01-02T10:00:00+00:00", "2026-01-02 11:00:00+00:00"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def commit(repo: Path, when: str, message: str = "a commit") -> str:
    """Everything in `repo` committed, authored and committed at `when`; its hash."""
    git(repo, "add", "-A")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", message], cwd=repo, check=True,
                   env={"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when,
                        "PATH": "/usr/bin:/bin"})
    return git(repo, "rev-parse", "HEAD").strip()


# --- the family rule before ---------------------------------------------------------------------


def old_rule(claims_, looks, alpha=ALPHA):
    """The rule before: each claim reproduced at alpha less the contraries before it (not its
    own), each contrary at alpha / (2m), the last claim's at what is left."""
    out, spent = [], 0.0
    for i, c in enumerate(claims_):
        share = alpha - spent if i == len(claims_) - 1 else min(
            max(alpha / (2 * len(claims_)), sequential.min_attainable_alpha(c, looks[-1])),
            alpha - spent)
        out.append(sequential.Budget(alpha - spent, share))
        spent += min(share, sequential.opposite_boundaries(
            looks, c.test, c.exact, c.parts, share, c.equivalent)[-1].error * c.parts)
    return out
