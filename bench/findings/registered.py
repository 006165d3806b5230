"""A registered plan computed as it was registered: by the code of the commit that recorded it.

A trial records the hash of the plan it serves (`prereg.plan_sha`), computed by the code it
ran from. Today's code may compute another hash for the same grid file: a field added to the
claims' schema or the config since (an optional `note`, a new option at its default), another
alpha, a plan that now holds more (the grid's status). So where today's code does not give a
trial's plan, `prereg` asks the code of that commit: its bench/ and variants/ from git into a
scratch folder, run there on the grid file's text (`plan`). A harmless change then leaves a
registered plan registered, and a change of the analysis is seen as one (bench.verify
recomputes the verdicts with the registered code and names what today's code decides
otherwise), never as trials that ran under another plan.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# run by a commit's own code: the plan hash of each (grid file, seed start) with that code
OWN = """import json, sys
from pathlib import Path
from bench.findings import prereg
try:
    from bench.experiment.open import open_grid
except ImportError:
    from bench.experiment.grid import from_text
    def load(path): return from_text(path.read_text(), str(path))
else:
    def load(path):
        try:
            return open_grid(path, imports=False)
        except TypeError:
            return open_grid(path)
out = []
for path, start in json.loads(sys.argv[1]):
    try:
        out.append(prereg.plan_sha(load(Path(path)), start, prereg._analysis_here()))
    except Exception:
        out.append(None)
print(json.dumps(out))
"""


def plan(root: Path, code: str, commit: str, text: str, name: str, start: int | None
         ) -> str | None:
    """The plan's hash of grid file `text` (named `name`) for seed start `start` as the code
    of `commit` in repository `root` computes it (`code`: the folder of bench/ in the
    repository, "" at its top); None where git cannot give that code or it cannot read the
    file."""
    with tempfile.TemporaryDirectory(prefix="attnbench-plan-") as scratch:
        unpacked, grid_file = Path(scratch) / "code", Path(scratch) / name
        unpacked.mkdir()
        grid_file.write_text(text)
        archive = subprocess.run(["git", "archive", commit, f"{code}bench", f"{code}variants"],
                                 cwd=root, capture_output=True)
        unpack = subprocess.run(["tar", "-x", "-C", str(unpacked)], input=archive.stdout,
                                capture_output=True)
        where = unpacked / code
        if archive.returncode or unpack.returncode or not (where / "bench").is_dir():
            return None
        ran = subprocess.run([sys.executable, "-c", OWN, json.dumps([[str(grid_file), start]])],
                             cwd=where, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONPATH": str(where)})
    try:
        return json.loads(ran.stdout)[0] if ran.returncode == 0 else None
    except (ValueError, IndexError):
        return None
