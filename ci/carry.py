"""What a run on a lent GPU machine needs beyond the checkout, put into carry/ (which git
ignores: the device tool brings it along when told to), and the check that it all fits.

The tool copies the tracked files and the untracked ones git does not ignore, and the ignored
paths a call names, BUDGET bytes in all; it brings no .git. So carry/ holds:
- attnbench-py3.12.tar.xz, the offline bundle (`python -m ci.bundle --python 3.12 --out carry`,
  built beforehand where pip reaches PyPI);
- commit: this checkout's commit as `bench.provenance.git_commit` gives it (with -dirty and a
  digest of the uncommitted changes), which ci/gpu_grids.sh hands to the runs there
  ($ATTNBENCH_GIT_COMMIT);
- shared/data/enwik8.head, the real-text grid's corpus (ci/gpu_grids.sh puts it back where the
  grid reads it, ../shared/data).

    python -m ci.carry          # writes carry/commit and carry/shared/, prints the budget
"""

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from bench.provenance import git_commit

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 64 * 2**20  # what the device tool carries at most: working tree and named paths
BUNDLE = "attnbench-py3.12.tar.xz"
DATA = ("shared", "data", "enwik8.head")  # under carry/ and under the checkout's parent


def travelling(root: Path) -> list[Path]:
    """The files the device tool copies from the checkout at `root`: tracked ones and untracked
    ones git does not ignore (carry/ comes on top, named in the call)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=root, capture_output=True, check=True)
    return [root / name for name in sorted(set(listed.stdout.decode().split("\0"))) if name]


def size(paths: list[Path]) -> int:
    """Bytes of the plain files among `paths` and under the folders among them."""
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*"))]
    return sum(f.stat().st_size for f in files if f.is_file() and not f.is_symlink())


def prepare(root: Path, carry: Path) -> list[str]:
    """carry/commit and carry/shared/data/enwik8.head written; returns what is missing (the
    bundle not built yet, the corpus not there), in words."""
    carry.mkdir(parents=True, exist_ok=True)
    (carry / "commit").write_text(git_commit() + "\n")
    missing = []
    if not (carry / BUNDLE).is_file():
        missing.append(f"{carry / BUNDLE}: build it with python -m ci.bundle --python 3.12 "
                       f"--out {carry}")
    corpus = root.parent.joinpath(*DATA)
    if corpus.is_file():
        (carry / DATA[0] / DATA[1]).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(corpus, carry.joinpath(*DATA))
    else:
        missing.append(f"{corpus}: the real-text grid's corpus is not there")
    return missing


def budget_line(root: Path, carry: Path) -> tuple[str, bool]:
    """What travels, against BUDGET, in words, and whether it fits."""
    tree, extra = size(travelling(root)), size([carry])
    total = tree + extra
    return (f"carried: {total / 2**20:.1f} MiB of {BUDGET / 2**20:.0f} MiB (the checkout "
            f"{tree / 2**20:.1f} MiB, {carry.name}/ {extra / 2**20:.1f} MiB)", total <= BUDGET)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci.carry", description=__doc__.split("\n")[0])
    p.add_argument("--carry", type=Path, default=ROOT / "carry", help="the folder carried")
    args = p.parse_args(argv)
    missing = prepare(ROOT, args.carry)
    line, fits = budget_line(ROOT, args.carry)
    print(line)
    for what in missing:
        print(f"missing: {what}", file=sys.stderr)
    if not fits:
        print("error: more than the device tool carries: make the bundle or the checkout "
              "smaller", file=sys.stderr)
    return 0 if fits and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
