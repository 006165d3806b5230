#!/usr/bin/env bash
# Create or refresh .venv from the project's own files: torch==2.13.0 first (an open torch range
# would pull a multi-GB CUDA build), then the package with every dependency pinned by constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
stamp=.venv/.attnbench-stamp
want=$(cat pyproject.toml constraints.txt | "$PY" -c "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())")
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
"$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
echo "$want" > "$stamp"
