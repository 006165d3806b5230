"""The README's worked example of adding a variant is the plugin file examples/decay_plugin.py,
word for word, and runs as written."""

import re
from pathlib import Path

import torch
import yaml

import variants
from bench.experiment import claims
from bench.experiment.open import open_grid
from variants import registry

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_add_a_variant_example():
    text = README.read_text()
    block = re.search(r"<!-- example: add a variant -->\n```python\n(.*?)```", text, re.S)
    assert block, "README lost its add-a-variant example"
    assert block.group(1) == (ROOT / "examples" / "decay_plugin.py").read_text()
    try:
        exec(compile(block.group(1), "README.md", "exec"), {})
        assert "decay" in variants.names()
        assert variants.options("decay")["tau_init"].type is float
        layer = variants.build("decay", d_model=32, n_heads=2, span=16, tau_init=4.0)
        assert torch.allclose(layer.span_policy.log_tau.exp(), torch.tensor(4.0))
        x = torch.randn(1, 20, 32, requires_grad=True)
        y = layer(x)
        assert y.shape == (1, 20, 32)
        y[:, 5].sum().backward()
        assert (x.grad[:, 6:] == 0).all()  # still causal
        assert layer.mixing.P_l is not None and layer.mixing.P_w is not None  # talking heads
        assert layer.describe()["span_policy"] == "DecaySpan"  # the layer describes itself
    finally:
        registry._VARIANTS.pop("decay", None)


def test_add_a_claim_example():
    """The README's claim is examples/add_a_claim.yaml's, as the schema reads both (the
    README spells out the default test)."""
    block = re.search(r"<!-- example: add a claim -->\n```yaml\n(.*?)```", README.read_text(), re.S)
    assert block, "README lost its add-a-claim example"
    shown = claims.parse(yaml.safe_load(block.group(1))["claims"])
    ran = open_grid(ROOT / "examples" / "add_a_claim.yaml").claims
    assert shown == ran


def test_the_first_commands_are_the_smoke_grid_and_its_report():
    """A newcomer reaches a finished smoke run and its report within the README's first 30
    lines, before the main job, whose timing block lives in docs/speed.md (one line here)."""
    head = README.read_text().splitlines()[:30]
    commands = [line.split("#")[0].split() for line in head if line.startswith(".venv/bin/")]
    assert commands[0] == [".venv/bin/python", "-m", "bench.run", "ablations/smoke.yaml"]
    assert commands[1] == [".venv/bin/python", "-m", "bench.report", "smoke"]
    assert [c[3] for c in commands if c[2] == "bench.run"].index("ablations/heads_grid.yaml") > 0
    assert not any("| set-up |" in line for line in README.read_text().splitlines())
    assert "| set-up | the tests |" in (ROOT / "docs" / "speed.md").read_text()
