"""git asked one command (`git`): the provenance checks' one door to the repository (the plan's
commits and dates, the code that trains at each run commit, the results that share trials)."""

import subprocess
from pathlib import Path


def git(where: Path, *args: str) -> str | None:
    """git's output for `args` run in `where`; None where it fails."""
    try:
        out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True,
                             check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout
