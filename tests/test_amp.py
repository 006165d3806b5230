"""train.amp (auto by default): bf16 autocast with fp32 islands where the device multiplies in
bf16 natively, fp32 elsewhere, with a clear fallback for `true`; the detection itself; the
precision in a trial's identity and record. bf16 is forced on hosts without it (emulated, slow,
but exact in what it computes) so the properties are checked on every CI machine."""

import json
from pathlib import Path

import pytest
import torch

from bench.config import ModelConfig
from bench.model import TransformerLM
from bench.training import precision
from bench.training.evaluate import Reading, evaluate
from bench.training.loop import train
from bench.training.step import Learner, make_optimizer, train_step
from tests.helpers import small_cfg, smoke_trials
from variants import attention

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def bf16(monkeypatch):
    """As on a CPU with AVX-512 BF16 / AMX."""
    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: None)


@pytest.fixture
def no_bf16(monkeypatch):
    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: "no bf16 on this test host")


def tiny(variant: str) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(variant=variant, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                                     span=32, attn={"ramp": 8} if variant != "talking-heads"
                                     else {}), 50)


@pytest.mark.parametrize("variant", ["adaptive", "dynamic-span", "talking-heads"])
def test_amp_multiplies_in_bf16_and_keeps_softmax_loss_and_spans_fp32(bf16, monkeypatch,
                                                                       variant):
    seen = {}
    weights = attention.softmax

    def spy(logits, m):
        w = weights(logits, m)
        seen["logits"], seen["weights"] = logits.dtype, w.dtype
        return w

    monkeypatch.setattr(attention, "softmax", spy)
    model = tiny(variant)
    for name, module in (("ff", model.blocks[0].ff.fc1), ("norm", model.blocks[0].ln1)):
        module.register_forward_hook(lambda m, i, o, name=name: seen.update({name: o.dtype}))
    cfg = small_cfg("train.amp=true").train
    x = torch.randint(0, 50, (2, 32))
    loss, _, cache = train_step(Learner(model, model, make_optimizer(model, cfg), cfg, True), x,
                                x, None, 0)
    assert seen == {"logits": torch.bfloat16, "weights": torch.float32, "ff": torch.bfloat16,
                    "norm": torch.float32}
    assert loss.dtype == torch.float32 and all(c.dtype == torch.float32 for c in cache)
    policy = model.blocks[0].attn.span_policy
    if variant == "dynamic-span":
        assert policy.z_t.dtype == torch.float32 and policy.gate.weight.grad is not None
    if variant == "adaptive":
        assert policy.z_prime.grad.dtype == torch.float32 and policy.z_prime.grad.abs().sum() > 0


def test_amp_bpc_is_close_to_fp32_but_not_the_same(bf16):
    """The same weights scored in bf16 autocast and in fp32: bf16 really runs (the numbers move)
    and costs little (well under the 0.02 bpc the issue allows after training)."""
    model = tiny("adaptive")
    split = torch.randint(0, 50, (3000,)).numpy()
    fp32 = evaluate(model, split, Reading(4, 32, torch.device("cpu"))).bpc
    amp = evaluate(model, split, Reading(4, 32, torch.device("cpu"), amp=True)).bpc
    assert 0 < abs(amp - fp32) < 0.01


def test_a_bf16_step_and_an_fp32_step_from_the_same_weights_give_close_losses(bf16):
    """One training step from the same weights and batch: the loss of bf16 autocast is close to
    fp32's, but not the same (bf16 really ran)."""
    losses = []
    for amp in (False, True):
        model = tiny("adaptive")
        cfg = small_cfg("train.amp=false").train
        x = torch.randint(0, 50, (2, 32), generator=torch.Generator().manual_seed(1))
        loss, _, _ = train_step(Learner(model, model, make_optimizer(model, cfg), cfg, amp), x,
                                x, None, 0)
        losses.append(loss.item())
    assert losses[0] != losses[1] and abs(losses[0] - losses[1]) < 0.01 * losses[0]


@pytest.mark.parametrize("support", [None, "no bf16 on this test host"])
def test_auto_resolves_by_the_devices_support(support, monkeypatch, capsys):
    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: support)
    cpu = torch.device("cpu")
    assert precision.resolve("auto", cpu, say=True) is (support is None)
    assert precision.resolve(False, cpu, say=True) is False
    assert precision.resolve(True, cpu) is (support is None)
    assert capsys.readouterr().err == ""  # auto and false say nothing; true says it per run


