"""The README's worked example of adding a variant is ablations/window.py's policy and
registration, word for word, and runs as written."""

import re
from pathlib import Path

import pytest
import torch
import yaml

import variants
from bench.experiment import claims
from bench.experiment.open import open_grid
from variants import registry

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_add_a_variant_example():
    """The README's block is the plugin file from its class on; the file, as a plugin, gives a
    causal layer whose heads see exactly `keep` distances, and refuses a keep above S."""
    block = re.search(r"<!-- example: add a variant -->\n```python\n(.*?)```", README.read_text(),
                      re.S)
    assert block, "README lost its add-a-variant example"
    code = (ROOT / "ablations" / "window.py").read_text()
    assert code.endswith(block.group(1)) and block.group(1).startswith("class WindowSpan")
    try:
        exec(compile(code, "ablations/window.py", "exec"), {})
        assert "window" in variants.names() and variants.options("window")["keep"].type is int
        layer = variants.build("window", d_model=32, n_heads=2, span=16, keep=5)
        assert layer.spans().tolist() == [5.0, 5.0] and layer.widest == 5
        x = torch.randn(1, 20, 32, requires_grad=True)
        layer(x)[:, 12].sum().backward()
        seen = (x.grad[0].abs().sum(-1) > 0).nonzero().flatten().tolist()
        assert seen == [8, 9, 10, 11, 12]  # itself and the 4 before it: causal and local
        with pytest.raises(ValueError, match="keep=17: expected 1 to the span S = 16"):
            variants.build("window", d_model=32, n_heads=2, span=16, keep=17)
    finally:
        registry._VARIANTS.pop("window", None)


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
    assert commands[0] == [".venv/bin/python", "-m", "bench.run", "examples/smoke.yaml"]
    assert commands[1] == [".venv/bin/python", "-m", "bench.report", "smoke"]
    assert [c[3] for c in commands if c[2] == "bench.run"].index("ablations/heads_grid.yaml") > 0
    assert not any("| set-up |" in line for line in README.read_text().splitlines())
    assert "| set-up | the tests |" in (ROOT / "docs" / "speed.md").read_text()
