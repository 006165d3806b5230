#!/usr/bin/env bash
# Create or refresh .venv from the project's own files: torch==2.13.0 first, its CPU build
# (PyTorch's CPU index, whose 2.13.0+cpu pip prefers to PyPI's CUDA build of several GB; where
# that index cannot be reached, what PyPI or the machine's wheel cache has; TORCH_INDEX= (empty)
# takes PyPI's build, a CUDA one on Linux), then the package with every dependency pinned by
# constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
stamp=.venv/.attnbench-stamp
want=$(cat pyproject.toml constraints.txt | "$PY" -c "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())")
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
"$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
TORCH_INDEX=${TORCH_INDEX-https://download.pytorch.org/whl/cpu}
.venv/bin/python -m pip install -q --retries 1 --timeout 20 torch==2.13.0 \
    ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"}
.venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
echo "$want" > "$stamp"
