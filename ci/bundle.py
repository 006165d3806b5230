"""The offline bundle: what `python -m bench.run` needs beyond a GPU image's own Python stack,
as one archive for a named Python version, to carry onto a machine without a package index.

    python -m ci.bundle --python 3.12 [--out dist]      # where pip reaches PyPI
    tar xJf attnbench-py3.12.tar.xz -C "$(python3 -m site --user-site)"  # there (made first)

The image has torch and the scientific stack (IMAGE); the bundle holds the rest at the versions
constraints.txt pins (NEEDED and what they need: `distributions`, read from the metadata of the
packages installed here, markers evaluated for that Python on Linux x86_64, so the list is known
before anything is downloaded and a test checks it), built for that Python on manylinux x86_64:
MLflow as `mlflow-skinny` with what opening an sqlite store imports, fvcore and iopath built as
pure wheels (their dependencies, termcolor, yacs, portalocker, ..., as wheels), and Ray
slimmed (`slim_ray`: its Java jar, dashboard web build, console scripts, examples, RLlib,
Serve and LLM go, its native binaries stripped) and so is pyarrow, which Ray Tune imports
(`slim_arrow`: its headers, tests, Flight and Gandiva go, its libraries stripped); every
package loses its tests and the sources of its compiled parts (`slim_sources`).
The archive also carries `attnbench_bundle.py` and a .pth that imports it: on any other Python it
stops at start-up with both versions named, before a compiled wheel fails obscurely.
docs/tracking.md says how to use it on an offline cluster.
"""

import argparse
import hashlib
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
# what the GPU image already has (torch, the scientific stack): never bundled
IMAGE = {"torch", "numpy", "pandas", "scipy", "seaborn", "matplotlib", "pyyaml", "tqdm",
         "pillow", "contourpy", "cycler", "fonttools", "kiwisolver", "pyparsing",
         "python-dateutil", "pytz", "tzdata", "six", "packaging", "filelock", "fsspec", "jinja2",
         "markupsafe", "networkx", "sympy", "mpmath", "typing-extensions", "setuptools"}
# what bench.run imports beyond the image, by distribution (MLflow's client alone, and what
# opening an sqlite store with it imports)
NEEDED = ("ray[tune]", "mlflow-skinny", "sqlalchemy", "alembic", "cryptography", "databricks-sdk",
          "fastapi", "starlette", "fvcore", "iopath", "pydantic", "platformdirs", "tabulate")
SOURCE_ONLY = ("fvcore", "iopath")  # sdists on PyPI: built here as pure wheels
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
SOURCES = ("*.pyx", "*.pxd", "*.pxi", "*.c", "*.cc", "*.cpp", "*.h", "*.hpp")
RAY_DROP = ("jars", "dashboard/client/build", "rllib", "serve", "llm")
# pyarrow, which Ray Tune imports (its storage goes through pyarrow.fs): what a sweep never loads
ARROW_DROP = ("include", "src", "tests", "*flight*", "*gandiva*", "*.pxd", "*.pyx")
# x86 branch targets made relative (BCJ), then xz's strongest preset: measured on the slimmed
# 3.12 bundle, 8% smaller than xz -9 alone (libarrow.so 11.7 -> 10.8 MB)
XZ_FILTERS = [{"id": lzma.FILTER_X86}, {"id": lzma.FILTER_LZMA2, "preset": 9}]
RAY_BINARIES = ("core/src/ray/raylet/raylet", "core/src/ray/gcs/gcs_server", "_raylet.so")
GUARD = '''"""attnbench's offline bundle for Python {version}, imported at start-up (its .pth)."""
import sys

BUILT_FOR = {built!r}
if sys.version_info[:2] != BUILT_FOR:
    raise ImportError(
        f"this attnbench bundle was built for Python {version}, and this is Python "
        f"{{sys.version_info[0]}}.{{sys.version_info[1]}} ({{sys.executable}}): its compiled "
        f"wheels cannot load here; build one for it: python -m ci.bundle --python "
        f"{{sys.version_info[0]}}.{{sys.version_info[1]}}")
'''


