"""Masks that see absolute positions (`SpanPolicy.mask`'s `pos`), through the example plugin
examples/global_plugin.py: a local window plus global tokens (every key whose position in the
text is a multiple of `every`) and sinks (the text's first symbols). A key is global by its
place in the text, however the text is cut into blocks, streams and batches; the policy's cost
is what it computes (read off what its mask keeps at any position)."""

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import variants
from bench import plugins
from bench.config import ModelConfig, parse_sets, resolve
from bench.model import TransformerLM
from bench.training.evaluate import LN2, Reading, evaluate
from bench.training.loop import train as train_run

ROOT = Path(__file__).resolve().parents[1]
D, H, S = 16, 2, 32


@pytest.fixture
def plugin(clean):
    plugins.load([str(ROOT / "examples" / "global_plugin.py")], env=False)


def build(**options) -> variants.Attention:
    torch.manual_seed(0)
    return variants.build("global-tokens", d_model=D, n_heads=H, span=S, **options)


def influence(layer: variants.Attention, x: torch.Tensor, t: int, start: int) -> torch.Tensor:
    """(M,) bool: the inputs query t's output depends on, the block starting at text position
    `start` (no cache: the start of a stream)."""
    x = x.clone().requires_grad_(True)
    layer(x, None, torch.tensor([start]))[:, t].sum().backward()
    return x.grad.abs().sum(dim=(0, 2)) > 0


@pytest.mark.parametrize("start", [0, 5, 37])
def test_a_query_sees_its_window_and_the_global_keys_within_S(plugin, start):
    """Query t sees the keys at distances 0..keep-1, and any earlier key within S - 1 whose
    text position is a multiple of `every` or below `sinks`; nothing else, nothing later."""
    layer, x, t = build(keep=4, every=8, sinks=3), torch.randn(1, 70, D), 60
    seen = influence(layer, x, t, start)
    s = torch.arange(70)
    pos = start + s
    kept = (t - s >= 0) & (t - s < S) & ((t - s < 4) | (pos % 8 == 0) | (pos < 3))
    assert torch.equal(seen, kept), (seen.nonzero().flatten(), kept.nonzero().flatten())


def test_without_global_tokens_it_is_the_local_window(plugin):
    """every = sinks = 0: the multi-head window of `keep`, output for output (cache included),
    with its window, cache and #FLOPS; with global tokens it computes the whole band of S."""
    local = build(keep=6, every=0, sinks=0)
    fixed = variants.build("fixed", d_model=D, n_heads=H, span=6)
    fixed.load_state_dict({k: v[:6] if k.endswith("key_pe") else v
                           for k, v in local.state_dict().items()})
    x, c = torch.randn(2, 20, D), torch.randn(2, 5, D)
    assert torch.allclose(local(x, c, torch.tensor([40, 100])), fixed(x, c), atol=1e-6)
    assert (local.window, local.cache_size, local.flops(local.window)) == (6, 5, fixed.flops(6))
    wide = build(keep=6, every=16)
    assert (wide.window, wide.cache_size, wide.spans().tolist()) == (S, S - 1, [float(S)] * H)


def test_whether_a_mask_reads_positions_is_read_off_it(plugin):
    """Reading `pos` makes a mask positional (the layer then computes each key's position);
    one that never reads it is not, with global tokens or sinks off, whatever its class: the
    layer computes no positions for it, and its output does not depend on `start`."""
    assert build(keep=4, every=8).span_policy.kept.positional
    assert build(keep=4, every=0, sinks=2).span_policy.kept.positional
    local = build(keep=4, every=0, sinks=0)
    assert not local.span_policy.kept.positional
    x = torch.randn(1, 40, D)
    assert torch.equal(local(x, None, torch.tensor([3])), local(x, None, torch.tensor([50])))


def model() -> TransformerLM:
    torch.manual_seed(0)
    cfg = ModelConfig(variant="global-tokens", d_model=D, n_layers=2, n_heads=H, d_ff=32,
                      span=S, attn={"keep": 3, "every": 7, "sinks": 2})
    return TransformerLM(cfg, 11).eval()


def test_evaluation_reads_each_key_at_its_place_in_the_text(plugin):
    """Scored in 1 or 3 streams of blocks of 16, the bpc is that of one pass over the whole text
    from position 0: each stream's keys are global by their text positions, not by where the
    stream or block starts (which would move them), and not ignored (every key of S)."""
    net, text = model(), np.random.default_rng(0).integers(0, 11, 301)
    with torch.no_grad():
        idx = torch.from_numpy(text).long()[None]
        logits, _ = net(idx[:, :-1], None, torch.tensor([0]))
        one_pass = F.cross_entropy(logits[0], idx[0, 1:]).item() / LN2
        logits, _ = net(idx[:, :-1])  # no positions: every key of S
        ignored = F.cross_entropy(logits[0], idx[0, 1:]).item() / LN2
    assert abs(one_pass - ignored) > 1e-3
    for batch in (1, 3):
        got = evaluate(net, text, Reading(batch, 16, torch.device("cpu"))).bpc
        assert got == pytest.approx(one_pass, rel=1e-5), batch


def test_training_hands_each_block_its_text_positions(plugin, monkeypatch, tmp_path):
    """The trainer's blocks reach the mask at their rows' text positions: row b of a batch
    reads train[b n + pos ...] (n = len(train) // B), so query 0 of a block's first layer sees
    itself at b n + pos."""
    seen: list[torch.Tensor] = []
    policy = variants.registry._VARIANTS["global-tokens"]["span_policy"]
    mask = policy.mask

    def spy(self, dist, pos):
        if self.training and pos.shape[:3] == (2, 1, 32):  # a training block, not the read-off
            seen.append(pos[:, 0, 0, -1].clone())  # query 0's own key: distance 0
        return mask(self, dist, pos)

    monkeypatch.setattr(policy, "mask", spy)
    cfg = resolve(parse_sets(["model.variant=global-tokens", "model.n_layers=1",
                              "train.steps=3", "train.block=32", "train.batch_size=2",
                              "train.eval_every=3", "train.eval_tokens=300",
                              "train.warmup=1", "data.n_chars=20000"]), preset="smoke")
    train_run(cfg, tmp_path / "run", progress=False)
    n = len(cfg.corpus().train) // 2
    assert [t.tolist() for t in seen] == [[0, n], [32, n + 32], [64, n + 64]]


def test_the_docs_show_the_plugins_masks_as_they_are():
    """docs/variants.md's global-tokens snippet is the example plugin's code, word for word."""
    text = (ROOT / "docs" / "variants.md").read_text()
    snippet = text.split("### Masks that see positions")[1].split("```python\n")[1].split("```")[0]
    assert snippet in (ROOT / "examples" / "global_plugin.py").read_text()
