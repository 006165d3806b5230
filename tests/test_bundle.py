"""The offline bundle's package set (`ci/bundle.py`) on this machine's Python: the GPU image's
packages (bundle.IMAGE) and the bundle's (bundle.distributions, the list it downloads) are all
`bench.run` imports: in a bare environment holding only them, Ray and pyarrow slimmed as the
bundle slims them, a sweep runs end to end (`bench.run`, its report included), and without
termcolor it cannot; every package loses its tests and compiled sources and nothing else, and
the bundle's guard stops a Python it was not built for with both versions named. SLOW: a real
sweep."""

import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from ci import bundle
from tests.limits import HANG

ROOT = Path(__file__).resolve().parents[1]
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"


def image_and_bundle(tmp: Path, names: list[str], copied: tuple[str, ...] = ()) -> Path:
    """A bare virtual environment whose site-packages hold exactly `names`' packages (the image's
    and the bundle's), linked from this environment's (`copied` top-level folders copied
    instead, to be slimmed); returns its python. Its Ray workers run that python, so they see
    nothing else either."""
    env = tmp / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = env / "lib" / f"python{HERE}" / "site-packages"
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # the image has it, this environment does not
            continue
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "bin")}:
            found = Path(dist.locate_file(top))
            if top == "__pycache__" or not found.exists() or (site / top).exists():
                continue
            if top in copied:
                shutil.copytree(found, site / top, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                (site / top).symlink_to(found)
    return env / "bin" / "python"


def run_in(python: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    """`python` with only this checkout added to its path (no site directory of ours)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", "PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PYTHONPATH": str(ROOT), "TMPDIR": str(tmp), "PYTHONNOUSERSITE": "1"}
    return subprocess.run([str(python), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=HANG)


def shipped(python: str = HERE) -> list[str]:
    """The image's packages and the bundle's, as names."""
    return sorted(bundle.IMAGE | set(bundle.distributions(python)))


def python_with(site: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    """This Python with `site` first on its path, as an unpacked bundle's directory is."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env |= {"PYTHONPATH": f"{site}{os.pathsep}{ROOT}", "TMPDIR": str(tmp)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=HANG)


def test_the_bundle_holds_what_fvcore_and_iopath_need():
    """fvcore and iopath are built without their dependencies (sdists, --no-deps): the list
    must still name what they import (fvcore.nn imports termcolor, its config yacs, iopath
    portalocker), for the Python the GPU image has."""
    held = bundle.distributions("3.12")
    assert {"termcolor", "yacs", "portalocker", "fvcore", "iopath", "ray", "pyarrow",
            "mlflow-skinny"} <= set(held)
    assert not set(held) & bundle.IMAGE  # the image's own are never bundled
    assert held["termcolor"] == metadata.version("termcolor")  # the versions installed here


@pytest.mark.slow
def test_slimmed_ray_runs_a_sweep_with_its_report_and_nothing_else(short_tmp):
    """The smoke sweep, its report included, in an environment of only the image's packages and
    the bundle's, Ray and pyarrow slimmed as the bundle slims them: every module bench.run
    imports loads there (its driver's, its Ray workers', the report's and its figures', MLflow's
    sqlite store, fvcore's FLOP counter), and bench.report's; and without termcolor (which
    fvcore.nn imports) the sweep's runner does not: the check can fail."""
    python = image_and_bundle(short_tmp, shipped(), copied=("ray", "pyarrow"))
    site = python.parents[1] / "lib" / f"python{HERE}" / "site-packages"
    saved = bundle.slim_ray(site)
    assert saved > 30e6 and not (site / "ray" / "jars").exists()  # the Java jar alone is 33 MB
    assert (site / "ray" / "data").is_dir()  # ray.air imports it
    assert bundle.slim_arrow(site) > 30e6 and not list((site / "pyarrow").glob("*flight*"))
    bundle.guard(site, HERE)
    found = run_in(python, "-c", "import pyarrow, ray; print(ray.__file__, pyarrow.__file__)",
                   tmp=short_tmp)
    assert found.stdout.split() == [str(site / m / "__init__.py") for m in ("ray", "pyarrow")]
    done = run_in(python, "-m", "bench.run", "examples/smoke.yaml", "--results-dir",
                  str(short_tmp / "results"), tmp=short_tmp)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (short_tmp / "results" / "smoke" / "runs.csv").is_file()  # the report was written
    report = run_in(python, "-c", "import bench.report", tmp=short_tmp)  # its own command too
    assert report.returncode == 0, report.stderr[-3000:]
    bare = short_tmp / "bare"
    bare.mkdir()
    python = image_and_bundle(bare, [n for n in shipped() if n != "termcolor"])
    gone = run_in(python, "-c", "import bench.sweep.runner", tmp=bare)
    assert "No module named 'termcolor'" in gone.stderr


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
