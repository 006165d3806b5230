"""ci/gpu_grids.sh on a machine without CUDA. As a lent GPU machine whose CUDA cannot be reached
would run it: it stops at its first failing check with the reason. Rehearsed (REHEARSE=1): every
step a CPU can run passes, the main job starts right after the smoke trial, each look's report is
packed as it is written, and a grid cut by its deadline still leaves runs.csv, findings and its
partial note. Whatever stops it (a failed check, a short LIMIT, SIGTERM, even SIGKILL of the
script), $OUT holds what was done as the device tool brings files back: at most 8 plain files at
its top, the command log and the machine among them; SIGTERM ends the running step and all it
started, a grid's sweep after writing its partial report. Bad settings exit 2 naming them.
compare.md counts the decisions the same as the CPU's and says first what keeps a run from being
a GPU result.

Every cut is certain whatever the CPU: the test plugin tests/plugins/hold.py holds the trials
after the first K inside their Ray workers, so a sweep cannot finish before a deadline or a
signal, and the tests wait for states (a trial held, a look's report packed), never for a time.
Time limits here are hang guards only. SLOW: the rehearsals run sweeps."""

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
from tests.helpers import write_grid
from tests.plugins import hold

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
    own = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    return {**own, "CARRY": str(carry), "OUT": str(tmp / "out"), "WORK": str(tmp / "work"),
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
    assert compare.confirmation("heads_grid") == Path("results/heads_grid/seeds600")  # its plan
    assert compare.confirmation("heads_grid_data7") == Path(  # by its name, not its file's
        "results/heads_grid/seeds900-data7")
    found = pd.read_csv(ROOT / compare.confirmation("heads_grid") / "findings.csv")
    found.loc[0, "verdict"] = "contradicted"
    found.to_csv(here / "findings.csv", index=False)
    (here / "partial.md").write_text("cut\n")
    text = compare.compare(tmp_path, ["heads_grid", "span_limit"], True, ["MPS failed"])
    assert text.index("A rehearsal on the CPU") < text.index("**Warning:** MPS failed") < \
        text.index("## heads_grid (partial: cut at its deadline): "
                   f"{len(found) - 1} of {len(found)} decisions the same as "
                   "`results/heads_grid/seeds600`")
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
    ({}, ["heads"], "grid heads: no such file, and no grid of ablations/ named heads (expected"),
    ({}, ["SMOKE"], "unnamed.yaml: expected a line 'name: NAME'")])
def test_bad_settings_exit_2_naming_them_before_anything_runs(tmp_path, settings, grids, said):
    if grids == ["SMOKE"]:  # a grid file that does not name its grid
        grids = [str(tmp_path / "unnamed.yaml")]
        Path(grids[0]).write_text((ROOT / "examples" / "smoke.yaml").read_text().replace(
            "name: smoke\n", ""))
    done, out = run_script(tmp_path, None, *grids, **settings)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and said in done.stderr
    assert not out.exists()


