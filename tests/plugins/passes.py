"""attnbench test plugin: a trial trains only with a pass the test hands out, held inside its Ray
worker until then, so that a sweep cannot finish before a test cuts it, on any CPU at any speed
with any number of cores.

$ATTNBENCH_PASSES names a folder of passes: empty files named pass<i> that the test writes
(tests/test_run.py's `hand_out`). A trial takes one, by renaming it away (atomic: two workers
never take the same), after its MLflow run is open and before it trains; a trial that finds none
waits there until it is killed, or until the folder is gone (the test's temporary folder
removed: it exits, so no worker outlives its test). Exactly as many trials train as the test
handed out passes. $ATTNBENCH_PASSES unset: the plugin changes nothing.
"""

import os
import time
from pathlib import Path

from bench.sweep import workers

ENV = "ATTNBENCH_PASSES"
_train = workers.train


def take_pass(folder: Path) -> None:
    """Take a pass from `folder`, waiting for one; exit the process if the folder is removed."""
    while folder.is_dir():
        for p in sorted(folder.glob("pass*")):
            try:
                p.rename(folder / f"taken{p.name[4:]}.{os.getpid()}")
                return
            except FileNotFoundError:  # another worker took it first
                continue
        time.sleep(0.1)
    os._exit(1)


def held_train(*args, **kwargs):
    """`train`, after a pass from $ATTNBENCH_PASSES (when set)."""
    if os.environ.get(ENV):
        take_pass(Path(os.environ[ENV]))
    return _train(*args, **kwargs)


workers.train = held_train
