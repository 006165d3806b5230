"""What a run records about where it came from: git commit, package versions, machine."""

import hashlib
import os
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"  # the committed results: written only when a command is told to
# what commands write by default (sweeps, runs, MLflow), which git ignores: $ATTNBENCH_RUNS
LOCAL = Path(os.environ.get("ATTNBENCH_RUNS") or ROOT / "runs")  # else runs/
PACKAGES = ("torch", "numpy", "ray", "mlflow", "fvcore", "pandas", "pydantic", "attnbench")
# a package shipped under another distribution's name: the offline bundle's MLflow is its client
# alone, mlflow-skinny (ci/bundle.py), the same `mlflow` module at the same version
SHIPPED_AS = {"mlflow": ("mlflow", "mlflow-skinny")}


@dataclass(frozen=True)
class GridText:
    """A grid file's text, read once (`bench.experiment.open.read_grid_text`), or read from
    elsewhere (a commit, the MLflow store): `where` names it in errors, its plugin file paths
    are relative to `folder` (where its file lay), and `path` is the file it was read from
    (None: text from elsewhere). What a sweep logs of its grid file (its path, the sha256 of
    its text) and copies beside its report is this text, not the file read again."""

    text: str
    where: str
    folder: Path
    path: Path | None = None


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def git_commit() -> str:
    """HEAD commit; when tracked files outside results/ differ from it, '-dirty.' and the first 8
    hex digits of the sha256 of that `git diff HEAD`, so that results from the same uncommitted
    changes compare equal and those from other changes do not (the tables and figures a sweep
    writes into results/ do not make its own runs stale). Outside a checkout (a copy without
    .git, as a lent GPU machine gets): $ATTNBENCH_GIT_COMMIT, what this function said where the
    copy was made (ci/carry.py writes it down, ci/gpu_grids.sh sets it), else 'unknown'."""
    try:
        head = _git("rev-parse", "HEAD")
        diff = subprocess.run(["git", "diff", "--binary", "HEAD", "--", ".", ":(exclude)results"],
                              cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("ATTNBENCH_GIT_COMMIT") or "unknown"
    return f"{head}-dirty.{hashlib.sha256(diff).hexdigest()[:8]}" if diff else head


# What trains and scores a run: the one-run room and everything it imports from this checkout
# (tests/test_tracking.py keeps the list complete). The report, the claims, the runner and the
# benchmarks only read or schedule runs, so changing them leaves finished results current.
RESULT_CODE = ("variants", "bench/__init__.py", "bench/declare.py", "bench/config.py",
               "bench/provenance.py", "bench/record.py", "bench/data", "bench/model",
               "bench/training")


def code_files() -> list[Path]:
    """The Python files of RESULT_CODE in this checkout, sorted."""
    return sorted(f for entry in map(ROOT.joinpath, RESULT_CODE)
                  for f in ([entry] if entry.is_file() else entry.rglob("*.py")))


def code_version() -> str:
    """'code-' and 12 hex digits of the sha256 of RESULT_CODE as it is on disk (uncommitted
    changes included): results from the same training code compare equal whatever else changed
    (README, tests, grids, the report), and those from other training code do not."""
    h = hashlib.sha256()
    for f in code_files():
        h.update(f"{f.relative_to(ROOT)}\0".encode() + f.read_bytes() + b"\0")
    return "code-" + h.hexdigest()[:12]


def identity() -> dict[str, str]:
    """What a run's code is recorded as: its code_version (which staleness compares) and the
    git commit it was run from."""
    return {"code_version": code_version(), "git_commit": git_commit()}


def short_commit(commit: str) -> str:
    """'<40 hex>-dirty.<8 hex>' -> '<7 hex>-dirty.<8 hex>' (for labels); a code_version as
    it is."""
    if commit.startswith("code-"):
        return commit
    head, dirty, diff = commit.partition("-dirty")
    return head[:7] + dirty + diff


def versions() -> dict[str, str]:
    """The installed version of each of PACKAGES (of the first of its SHIPPED_AS distributions
    installed), else 'absent'."""
    out = {}
    for name in PACKAGES:
        out[name] = "absent"
        for dist in SHIPPED_AS.get(name, (name,)):
            try:
                out[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def handed_gpus() -> str | None:
    """The GPUs this process was handed, where its torch is built for CUDA
    ($CUDA_VISIBLE_DEVICES naming some: Ray sets it for a trial with a share of a GPU; a CPU
    build of torch handed Ray's logical GPUs runs on the CPU), else None."""
    seen = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    built = torch.backends.cuda.is_built()
    return seen if built and seen and seen not in ("-1", "NoDevFiles") else None


def device(name: str = "auto") -> torch.device:
    """'auto' -> CUDA when present, else CPU; never the CPU in a process that asked for CUDA
    (train.device=cuda) or was handed a GPU (`handed_gpus`) and finds none: ValueError naming
    the device, so a run on a GPU machine whose CUDA this process cannot reach (a broken MPS
    server, a driver mismatch) fails instead of filing a CPU result as a GPU one."""
    if torch.cuda.is_available():
        return torch.device("cuda" if name == "auto" else name)
    handed = handed_gpus()
    if name == "cuda" or (name == "auto" and handed):
        asked = "train.device=cuda" if name == "cuda" else \
            f"train.device=auto in a process handed GPU {handed} (CUDA_VISIBLE_DEVICES)"
        raise ValueError(f"{asked}, but this process finds no CUDA device (torch "
                         f"{torch.__version__}, built for CUDA {torch.version.cuda}, "
                         f"CUDA_VISIBLE_DEVICES={handed or 'unset'}): not training on the CPU "
                         "instead")
    return torch.device(name if name != "auto" else "cpu")


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def kernels(device: torch.device) -> dict[str, str | None]:
    """What a run's numbers depend on beyond its code, config and seed: the CPU's kernel level
    (the ISA torch dispatches to: DEFAULT, AVX2, AVX512, ...; sums are ordered differently on
    each) and the GPU the run used, if any."""
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None}


def record(device: torch.device) -> dict:
    """Where a run came from: code, package versions, Python, the machine and its kernels."""
    return {**identity(), "versions": versions(), "python": platform.python_version(),
            "machine": platform.machine(), "cpu": cpu_name(), **kernels(device),
            "torch_threads": torch.get_num_threads()}
