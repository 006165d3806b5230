"""The README's worked example of adding a variant runs as written."""

import re
from pathlib import Path

import torch

import variants
from variants import registry

README = Path(__file__).resolve().parents[1] / "README.md"


def test_add_a_variant_example(capsys):
    text = README.read_text()
    block = re.search(r"<!-- example: add a variant -->\n```python\n(.*?)```", text, re.S)
    assert block, "README lost its add-a-variant example"
    try:
        exec(compile(block.group(1), "README.md", "exec"), {})
        assert "decay" in variants.names()
        layer = variants.build("decay", d_model=32, n_heads=2, span=16)
        x = torch.randn(1, 20, 32, requires_grad=True)
        layer(x)[:, 5].sum().backward()
        assert (x.grad[:, 6:] == 0).all()  # still causal
        out = capsys.readouterr().out
        assert "torch.Size([2, 32, 64])" in out
        assert "DecaySpan 36864.0" in out  # the layer's own description and #FLOPS per query
    finally:
        registry._FACTORIES.pop("decay", None)
