"""A test plugin that makes a cut sweep certain on any machine: the first K trials of a grid
train as usual, every later one waits inside its Ray worker until it is killed, so the sweep can
never finish before its deadline (or a test's signal), however fast or many the CPUs are.

Use (the driver hands its plugins to every trial, which imports them before training):

    env = {**os.environ, **hold.env(k=2, grid="cut")}   # ATTNBENCH_PLUGINS, ATTNBENCH_HOLD...
    subprocess.Popen([sys.executable, "-m", "bench.run", grid_file, ...], env=env)
    hold.wait_until_held(results_dir / "cut", driver)    # K may train, the rest never ends

- ATTNBENCH_HOLD=K: the first K trials of each grid to start training (a grid: the folder its
  trials write in, <results-dir>/<grid>) train; the others wait in `train` until killed.
- ATTNBENCH_HOLD_GRID=NAME (optional): only grid NAME's trials are counted and held; other
  sweeps the same environment runs (a smoke sweep before the grid) train as usual.
- <results-dir>/<grid>/held.txt, the ledger: a line `ran NAME` or `held NAME` per trial as it
  starts (written under a lock; a trial that starts again, resumed, keeps its first word).
  `ledger(folder)` reads it; `wait_until_held` waits for the first held trial.

Imported without ATTNBENCH_HOLD (a test importing the helpers below), it changes nothing.
"""

import fcntl
import os
import subprocess
import time
from pathlib import Path

HOLD, GRID = "ATTNBENCH_HOLD", "ATTNBENCH_HOLD_GRID"
LEDGER = "held.txt"


def env(k: int, grid: str | None = None) -> dict[str, str]:
    """The environment settings that hold every trial after the first `k` (of grid `grid`
    alone, where named): this plugin listed in ATTNBENCH_PLUGINS, with any plugins already
    listed there."""
    listed = [p for p in os.environ.get("ATTNBENCH_PLUGINS", "").split(",") if p]
    return {"ATTNBENCH_PLUGINS": ",".join([*listed, str(Path(__file__).resolve())]),
            HOLD: str(k), **({GRID: grid} if grid else {})}


def ledger(folder: Path) -> dict[str, list[str]]:
    """A grid folder's ledger: the trials that ran and those held, by name, in start order."""
    lines = (folder / LEDGER).read_text().split() if (folder / LEDGER).exists() else []
    said = dict(zip(lines[1::2], lines[::2], strict=True))
    return {word: [name for name, w in said.items() if w == word] for word in ("ran", "held")}


def wait_until_held(folder: Path, process: subprocess.Popen | None = None
                    ) -> dict[str, list[str]]:
    """Wait until a trial of grid `folder` is held (the sweep cannot finish from then on);
    returns the ledger. Fails if `process` ends first or after tests/limits.py's HANG, a hang
    guard only."""
    from tests.limits import HANG  # the tests' import: a worker importing the plugin needs none

    limit = HANG
    deadline = time.monotonic() + limit
    while not ledger(folder)["held"]:
        assert process is None or process.poll() is None, f"it ended first: {process.args}"
        assert time.monotonic() < deadline, f"no trial held in {folder} after {limit} s"
        time.sleep(0.5)
    return ledger(folder)


def _claim(out_dir: Path, k: int) -> str:
    """`ran` or `held` for the trial in `out_dir` (<grid folder>/trials/NAME), recorded in the
    grid's ledger under a lock: the first `k` names to claim run."""
    folder = out_dir.parent.parent
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LEDGER, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        words = f.read().split()
        said = dict(zip(words[1::2], words[::2], strict=True))
        if out_dir.name not in said:
            said[out_dir.name] = "ran" if list(said.values()).count("ran") < k else "held"
            f.write(f"{said[out_dir.name]} {out_dir.name}\n")
            f.flush()
        return said[out_dir.name]


def _holding(train):
    """`train` (bench.training.loop.train as the Ray worker calls it) that first claims its
    trial's place and, past the first K, never returns."""
    k, grid = int(os.environ[HOLD]), os.environ.get(GRID)

    def held(cfg, out_dir: Path, **kwargs):
        out_dir = Path(out_dir)
        if (grid is None or out_dir.parent.parent.name == grid) and _claim(out_dir, k) == "held":
            while True:  # until Tune or the test kills this worker
                time.sleep(1)
        return train(cfg, out_dir, **kwargs)

    return held


if os.environ.get(HOLD):
    from bench.sweep import workers

    workers.train = _holding(workers.train)
