"""ci/gpu_grids.sh on a machine without CUDA. As a lent GPU machine whose CUDA cannot be reached
would run it: it stops at its first failing check with the reason. Rehearsed (REHEARSE=1): every
step a CPU can run passes, and a grid cut by its deadline still leaves runs.csv, findings and its
partial note. Whatever stops it (a failed check, a short LIMIT, SIGTERM, even SIGKILL of the
script), $OUT holds what was done as the device tool brings files back: at most 8 plain files at
its top, the command log and the machine among them; SIGTERM ends the running step and all it
started. Bad settings exit 2 naming them. compare.md counts the decisions the same as the CPU's
and says first what keeps a run from being a GPU result. SLOW: the rehearsal runs two sweeps."""

import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ci import bundle, compare
from tests.test_grid import write_grid
from tests.test_run import short_tmp  # noqa: F401  (a fixture: Ray's socket paths stay short)

ROOT = Path(__file__).resolve().parents[1]
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
SCRIPT = str(ROOT / "ci" / "gpu_grids.sh")
no_cuda = pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="no CUDA wanted")


def script_env(tmp: Path, built_for: str | None, **settings: str) -> dict[str, str]:
    """The script's environment: a carry/ with a bundle built for `built_for` (None: none
    carried), this Python and its packages, folders under `tmp`, and `settings`."""
    carry = tmp / "carry"
    carry.mkdir()
    if built_for:
        site = tmp / "site"
        site.mkdir()
        bundle.guard(site, built_for)
        bundle.pack(site, carry / "attnbench-py3.12.tar.xz")
    (carry / "commit").write_text("f" * 40 + "\n")
    return {**os.environ, "CARRY": str(carry), "OUT": str(tmp / "out"), "WORK": str(tmp / "work"),
            "SITE": str(tmp / "unpacked"), "PYTHON": sys.executable, "TMPDIR": str(tmp),
            "CUDA_MPS_PIPE_DIRECTORY": str(tmp / "mps"), **settings}


def run_script(tmp: Path, built_for: str | None, *grids: str,
               **settings: str) -> tuple[subprocess.CompletedProcess, Path]:
    """The script run to its end; returns its run and its output folder."""
    done = subprocess.run(["bash", SCRIPT, *(grids or ["heads_grid"])], capture_output=True,
                          env=script_env(tmp, built_for, **settings), text=True, timeout=600)
    return done, tmp / "out"


def comes_back(out: Path) -> dict[str, Path]:
    """$OUT as the device tool brings it back, checked: at most 8 plain files, all at its top
    (none in a folder), named in letters, digits, '.', '_' and '-'; returns them by name."""
    there = {p.name: p for p in out.iterdir()}
    assert len(there) <= 8 and all(p.is_file() for p in there.values()), sorted(there)
    assert all(re.fullmatch(r"[\w.-]+", n, re.ASCII) for n in there), sorted(there)
    return there


def archived(out: Path) -> list[str]:
    with tarfile.open(out / "results.tar.xz") as tar:
        return tar.getnames()


