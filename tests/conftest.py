import sys

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def clean(monkeypatch):
    """Restore the variant registry and drop imported file plugins afterwards; no plugin env,
    no tracking URI from the environment."""
    from bench import plugins
    from variants import registry

    monkeypatch.delenv(plugins.ENV, raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    saved = dict(registry._VARIANTS)
    yield
    registry._VARIANTS.clear()
    registry._VARIANTS.update(saved)
    for name in [m for m in sys.modules if m.startswith("attnbench_plugin_")]:
        del sys.modules[name]