@pytest.mark.parametrize("switch", ["auto", "off"])
def test_the_detection_asks_for_the_bf16_instructions_themselves(switch, monkeypatch):
    """Native bf16 on a CPU means AVX-512 BF16 or AMX (the instructions, as /proc/cpuinfo lists
    them), not any AVX-512 core (oneDNN's own bf16 flag), where bf16 would be emulated; with
    ATTNBENCH_CPU_BF16=off this CPU is taken for one without them, whatever it has (so a
    machine with AVX-512 BF16 runs what an AVX2 machine would). Both cases on any machine."""
    import platform
    from pathlib import Path

    cpuinfo = Path("/proc/cpuinfo")
    if platform.system() != "Linux" or not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo to read the CPU's flags from")
    monkeypatch.setenv(precision.SWITCH, switch)
    flags = set(next(line for line in cpuinfo.read_text().splitlines()
                     if line.startswith("flags")).split(":", 1)[1].split())
    native = bool({"avx512_bf16", "amx_bf16"} & flags) and switch == "auto"
    why = precision.bf16_unsupported(torch.device("cpu"))
    assert (why is None) is native, (why, sorted(f for f in flags if "512" in f or "amx" in f))
    assert precision.resolve("auto", torch.device("cpu")) is native
    if switch == "off":
        assert why == "ATTNBENCH_CPU_BF16=off: running as a CPU without native bf16 would"
    elif why is not None:
        assert "AVX-512 BF16 or AMX" in why and torch.backends.cpu.get_cpu_capability() in why


def test_the_switch_refuses_a_value_it_does_not_take(monkeypatch, capsys):
    """ATTNBENCH_CPU_BF16=maybe: a ConfigError naming the variable and what it takes, and
    bench.run exits 2 with it before anything runs."""
    from bench import run
    from bench.config import ConfigError

    monkeypatch.setenv(precision.SWITCH, "maybe")
    with pytest.raises(ConfigError, match="ATTNBENCH_CPU_BF16='maybe' is not a value it takes: "
                                          "expected auto"):
        precision.resolve("auto", torch.device("cpu"))
    assert run.main([str(ROOT / "examples" / "smoke.yaml"), "--dry-run"]) == 2
    assert "ATTNBENCH_CPU_BF16='maybe'" in capsys.readouterr().err
    assert precision.resolve(False, torch.device("cpu")) is False  # fp32 asks nothing


def test_amp_true_without_bf16_falls_back_to_fp32_and_says_why_each_run(no_bf16, capsys,
                                                                        tmp_path):
    """Ray reuses a worker for its next trial: every run that falls back says so."""
    cfg = small_cfg("train.amp=true", "train.steps=4")
    amp = train(cfg, tmp_path / "amp", progress=False)
    again = train(cfg, tmp_path / "again", progress=False)
    err = capsys.readouterr().err
    assert err.count("train.amp=true: running fp32, because no bf16 on this test host\n") == 2
    plain = train(small_cfg("train.amp=false", "train.steps=4"), tmp_path / "fp32",
                  progress=False)
    assert json.loads((tmp_path / "amp" / "config.json").read_text())["precision"] == "fp32"
    assert amp.dev_bpc == again.dev_bpc == plain.dev_bpc  # what ran is fp32, exactly


def test_amp_run_records_its_precision(bf16, tmp_path):
    cfg = small_cfg("train.steps=4")  # auto, the default: bf16 where native
    result = train(cfg, tmp_path / "amp", progress=False)
    info = json.loads((tmp_path / "amp" / "config.json").read_text())
    assert info["precision"] == "bf16-autocast" and info["config"]["train"]["amp"] == "auto"
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    plain = train(small_cfg("train.amp=false", "train.steps=4"), tmp_path / "fp32",
                  progress=False)
    assert result.dev_bpc != plain.dev_bpc and abs(result.dev_bpc - plain.dev_bpc) < 0.05


@pytest.mark.parametrize("value", ["maybe", "1", 2])
def test_amp_takes_auto_true_or_false_only(value, tmp_path, capsys):
    from bench.train import main

    assert main(["--set", f"train.amp={value}", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "train.amp: Value error, expected one of auto, true, false" in err
    assert not (tmp_path / "run").exists()


def test_trial_identity_differs_by_the_resolved_precision(monkeypatch):
    """The same grid on a machine that resolves `auto` to bf16 and on one that resolves it to
    fp32: other trials, never reused or averaged together."""
    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: "none here")
    fp32 = {t.hash for t in smoke_trials([])}
    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: None)
    bf16 = {t.hash for t in smoke_trials([])}
    assert fp32.isdisjoint(bf16) and len(fp32) == len(bf16) == 2
    forced = {t.hash for t in smoke_trials(["train.amp=false"])}
    assert forced.isdisjoint(bf16)


def test_a_worker_that_resolves_auto_otherwise_refuses_the_trial(monkeypatch, tmp_path):
    """The driver plans a trial in bf16 (its identity holds bf16); a worker without native bf16
    refuses it before writing anything, so no fp32 result is ever filed under a bf16 identity."""
    from bench.config import ConfigError

    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: None)
    trial = smoke_trials([])[0]
    assert trial.precision == "bf16-autocast"
    monkeypatch.setattr(precision, "bf16_unsupported", lambda device: "none here")
    with pytest.raises(ConfigError, match="train.amp=auto: the trial was planned in "
                       "bf16-autocast, but this worker .* runs it in fp32; pin train.amp"):
        train(trial.cfg, tmp_path / "run", planned=trial.precision)
    assert not (tmp_path / "run").exists()
    result = train(trial.cfg.model_copy(update={"train": trial.cfg.train.model_copy(
        update={"steps": 2, "eval_every": 2})}), tmp_path / "ok", planned="fp32")
    assert json.loads((tmp_path / "ok" / "config.json").read_text())["precision"] == "fp32"
    assert result.steps == 2
