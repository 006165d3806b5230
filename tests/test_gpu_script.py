"""ci/gpu_grids.sh on a machine without CUDA, as a lent GPU machine whose CUDA cannot be
reached would run it: it stops at its first failing check with the reason, and whatever
stopped it, what it wrote comes back packed as the device tool returns files (at most 8, at the
top of the output folder): the command log naming each step's exit status and the reason, the
comparison, the machine and the archive."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci import bundle

ROOT = Path(__file__).resolve().parents[1]
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"


def run_script(tmp: Path, built_for: str | None) -> tuple[subprocess.CompletedProcess, Path]:
    """The script with a bundle built for `built_for` (None: none carried), this Python and its
    packages; returns its run and its output folder."""
    carry = tmp / "carry"
    carry.mkdir()
    if built_for:
        site = tmp / "site"
        site.mkdir()
        bundle.guard(site, built_for)
        bundle.pack(site, carry / "attnbench-py3.12.tar.xz")
    (carry / "commit").write_text("f" * 40 + "\n")
    env = {**os.environ, "CARRY": str(carry), "OUT": str(tmp / "out"), "WORK": str(tmp / "work"),
           "SITE": str(tmp / "unpacked"), "PYTHON": sys.executable, "TMPDIR": str(tmp)}
    done = subprocess.run(["bash", str(ROOT / "ci" / "gpu_grids.sh"), "heads_grid"], env=env,
                          capture_output=True, text=True, timeout=300)
    return done, tmp / "out"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a machine without CUDA")
def test_no_cuda_stops_the_run_at_its_first_check_and_it_still_reports(tmp_path):
    done, out = run_script(tmp_path, HERE)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["commands.md", "compare.md",
                                                     "machine.txt", "results.tar.xz"]
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