def test_the_comparison_counts_the_same_decisions_and_says_first_what_keeps_them_apart(
        tmp_path):
    """compare.md: a grid's verdicts beside the CPU's committed ones, the decisions that differ
    counted; a rehearsal and a warning (MPS not used) said before them; a grid without findings
    said to have none."""
    here = tmp_path / "results" / "heads_grid"
    here.mkdir(parents=True)
    assert compare.confirmation("heads_grid") == Path("results/seeds600/heads_grid")  # its plan
    found = pd.read_csv(ROOT / compare.confirmation("heads_grid") / "findings.csv")
    found.loc[0, "verdict"] = "contradicted"
    found.to_csv(here / "findings.csv", index=False)
    (here / "partial.md").write_text("cut\n")
    text = compare.compare(tmp_path, ["heads_grid", "span_limit"], True, ["MPS failed"])
    assert text.index("A rehearsal on the CPU") < text.index("**Warning:** MPS failed") < \
        text.index("## heads_grid (partial: cut at its deadline): "
                   f"{len(found) - 1} of {len(found)} decisions the same as "
                   "`results/seeds600/heads_grid`")
    assert "| contradicted " in text and "verdict (rehearsal)" in text
    assert "## span_limit: no findings to compare (rehearsal: False, CPU: True)" in text
    assert "verdict (GPU)" in compare.compare(tmp_path, ["heads_grid"], False, [])
    said = subprocess.run([sys.executable, "-m", "ci.compare", str(tmp_path), "heads_grid"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # a hang guard
    assert said.returncode == 0 and said.stdout.startswith("## heads_grid"), said.stderr
    assert "Warning" not in said.stderr, said.stderr  # compare.md reads as it is


@no_cuda
def test_no_cuda_stops_the_run_at_its_first_check_and_it_still_reports(tmp_path):
    done, out = run_script(tmp_path, HERE)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(comes_back(out)) == ["commands.md", "compare.md", "machine.txt",
                                       "results.tar.xz"]
    log = (out / "commands.md").read_text()
    assert "- unpack: " in log and "- guard: " in log and ": exit 0" in log
    assert "torch finds no CUDA device" in log and "STOPPED at the check imports" in log
    assert "- ray-gpu" not in log and "- heads_grid" not in log  # nothing after the failure
    assert f"commit: {'f' * 40}" in (out / "machine.txt").read_text()
    assert "heads_grid: no findings to compare" in (out / "compare.md").read_text()


def test_a_bundle_for_another_python_stops_the_run_naming_both(tmp_path):
    done, out = run_script(tmp_path, "3.99")
    log = (out / "commands.md").read_text()
    assert done.returncode == 1 and "STOPPED at the check guard" in log
    assert f"built for Python 3.99, and this is Python {HERE}" in log


def test_no_bundle_carried_stops_the_run_saying_how_to_make_one(tmp_path):
    done, out = run_script(tmp_path, None)
    log = (out / "commands.md").read_text()
    assert done.returncode == 1 and "python -m ci.bundle --python 3.12 --out carry" in log


@pytest.mark.parametrize(("settings", "grids", "said"), [
    ({"LIMIT": "7m"}, [], "LIMIT=7m: expected whole seconds"),
    ({"REHEARSE": "yes"}, [], "REHEARSE=yes: expected 1 (a rehearsal on a CPU) or 0"),
    ({}, ["heads"], "grid heads: no ablations/heads.yaml (expected a grid of ablations/ by name"),
    ({}, ["SMOKE"], "expected the grid in it named renamed")])
def test_bad_settings_exit_2_naming_them_before_anything_runs(tmp_path, settings, grids, said):
    if grids == ["SMOKE"]:  # a grid file named otherwise than its grid
        grids = [str(tmp_path / "renamed.yaml")]
        Path(grids[0]).write_text((ROOT / "ablations" / "smoke.yaml").read_text())
    done, out = run_script(tmp_path, None, *grids, **settings)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and said in done.stderr
    assert not out.exists()


def started(tmp: Path, env: dict[str, str]) -> subprocess.Popen:
    """The script rehearsing, without a bundle, once its imports check runs (the step after
    the skipped unpack, a process given its $WORK)."""
    script = subprocess.Popen(["bash", SCRIPT, "heads_grid"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log, deadline = tmp / "out" / "commands.md", time.time() + 120
    while time.time() < deadline and not (
            log.exists() and "unpack, guard: skipped" in log.read_text() and naming(tmp / "work")):
        time.sleep(0.2)
    assert naming(tmp / "work"), "the imports check never started"
    return script


def naming(work: Path) -> list[int]:
    """The processes given `work` as an argument (the imports check and what runs it)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(work).encode() in (proc / "cmdline").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_kill_at_any_moment_leaves_what_was_done(tmp_path):
    """SIGTERM during a step ends it and all it started, then packs; SIGKILL of the script
    alone still leaves the command log and the machine as the last step left them."""
    term = tmp_path / "term"
    term.mkdir()
    script = started(term, script_env(term, None, REHEARSE="1"))
    script.send_signal(signal.SIGTERM)
    output = script.communicate(timeout=60)[0]
    assert script.returncode == 143, output[-3000:]
    assert not naming(term / "work")  # the imports check and its children are gone
    there = comes_back(term / "out")
    assert sorted(there) == ["commands.md", "compare.md", "machine.txt", "results.tar.xz"]
    log = there["commands.md"].read_text()
    assert "- unpack, guard: skipped, no " in log and "- stopped by SIGTERM after" in log
    assert "run: a rehearsal on the CPU" in there["machine.txt"].read_text()

    kill = tmp_path / "kill"
    kill.mkdir()
    script = started(kill, script_env(kill, None, REHEARSE="1"))
    script.send_signal(signal.SIGKILL)  # nothing of the script runs after it
    script.communicate(timeout=60)
    for pid in naming(kill / "work"):  # its orphaned step
        os.kill(pid, signal.SIGKILL)
    there = comes_back(kill / "out")
    assert sorted(there) == ["commands.md", "machine.txt"]
    assert "- unpack, guard: skipped" in there["commands.md"].read_text()
    assert "run: a rehearsal on the CPU" in there["machine.txt"].read_text()


def test_a_limit_too_short_stops_at_a_step_stops_mps_and_still_reports(tmp_path):
    """LIMIT, the call's time, less PACK_S leaves 8 s: the imports check gets no more, and is
    cut or not started; whatever it stops at, the packed run comes back, and an MPS daemon found
    running is stopped at the end."""
    fake = tmp_path / "bin" / "nvidia-cuda-mps-control"  # an MPS control that logs what it got
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ncat >> {tmp_path / 'mps-got'}\n")
    fake.chmod(0o755)
    (tmp_path / "mps").mkdir()
    (tmp_path / "mps" / "control").touch()  # a daemon runs
    done, out = run_script(tmp_path, HERE, LIMIT="38", PACK_S="30", REHEARSE="1",
                           PATH=f"{fake.parent}:{os.environ['PATH']}")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    there = comes_back(out)
    assert sorted(there) == ["commands.md", "compare.md", "machine.txt", "results.tar.xz"]
    log = there["commands.md"].read_text()
    assert re.search(r"STOPPED (before the check \w+: -?\d s left of LIMIT=38|at the check \w+ "
                     r"\(above; it had [5-8] s\))", log), log
    assert "- mps: stopped" in log and (tmp_path / "mps-got").read_text() == "quit\n"
    assert "A rehearsal on the CPU (REHEARSE=1) at a small size: no GPU result" in \
        there["compare.md"].read_text()


@pytest.mark.slow
def test_a_rehearsal_runs_every_step_a_cpu_can_and_a_cut_grid_reports(short_tmp):  # noqa: F811
    """REHEARSE=1 with a bundle: unpack, guard, imports and the smoke sweep pass, what needs
    CUDA is said to be skipped; a grid of 80 small trials, cut at its 80 s deadline, leaves its
    runs.csv, findings and partial.md in the archive; at most 8 files come back."""
    claim = yaml.safe_load((ROOT / "examples" / "add_a_claim.yaml").read_text())["claims"]
    grid = write_grid(short_tmp, "cut", seeds=list(range(40)), claims=claim)
    done, out = run_script(short_tmp, HERE, str(grid), REHEARSE="1", GRID_S="80",
                           GRACE="120", PACK_S="10", LIMIT="600")
    there = comes_back(out)
    log = there["commands.md"].read_text()
    assert done.returncode == 0, log
    assert sorted(there) == ["commands.md", "compare.md", "machine.txt", "results.tar.xz"]
    for step in ("unpack", "guard", "imports", "smoke"):
        assert re.search(rf"^- {step}: .*: exit 0, ", log, re.M), log
    assert "- ray-gpu, mps, cuda-tests: skipped, they need CUDA" in log
    assert re.search(r"^- cut: .*: exit 124, ", log, re.M) and "(cut at its deadline, 80 s" in log
    names = archived(out)
    assert {f"results/results/cut/{f}" for f in ("runs.csv", "findings.md", "partial.md")} <= \
        set(names), log
    assert "results/smoke/smoke/runs.csv" in names
    compare = there["compare.md"].read_text()
    assert "no GPU result" in compare and "## cut (partial: cut at its deadline)" in compare
