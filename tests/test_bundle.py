"""The offline bundle's package set (`ci/bundle.py`) on this machine's Python: Ray and pyarrow
slimmed as the bundle slims them still run a sweep end to end (`bench.run`, its report
included), every package loses its tests and compiled sources and nothing else, and the
bundle's guard stops a Python it was not built for with both versions named. SLOW: a real
sweep."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow
import pytest
import ray

from ci import bundle

ROOT = Path(__file__).resolve().parents[1]


def python_with(site: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    """This Python with `site` first on its path, as an unpacked bundle's directory is."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env |= {"PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture
def short_tmp():
    """A short temp dir (Ray's socket paths must stay under ~100 characters)."""
    with tempfile.TemporaryDirectory(prefix="ab", dir="/tmp") as d:
        yield Path(d)


@pytest.mark.slow
def test_slimmed_ray_runs_a_sweep_with_its_report(short_tmp):
    tmp_path, site = short_tmp, short_tmp / "site"
    for module in (ray, pyarrow):
        shutil.copytree(Path(module.__file__).parent, site / module.__name__,
                        ignore=shutil.ignore_patterns("__pycache__"))
    saved = bundle.slim_ray(site)
    assert saved > 30e6 and not (site / "ray" / "jars").exists()  # the Java jar alone is 33 MB
    assert (site / "ray" / "data").is_dir()  # ray.air imports it
    assert bundle.slim_arrow(site) > 30e6 and not list((site / "pyarrow").glob("*flight*"))
    bundle.guard(site, f"{sys.version_info[0]}.{sys.version_info[1]}")
    found = python_with(site, "-c", "import pyarrow, ray; print(ray.__file__, pyarrow.__file__)",
                        tmp=tmp_path)
    assert found.stdout.split() == [str(site / m / "__init__.py") for m in ("ray", "pyarrow")]
    done = python_with(site, "-m", "bench.run", "ablations/smoke.yaml", "--results-dir",
                       str(tmp_path / "results"), tmp=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "results" / "smoke" / "runs.csv").is_file()  # the report was written


def test_the_guard_names_both_versions(tmp_path):
    """The guard as the .pth runs it: on another Python, an ImportError naming the one the
    bundle was built for, this one, and the command that builds the right one."""
    other = "3.99"
    bundle.guard(tmp_path, other)
    done = python_with(tmp_path, "-c", "import attnbench_bundle", tmp=tmp_path)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert done.returncode != 0
    assert f"built for Python {other}, and this is Python {here}" in done.stderr
    assert f"python -m ci.bundle --python {here}" in done.stderr
    bundle.guard(tmp_path, here)
    assert python_with(tmp_path, "-c", "import attnbench_bundle", tmp=tmp_path).returncode == 0
    assert (tmp_path / "attnbench_bundle.pth").read_text() == "import attnbench_bundle\n"


def test_sources_and_tests_go_and_nothing_else(tmp_path):
    pkg = tmp_path / "pkg"
    for path in ("__init__.py", "fast.pyx", "fast.c", "fast.cpython-311.so", "tests/test_x.py",
                 "sub/tests/data.csv", "sub/__init__.py", "sub/api.h", "testing.py"):
        (pkg / path).parent.mkdir(parents=True, exist_ok=True)
        (pkg / path).write_text("x" * 100)
    assert bundle.slim_sources(tmp_path) == 500
    left = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*") if p.is_file())
    assert left == ["__init__.py", "fast.cpython-311.so", "sub/__init__.py", "testing.py"]
