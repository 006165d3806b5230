"""What a run on a lent GPU machine needs beyond the checkout, put into carry/ (which git
ignores: the device tool brings it along when told to), and the budget it must keep.

The tool copies every tracked file and the untracked ones git does not ignore, and the ignored
paths a call names, 64 MiB in all; it brings no .git, and nothing tracked can stay behind (the
screenshots and the other results folders travel too). So the checkout travels whole and carry/
holds only what the GPU grids need beyond it, made small:
- attnbench-py3.12.tar.xz, the offline bundle (`python -m ci.bundle --python 3.12 --out carry`,
  built beforehand where pip reaches PyPI);
- commit: this checkout's commit as `bench.provenance.git_commit` gives it (with -dirty and a
  digest of the uncommitted changes), written last, once RECORD is rewritten, which
  ci/gpu_grids.sh hands to the runs there ($ATTNBENCH_GIT_COMMIT);
- shared/data/enwik8.head.xz, the real-text grid's corpus compressed (3.65 MB as 1.0 MB;
  ci/gpu_grids.sh puts it back where the grid reads it, ../shared/data).

Both together must stay within BUDGET, 1 MiB below the tool's limit for the checkout to grow
(2 MiB until the main job's replication on new data and the quick path's result, 1.0 MiB of
results, took the checkout to 12.7 MiB: a slimmer bundle is what gives room next).
CI has no bundle (building one downloads 55 MB), so what carry/ held when it was last made is
committed as RECORD: each file's bytes and the bundle's Python and package set, read from the
archive itself. tests/test_carry.py checks that package set against the pins (a changed pin
means a bundle to rebuild) and the checkout plus the recorded carry/ against BUDGET.

    python -m ci.carry    # writes the corpus, RECORD where the bundle is built, carry/commit;
                          # prints the budget and, over it, the largest paths
"""

import argparse
import json
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from bench.provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 64 * 2**20  # what the device tool carries at most: working tree and named paths
BUDGET = 63 * 2**20  # what CI lets a GPU run carry: room below LIMIT for the checkout to grow
PYTHON = "3.12"  # the GPU image's
BUNDLE = f"attnbench-py{PYTHON}.tar.xz"
CORPUS = ("shared", "data", "enwik8.head")  # beside the checkout; under carry/ as .xz
RECORD = "ci/carry.json"  # under the checkout
DIST_INFO = re.compile(r"([^/]+)-([^-/]+)\.dist-info")


def travelling(root: Path) -> list[Path]:
    """The files the device tool copies from the checkout at `root`: tracked ones and untracked
    ones git does not ignore (carry/ comes on top, named in the call)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=root, capture_output=True, check=True)
    return [root / name for name in sorted(set(listed.stdout.decode().split("\0"))) if name]


def sizes(root: Path, paths: list[Path]) -> dict[str, int]:
    """Bytes of each plain file among `paths` and under the folders among them, by its path
    relative to `root`."""
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*"))]
    return {f.relative_to(root).as_posix(): f.stat().st_size for f in files
            if f.is_file() and not f.is_symlink()}


def prepare(carry: Path, corpus: Path) -> list[str]:
    """carry/shared/data/enwik8.head.xz (`corpus` compressed) written; returns what is missing
    (the bundle not built yet, the corpus not there), in words."""
    carry.mkdir(parents=True, exist_ok=True)
    missing = []
    if not (carry / BUNDLE).is_file():
        missing.append(f"{carry / BUNDLE}: build it with python -m ci.bundle --python 3.12 "
                       f"--out {carry}")
    packed = carry.joinpath(*CORPUS[:-1], CORPUS[-1] + ".xz")
    if corpus.is_file():
        packed.parent.mkdir(parents=True, exist_ok=True)
        with corpus.open("rb") as src, lzma.open(packed, "wb", preset=9) as dst:
            shutil.copyfileobj(src, dst)
    else:
        missing.append(f"{corpus}: the real-text grid's corpus is not there")
    return missing


def bundled(archive: Path) -> dict[str, str]:
    """The distributions an offline bundle holds, name -> version, from its .dist-info
    folders."""
    found = {}
    with tarfile.open(archive) as tar:
        for name in tar.getnames():
            if m := DIST_INFO.fullmatch(name):
                found[re.sub(r"[-_.]+", "-", m[1]).lower()] = m[2]
    return dict(sorted(found.items()))


def record(carry: Path) -> dict:
    """What carry/ holds, as RECORD keeps it: each file's bytes (but the commit, which changes
    with every commit and is a line), and the bundle's Python and package set."""
    held = {k: v for k, v in sizes(carry, [carry]).items() if k != "commit"}
    return {"python": PYTHON, "files": held, "packages": bundled(carry / BUNDLE)}


def budget(tree: dict[str, int], carried: dict[str, int], top: int = 5) -> tuple[str, bool]:
    """The checkout's files (`tree`) and carry/'s (`carried`) against BUDGET, in words, and
    whether they fit; over it, the words name the `top` largest paths (files and the folders
    two levels down), so that what grew is plain."""
    total, extra = sum(tree.values()), sum(carried.values())
    line = (f"carried: {(total + extra) / 2**20:.1f} MiB of {BUDGET / 2**20:.0f} MiB (the "
            f"checkout {total / 2**20:.1f} MiB, carry/ {extra / 2**20:.1f} MiB; the device tool "
            f"takes {LIMIT / 2**20:.0f} MiB)")
    if total + extra <= BUDGET:
        return line, True
    paths: dict[str, int] = {}
    for name, n in [*tree.items(), *((f"carry/{k}", v) for k, v in carried.items())]:
        parts = name.split("/")
        for depth in range(1, min(len(parts), 2) + 1):
            key = "/".join(parts[:depth]) + ("/" if depth < len(parts) else "")
            paths[key] = paths.get(key, 0) + n
    largest = sorted(paths.items(), key=lambda kv: -kv[1])[:top]
    return line + "; the largest: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in
                                                  largest), False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci.carry", description=__doc__.split("\n")[0])
    p.add_argument("--carry", type=Path, default=ROOT / "carry", help="the folder carried")
    p.add_argument("--corpus", type=Path, default=ROOT.parent.joinpath(*CORPUS),
                   help="the real-text grid's corpus (default: ../shared/data/enwik8.head)")
    args = p.parse_args(argv)
    missing = prepare(args.carry, args.corpus)
    if (args.carry / BUNDLE).is_file():
        (ROOT / RECORD).write_text(json.dumps(record(args.carry), indent=1) + "\n")
    # the commit last: of the tree as it travels, with RECORD rewritten (a changed record makes
    # it -dirty, as the copy's runs then are)
    (args.carry / "commit").write_text(git_commit() + "\n")
    line, fits = budget(sizes(ROOT, travelling(ROOT)), sizes(args.carry, [args.carry]))
    print(line)
    for what in missing:
        print(f"missing: {what}", file=sys.stderr)
    if not fits:
        print("error: more than a GPU run may carry: make the bundle or the checkout smaller",
              file=sys.stderr)
    return 0 if fits and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
