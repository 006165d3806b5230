"""train.amp: bf16 autocast with fp32 islands where the device multiplies in bf16; a clear
fallback to fp32 where it does not. bf16 is forced on hosts without it (emulated, slow, but
exact in what it computes) so the properties are checked on every CI machine."""

import json

import pytest
import torch

from bench.model import TransformerLM
from bench.training import precision
from bench.training.evaluate import evaluate
from bench.training.loop import train
from bench.training.step import make_optimizer, train_step
from tests.test_train import small_cfg
from variants.attention import Attention


@pytest.fixture
def bf16(monkeypatch):
    """As on a CPU with AVX-512 BF16 / AMX."""
    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: None)


@pytest.fixture
def no_bf16(monkeypatch):
    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: "no bf16 on this test host")
    monkeypatch.setattr(precision, "_said", set())


def tiny(variant: str) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(50, d_model=32, n_layers=2, n_heads=4, d_ff=64, span=32,
                         variant=variant, attn={"ramp": 8} if variant != "talking-heads" else {})


@pytest.mark.parametrize("variant", ["adaptive", "dynamic", "talking-heads"])
def test_amp_multiplies_in_bf16_and_keeps_softmax_loss_and_spans_fp32(bf16, monkeypatch,
                                                                       variant):
    seen = {}
    weights = Attention._weights

    def spy(logits, m):
        w = weights(logits, m)
        seen["logits"], seen["weights"] = logits.dtype, w.dtype
        return w

    monkeypatch.setattr(Attention, "_weights", staticmethod(spy))
    model = tiny(variant)
    for name, module in (("ff", model.blocks[0].ff.fc1), ("norm", model.blocks[0].ln1)):
        module.register_forward_hook(lambda m, i, o, name=name: seen.update({name: o.dtype}))
    cfg = small_cfg("train.amp=true").train
    x = torch.randint(0, 50, (2, 32))
    loss, _, cache = train_step(model, model, make_optimizer(model, cfg), cfg, x, x, None, 0,
                                amp=True)
    assert seen == {"logits": torch.bfloat16, "weights": torch.float32, "ff": torch.bfloat16,
                    "norm": torch.float32}
    assert loss.dtype == torch.float32 and all(c.dtype == torch.float32 for c in cache)
    policy = model.blocks[0].attn.span_policy
    if variant == "dynamic":
        assert policy.z_t.dtype == torch.float32 and policy.gate.weight.grad is not None
    if variant == "adaptive":
        assert policy.z_prime.grad.dtype == torch.float32 and policy.z_prime.grad.abs().sum() > 0


def test_amp_bpc_is_close_to_fp32_but_not_the_same(bf16):
    """The same weights scored in bf16 autocast and in fp32: bf16 really runs (the numbers move)
    and costs little (well under the 0.02 bpc the issue allows after training)."""
    model = tiny("adaptive")
    split = torch.randint(0, 50, (3000,)).numpy()
    fp32 = evaluate(model, split, 4, 32, torch.device("cpu")).bpc
    amp = evaluate(model, split, 4, 32, torch.device("cpu"), amp=True).bpc
    assert 0 < abs(amp - fp32) < 0.01


def test_amp_without_bf16_falls_back_to_fp32_once_with_the_reason(no_bf16, capsys, tmp_path):
    assert not precision.use_amp(True, torch.device("cpu"))
    assert not precision.use_amp(True, torch.device("cpu"))
    err = capsys.readouterr().err
    assert err == "train.amp=true: running fp32, because no bf16 on this test host\n"
    assert not precision.use_amp(False, torch.device("cpu"))  # nothing asked, nothing said
    cfg = small_cfg("train.amp=true", "train.steps=4")
    amp = train(cfg, tmp_path / "amp", progress=False)
    plain = train(small_cfg("train.steps=4"), tmp_path / "fp32", progress=False)
    assert json.loads((tmp_path / "amp" / "config.json").read_text())["precision"] == "fp32"
    assert amp.dev_bpc == plain.dev_bpc  # what ran is fp32, exactly


def test_amp_run_records_its_precision(bf16, tmp_path):
    cfg = small_cfg("train.amp=true", "train.steps=4")
    result = train(cfg, tmp_path / "amp", progress=False)
    info = json.loads((tmp_path / "amp" / "config.json").read_text())
    assert info["precision"] == "bf16-autocast" and info["config"]["train"]["amp"] is True
    plain = train(small_cfg("train.steps=4"), tmp_path / "fp32", progress=False)
    assert result.dev_bpc != plain.dev_bpc and abs(result.dev_bpc - plain.dev_bpc) < 0.05

