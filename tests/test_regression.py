"""The CI regression check can fail: a deliberately weakened variant trips it."""

import json

import torch

from ci import regression
from variants.attention import Attention


def test_weakened_variant_trips_the_check(monkeypatch, tmp_path):
    """Uniform attention over the window (content ignored) must be flagged REGRESSED against a
    baseline measured by the same code unpatched; the honest rerun must pass."""
    case = [("fixed", "synthetic")]
    baselines = regression.update(case, seeds=3)
    (tmp_path / "b.json").write_text(json.dumps(baselines))
    ok = regression.check(baselines, case)
    assert ok.status.tolist() == ["ok"] and ok.delta.abs().max() < 1e-9  # deterministic rerun

    monkeypatch.setattr(Attention, "_weights",
                        staticmethod(lambda logits, m: torch.zeros_like(logits).softmax(-1)))
    bad = regression.check(baselines, case)
    assert bad.status.tolist() == ["REGRESSED"], bad.to_string()
    assert (bad.delta > bad.tolerance).all()
