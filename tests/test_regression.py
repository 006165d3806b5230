"""The CI regression check can fail: a deliberately weakened variant trips it."""

import json

import torch

from ci import regression
from variants import attention


def test_weakened_variant_trips_the_check(monkeypatch):
    """Uniform attention over the window (content ignored) must be flagged REGRESSED against the
    committed baseline CI checks (its tolerance is 3 seed standard deviations; a rerun's
    determinism is tests/test_train.py's). That the code as it is passes it, this case among
    the others, is CI's `python -m ci.regression` (.ci/run)."""
    baselines = json.loads(regression.BASELINES.read_text())
    case = [("fixed", "synthetic")]
    monkeypatch.setattr(attention, "softmax",
                        lambda logits, m: torch.zeros_like(logits).softmax(-1))
    bad = regression.check(baselines, case)
    assert bad.status.tolist() == ["REGRESSED"], bad.to_string()
    assert (bad.delta > bad.tolerance).all()
