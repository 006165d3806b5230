#!/usr/bin/env bash
# The packages ci/gpu_check.sh needs on this project's GPU machines (no network; Python 3.12 and
# torch, numpy, pandas, scipy, statsmodels, pyyaml, tqdm preinstalled), at the versions
# constraints.txt pins, downloaded here into .whl/ (which git ignores), where pip reaches PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
pins() { for name in "$@"; do grep -iE "^$name==" constraints.txt; done; }
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl \
    $(pins pydantic pydantic_core annotated-types typing-inspection yacs termcolor platformdirs)
python3 -m pip download -q --no-deps --no-binary=:all: -d .whl $(pins fvcore iopath)  # sdists only
ls .whl