def _norm(name: str) -> str:
    """A project name normalised (Foo_Bar -> foo-bar)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_env(python: str) -> dict[str, str]:
    """The environment markers of CPython `python` on Linux x86_64 (the GPU image's)."""
    return {"python_version": python, "python_full_version": f"{python}.0",
            "implementation_version": f"{python}.0", "sys_platform": "linux",
            "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def distributions(python: str) -> dict[str, str]:
    """What the bundle holds, name -> version: NEEDED and everything they require (extras
    followed, markers evaluated for `python` on Linux x86_64), less what the image has (IMAGE),
    read from the metadata of the packages installed here (which constraints.txt pins: ci/setup.sh
    installs them with it). A requirement not installed here cannot be followed: SystemExit
    naming it."""
    env, found, todo = _marker_env(python), {}, [Requirement(n) for n in NEEDED]
    while todo:
        req = todo.pop()
        name = _norm(req.name)
        if name in IMAGE or (name in found and set(req.extras) <= found[name]):
            continue
        found[name] = found.get(name, set()) | set(req.extras)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise SystemExit(f"{name} (required for the bundle) is not installed here, so what "
                             "it needs cannot be read: install it (pip install -c "
                             f"constraints.txt {name}) and build again") from None
        for line in dist.requires or []:
            dep = Requirement(line)
            if dep.marker is None or any(dep.marker.evaluate({**env, "extra": extra})
                                         for extra in found[name] or {""}):
                todo.append(dep)
    return {name: metadata.version(name) for name in sorted(found)}


def download(python: str, dest: Path) -> list[Path]:
    """The wheels of `distributions(python)` at the versions installed here (constraints.txt's
    pins), for `python`, nothing else (--no-deps: the list is the bundle); SOURCE_ONLY's sdists
    built as pure wheels."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = ["-c", str(ROOT / "constraints.txt")]
    target = ["--python-version", python, "--implementation", "cp", "--only-binary=:all:",
              *[a for p in PLATFORMS for a in ("--platform", p)]]
    wanted = distributions(python)
    binary = [f"{n}=={v}" for n, v in wanted.items() if n not in SOURCE_ONLY]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest),
                    *target, *pins, *binary], check=True)
    for name in SOURCE_ONLY:  # pure Python: a wheel built here runs on any Python 3
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest),
                        *pins, f"{name}=={wanted[name]}"], check=True)
    return sorted(dest.glob("*.whl"))


def unpack(wheels: list[Path], python: str, site: Path) -> None:
    """The wheels installed into `site` as a site directory of `python` (no dependencies
    resolved, nothing compiled: the archive is unpacked, not installed)."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--no-compile", "--target", str(site), "--python-version", python,
                    "--only-binary=:all:", *map(str, wheels)], check=True)


def slim_sources(site: Path) -> int:
    """Every package in `site` without its tests and the sources of its compiled parts (SOURCES:
    Cython, C, headers), which nothing imports; returns the bytes saved."""
    before = _size(site)
    for found in [p for p in site.rglob("tests") if p.is_dir() and p.parent != site]:
        shutil.rmtree(found, ignore_errors=True)
    for pattern in SOURCES:
        for found in site.rglob(pattern):
            if found.is_file():
                found.unlink()
    return before - _size(site)


def slim_ray(site: Path) -> int:
    """Ray in `site` without what a sweep never loads (RAY_DROP, the console scripts, examples,
    source maps, bytecode caches) and with its native binaries stripped; returns the bytes
    saved."""
    before = _size(site)
    ray = site / "ray"
    for part in RAY_DROP:
        shutil.rmtree(ray / part, ignore_errors=True)
    shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts: `ray start` is not used
    for found in [*ray.rglob("examples"), *ray.rglob("__pycache__")]:
        shutil.rmtree(found, ignore_errors=True)
    for found in ray.rglob("*.js.map"):
        found.unlink()
    for binary in RAY_BINARIES:
        if (ray / binary).is_file() and shutil.which("strip"):
            subprocess.run(["strip", "--strip-unneeded", str(ray / binary)], check=True)
    return before - _size(site)


def slim_arrow(site: Path) -> int:
    """pyarrow in `site` without ARROW_DROP (headers, Cython sources, tests, Flight, Gandiva)
    and with its shared libraries stripped; returns the bytes saved."""
    before, arrow = _size(site), site / "pyarrow"
    for pattern in ARROW_DROP:
        for found in list(arrow.glob(pattern)):
            shutil.rmtree(found) if found.is_dir() else found.unlink()
    if shutil.which("strip"):
        for lib in arrow.glob("*.so*"):
            subprocess.run(["strip", "--strip-unneeded", str(lib)], check=True)
    seen: dict[bytes, Path] = {}  # a wheel holds each soname's copies as files: link them
    for lib in sorted(arrow.glob("lib*.so*"), key=lambda p: -len(p.name)):
        digest = hashlib.sha256(lib.read_bytes()).digest()
        if digest in seen:
            lib.unlink()
            lib.symlink_to(seen[digest].name)
        else:
            seen[digest] = lib
    return before - _size(site)


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def guard(site: Path, python: str) -> None:
    """attnbench_bundle.py and the .pth that imports it at start-up (see the module doc)."""
    major, minor = map(int, python.split("."))
    (site / "attnbench_bundle.py").write_text(GUARD.format(version=python, built=(major, minor)))
    (site / "attnbench_bundle.pth").write_text("import attnbench_bundle\n")


def pack(site: Path, out: Path) -> Path:
    """The site directory's contents as one tar.xz (members relative to it), compressed through
    xz's x86 filter (XZ_FILTERS), which any xz reader undoes: most of the bundle is x86 machine
    code (Ray's binaries, Arrow's libraries), which it makes about 8% smaller."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(out, "wb", filters=XZ_FILTERS) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        for item in sorted(site.iterdir()):
            tar.add(item, arcname=item.name)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci.bundle", description=__doc__.split("\n")[0])
    p.add_argument("--python", required=True, help="the target Python, e.g. 3.12")
    p.add_argument("--out", type=Path, default=ROOT / "dist", help="where the archive goes")
    args = p.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        p.error(f"--python {args.python!r}: expected a version like 3.12")
    with tempfile.TemporaryDirectory() as tmp:
        wheels = download(args.python, Path(tmp) / "wheels")
        site = Path(tmp) / "site"
        unpack(wheels, args.python, site)
        saved = slim_ray(site) + slim_arrow(site) + slim_sources(site)
        guard(site, args.python)
        out = pack(site, args.out / f"attnbench-py{args.python}.tar.xz")
        print(f"{len(wheels)} wheels, {_size(site) / 1e6:.0f} MB unpacked (slimmed by "
              f"{saved / 1e6:.0f} MB); {out}: {out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