def started(tmp: Path, grid: str = "heads_grid", built_for: str | None = None,
            **settings: str) -> subprocess.Popen:
    """The script rehearsing `grid`, with a bundle built for `built_for` (None: without one),
    with `settings`."""
    return subprocess.Popen(["bash", SCRIPT, grid], env=script_env(tmp, built_for, REHEARSE="1",
                                                                  **settings),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def naming(path: Path) -> list[int]:
    """The processes given `path` as an argument (a step and what runs it)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(path).encode() in (proc / "cmdline").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def reap(path: Path) -> None:
    """The process groups of the steps given `path` killed: what a SIGKILLed script left."""
    for pid in naming(path):
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except ProcessLookupError:
            continue


def test_a_kill_at_any_moment_leaves_what_was_done(short_tmp):
    """During the smoke sweep (its trial held, so the moment is certain): $OUT already holds
    the command log and the machine as the last step left them, nothing else (so a SIGKILL of
    the script there would leave them: the SIGKILL during the main job below); SIGTERM ends
    the step and all it started, then packs."""
    script = started(short_tmp, **hold.env(0))
    hold.wait_until_held(short_tmp / "work" / "smoke" / "smoke", script)
    there = comes_back(short_tmp / "out")
    assert sorted(there) == ["commands.md", "machine.txt"]
    assert re.search(r"^- imports: .*: exit 0, ", there["commands.md"].read_text(), re.M)
    assert "run: a rehearsal on the CPU" in there["machine.txt"].read_text()
    script.send_signal(signal.SIGTERM)
    output = script.communicate(timeout=120)[0]  # a hang guard: 5 s for the step, then packing
    assert script.returncode == 143, output[-3000:]
    assert not naming(short_tmp / "work" / "smoke")  # the smoke sweep and its children are gone
    there = comes_back(short_tmp / "out")
    assert sorted(there) == ["commands.md", "compare.md", "machine.txt", "results.tar.xz"]
    log = there["commands.md"].read_text()
    assert "- unpack, guard: skipped, no " in log and "- stopped by SIGTERM after" in log
    assert re.search(r"^- imports: .*: exit 0, ", log, re.M), log


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
                           PATH=f"{fake.parent}:{os.environ['PATH']}",
                           **hold.env(0))  # the smoke trial held: it cannot pass in time
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    there = comes_back(out)
    assert sorted(there) == ["commands.md", "compare.md", "machine.txt", "results.tar.xz"]
    log = there["commands.md"].read_text()
    stop = re.search(r"STOPPED (before the check \w+: (-?\d+) s left of LIMIT=38|at the check "
                     r"\w+ \(above; it had (\d+) s\))", log)
    assert stop and int(stop[2] or stop[3]) <= 8, log  # never more than LIMIT - PACK_S
    assert "- mps: stopped" in log and (tmp_path / "mps-got").read_text() == "quit\n"
    assert "A rehearsal on the CPU (REHEARSE=1) at a small size: no GPU result" in \
        there["compare.md"].read_text()


def looked(tmp: Path, name: str = "cut") -> Path:
    """A grid of the smoke sweep's two variants, with the worked example's claim, in two looks
    of 2 and 5 seeds (5: the fewest its sign test can decide on): the test cannot decide on 2
    seeds and no futility stop is asked, so look 2 always follows look 1's report."""
    claim = yaml.safe_load((ROOT / "examples" / "add_a_claim.yaml").read_text())["claims"]
    return write_grid(tmp, name, seeds={"looks": [2, 5], "futility": None}, claims=claim)


LOOK_1 = 4  # look 1's trials (2 variants x 2 seeds): they train, look 2's are held


def packed(out: Path, *names: str) -> bool:
    """Whether $OUT's archive holds every one of `names` (it may be being replaced)."""
    try:
        return set(names) <= set(archived(out))
    except (OSError, tarfile.TarError, EOFError):
        return False


def deadline_now(grid: Path) -> None:
    """The grid's deadline brought forward: SIGALRM to the `timeout` that runs its sweep, the
    signal its own timer raises at the deadline (so the cut is the deadline's, exit 124, and
    comes at a state the test chose, not at a time)."""
    for pid in naming(grid):
        argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
        if Path(argv[0].decode()).name == "timeout":
            os.kill(pid, signal.SIGALRM)
            return
    raise AssertionError(f"no timeout runs {grid}")


@pytest.mark.slow
@pytest.mark.parametrize("end", ["deadline", signal.SIGTERM, signal.SIGKILL])
def test_a_rehearsal_runs_every_step_and_however_the_main_job_ends_its_last_look_is_in_out(
        short_tmp, end):
    """REHEARSE=1 with a bundle: unpack, guard, imports and the smoke trial pass, the main job
    right after them (what needs CUDA said to be skipped); look 1's report is packed as soon as
    it is written (look 2 held); then the main job ends, three ways. Its deadline (brought
    forward): the sweep is cut, writes runs.csv, findings and partial.md into the archive, exit
    0. SIGTERM to the script: the sweep gets its GRACE to write its partial report, then packs,
    exit 143. SIGKILL of the script alone (its watcher gone with it, holding no pipe of ours):
    the archive the last packing wrote, the command log and machine as they were. Each way look
    1's runs.csv, findings and figures are in $OUT, at most 8 files."""
    grid = looked(short_tmp)
    # GRID_S, GRACE, LIMIT: hang guards, never reached: the test ends the grid itself
    script = started(short_tmp, str(grid), HERE, GRID_S="600", GRACE="60", PACK_S="10",
                     LIMIT="900", **hold.env(LOOK_1, "cut"))
    look_1 = [f"results/results/cut/{f}" for f in ("runs.csv", "findings.md", "findings.csv",
                                                   "claims_per_seed.png")]
    deadline = time.monotonic() + 600  # a hang guard: imports, the smoke trial and look 1
    while not packed(short_tmp / "out", *look_1):
        assert script.poll() is None and time.monotonic() < deadline, "look 1 never packed"
        time.sleep(1)
    if end == "deadline":
        deadline_now(grid)
    else:
        script.send_signal(end)
    output = script.communicate(timeout=300)[0]  # a hang guard: GRACE (60 s), the last packing
    reap(short_tmp / "work" / "results")  # what a SIGKILLed script left running
    there = comes_back(short_tmp / "out")
    assert sorted(there) == ["commands.md", "compare.md", "machine.txt", "results.tar.xz"]
    assert packed(short_tmp / "out", *look_1), sorted(archived(short_tmp / "out"))
    log = there["commands.md"].read_text()
    assert "(packing the report of look 1)" in log
    steps = re.findall(r"^- ([\w, -]+): ", log, re.M)
    assert steps[:5] == ["unpack", "guard", "imports", "mps, cuda-tests", "smoke"], log
    for step in ("unpack", "guard", "imports", "smoke"):
        assert re.search(rf"^- {step}: .*: exit 0, ", log, re.M), log
    assert "- mps, cuda-tests: skipped, they need CUDA" in log
    assert "run: a rehearsal on the CPU" in there["machine.txt"].read_text()
    assert "results/smoke/smoke/runs.csv" in archived(short_tmp / "out")
    assert len(hold.ledger(short_tmp / "work" / "results" / "cut")["ran"]) == LOOK_1
    if end == signal.SIGKILL:
        return
    assert packed(short_tmp / "out", "results/results/cut/partial.md")
    with tarfile.open(short_tmp / "out" / "results.tar.xz") as tar:
        partial = tar.extractfile("results/results/cut/partial.md").read().decode()
    assert "the sweep was stopped (SIGINT or SIGTERM)" in partial
    compare = there["compare.md"].read_text()
    assert "no GPU result" in compare and "## cut (partial: cut at its deadline)" in compare
    if end == "deadline":
        assert script.returncode == 0, output[-3000:]
        assert steps[5] == "cut", log  # the main job right after the smoke trial
        assert re.search(r"^- cut: .*: exit 124, ", log, re.M) and \
            "(cut at its deadline, 600 s" in log
    else:
        assert script.returncode == 143 and "- stopped by SIGTERM after" in log, output[-3000:]
