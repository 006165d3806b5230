"""The main job's path leaves a checkout as it found it: in a fresh clone, a small grid through
`bench.run` (the sweep and its report) and `bench.report` again, then `git status` shows
nothing. SLOW: a real sweep."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_sweep_and_its_report_leave_git_status_clean():
    with tempfile.TemporaryDirectory(prefix="ab", dir="/tmp") as d:  # Ray's socket paths
        clone = Path(d) / "clone"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)],
                       check=True)
        env = {k: v for k, v in os.environ.items()
               if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", "ATTNBENCH_RUNS")}
        env |= {"TMPDIR": d, "PYTHONPATH": str(clone)}
        for args in (["bench.run", "examples/add_a_claim.yaml"],
                     ["bench.report", "examples/add_a_claim.yaml"]):
            done = subprocess.run([sys.executable, "-m", *args], cwd=clone, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert (clone / "runs" / "add_a_claim" / "findings.md").is_file()
        status = subprocess.run(["git", "status", "--porcelain", "--ignored=no"], cwd=clone,
                                capture_output=True, text=True, check=True).stdout
        assert status == "", status
