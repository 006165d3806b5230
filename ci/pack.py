"""What a run on a lent GPU machine brings back, packed to fit: the device tool returns at most
MAX_FILES plain files from its output folder, each at most 16 MiB, none deep in folders. So the
results folder goes into one archive, results.tar.xz (without what can be rebuilt or is large:
checkpoints, MLflow's artifact copies, Ray's folders), split into PART-sized pieces where it
is larger (`cat results.tar.xz.* > results.tar.xz` joins them), beside the few loose files
named (the comparison, the command log, the machine), all at the top of the output folder.
Each file is written under a temporary name and renamed, so that a kill while packing (the
script packs after every grid) leaves what the last packing wrote whole.

    python -m ci.pack WORK OUT [FILE ...]   # ci/gpu_grids.sh: after each grid, and at its end
"""

import argparse
import sys
import tarfile
from pathlib import Path, PurePosixPath

MAX_FILES = 8  # what the device tool brings back from $OUT at most
PART = 15 * 2**20  # an archive piece, below the tool's 16 MiB a file
SKIP_DIRS = {"ray", "mlartifacts", "__pycache__"}  # Ray's state, MLflow's artifact copies
SKIP_FILES = ("*.pt", "*.pt.corrupt", "mlflow.db-*", "*.lock")  # checkpoints, locks


def kept(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """A member as it goes into the archive, or None for what is left out (SKIP_DIRS, with what
    they hold, and SKIP_FILES)."""
    path = PurePosixPath(info.name)
    if (info.isdir() and path.name in SKIP_DIRS) or any(path.match(p) for p in SKIP_FILES):
        return None
    return info


def _replace(data: bytes, path: Path) -> Path:
    """`data` written to `path` through a temporary file beside it, renamed over it."""
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_bytes(data)
    return tmp.replace(path)


def archive(work: Path, out: Path) -> list[Path]:
    """`work` as out/results.tar.xz (members under results/), split into pieces of PART bytes
    (results.tar.xz.0, .1, ...) where it is larger; what an earlier packing wrote is replaced
    (its archive or pieces gone). Returns what it wrote."""
    tmp = out / ".results.tar.xz.part"
    with tarfile.open(tmp, "w:xz") as tar:
        tar.add(work, arcname="results", filter=kept)  # a folder left out: nothing under it
    data = tmp.read_bytes()
    tmp.unlink()
    parts = [data] if len(data) <= PART else [data[i:i + PART] for i in
                                               range(0, len(data), PART)]
    names = ["results.tar.xz"] if len(parts) == 1 else \
        [f"results.tar.xz.{i}" for i in range(len(parts))]
    written = [_replace(part, out / name) for part, name in zip(parts, names, strict=True)]
    for stale in [out / "results.tar.xz", *out.glob("results.tar.xz.*")]:
        if stale not in written:
            stale.unlink(missing_ok=True)
    return written


def pack(work: Path, out: Path, loose: list[Path]) -> list[Path]:
    """The archive of `work` and copies of the `loose` files that exist, at the top of `out`;
    ValueError where that makes more than MAX_FILES files there (the tool would drop some)."""
    out.mkdir(parents=True, exist_ok=True)
    written = archive(work, out) if work.is_dir() else []
    written += [_replace(f.read_bytes(), out / f.name) for f in loose if f.is_file()]
    there = list(out.iterdir())
    if len(there) > MAX_FILES:
        raise ValueError(f"{out}: {len(there)} entries, and the device tool brings back at most "
                         f"{MAX_FILES} files: {', '.join(sorted(p.name for p in there))}")
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci.pack", description=__doc__.split("\n")[0])
    p.add_argument("work", type=Path, help="the results folder to archive")
    p.add_argument("out", type=Path, help="the output folder the device tool brings back")
    p.add_argument("loose", type=Path, nargs="*", help="files copied beside the archive")
    args = p.parse_args(argv)
    try:
        written = pack(args.work, args.out, args.loose)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for f in written:
        print(f"{f}: {f.stat().st_size / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
