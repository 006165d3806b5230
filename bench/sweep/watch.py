"""Watching the tracking server during a sweep: where it stops answering, every trial stops
(and the runner says so, once), rather than Ray retrying trials that cannot log."""

import time
from typing import Any

from bench.tracking import store


def make_watch(uri: str, gone: list[str], every_s: float = 5.0) -> Any:
    """A Tune stopper that ends every trial once the tracking server stops answering: asked
    at each step of Tune's loop, it asks the server every `every_s` seconds (`gone` also
    fills where a callback's call to it failed)."""
    from ray import tune

    class Watch(tune.Stopper):
        next_s = 0.0

        def __call__(self, trial_id: str, result: dict) -> bool:
            return False

        def stop_all(self) -> bool:
            if not gone and time.monotonic() >= self.next_s:
                self.next_s = time.monotonic() + every_s
                if not store.answering(uri):
                    gone.append(f"the MLflow server at {uri} does not answer")
            return bool(gone)

    return Watch()
