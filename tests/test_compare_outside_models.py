"""bench.compare_outside_models: bad input exits 2 naming the path before anything is timed; end to
end with small stand-ins for nanoGPT and the adaptive-span reference (real torch modules with the
same call signatures), its JSON rows, the FLOPs per step it counts for each system (against each
one's analytic count), and the ratios and MFU it derives from the measured seconds, in fp32 and
bf16."""

import json
import textwrap

import numpy as np
import pytest
import torch

from bench import compare_outside_models
from bench.measure import outside_models as anchor_lib
from bench.model import create_model
from bench.model.cost import executed_flops

NANOGPT = '''
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GPTConfig:
    block_size: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float = 0.0
    bias: bool = True


class GPT(nn.Module):
    """Causal stand-in: per layer one head of fused causal attention and a ReLU MLP of
    4 x n_embd, both residual; the output layer tied to the embedding, as nanoGPT's."""

    def __init__(self, config):
        super().__init__()
        D, L, bias = config.n_embd, config.n_layer, config.bias
        self.wte = nn.Embedding(config.vocab_size, D)
        self.qkv = nn.ModuleList(nn.Linear(D, 3 * D, bias=bias) for _ in range(L))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(D, 4 * D, bias=bias), nn.ReLU(),
                                               nn.Linear(4 * D, D, bias=bias))
                                 for _ in range(L))
        print("number of parameters:", sum(p.numel() for p in self.parameters()))

    def forward(self, idx, targets=None):
        x = self.wte(idx)
        for qkv, mlp in zip(self.qkv, self.mlp):
            q, k, v = qkv(x).unsqueeze(1).chunk(3, dim=-1)
            x = x + F.scaled_dot_product_attention(q, k, v, is_causal=True).squeeze(1)
            x = x + mlp(x)
        logits = x @ self.wte.weight.T
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss
'''

REFERENCE = '''
import torch
import torch.nn.functional as F
from torch import nn


class Span(nn.Module):
    def __init__(self, span, loss):
        super().__init__()
        self.z, self.span, self.loss = nn.Parameter(torch.zeros(1)), span, loss

    def get_loss(self):
        return self.loss * self.span * self.z.mean()

    def clamp_param(self):
        self.z.data.clamp_(0, 1)


class SeqAttention(nn.Module):
    def __init__(self, hidden_size, span, adapt_span_params):
        super().__init__()
        self.span, self.proj = span, nn.Linear(2 * hidden_size, hidden_size)
        if adapt_span_params["adapt_span_enabled"]:
            self.adaptive_span = Span(span, adapt_span_params["adapt_span_loss"])

    def get_cache_size(self):
        return self.span


class Layer(nn.Module):
    """Mixes each position with the mean of the cached states."""

    def __init__(self, hidden_size, span, adapt_span_params):
        super().__init__()
        self.attn = nn.Module()
        self.attn.attn = SeqAttention(hidden_size, span, adapt_span_params)

    def forward(self, h, h_cache):
        mem = h_cache.mean(dim=1, keepdim=True).expand_as(h)
        return h + torch.relu(self.attn.attn.proj(torch.cat([h, mem], dim=-1)))


class TransformerSeq(nn.Module):
    def __init__(self, vocab_size, hidden_size, nb_heads, nb_layers, attn_span, emb_dropout,
                 adapt_io_params, inner_hidden_size, dropout, adapt_span_params,
                 pers_mem_params):
        super().__init__()
        self.in_emb = nn.Embedding(vocab_size, hidden_size)
        self.out_emb = nn.Linear(hidden_size, vocab_size)
        self.layers = nn.ModuleList(Layer(hidden_size, attn_span, adapt_span_params)
                                    for _ in range(nb_layers))

    def forward(self, x, h_cache):
        h = self.in_emb(x)
        cache = []
        for layer, c in zip(self.layers, h_cache):
            keep = layer.attn.attn.get_cache_size()
            cache.append(torch.cat([c, h], dim=1)[:, -keep:].detach())
            h = layer(h, c)
        return F.log_softmax(self.out_emb(h), dim=-1), cache, None
'''

SMALL = ["model.d_model=16", "model.n_layers=2", "model.n_heads=2", "model.d_ff=64",
         "model.span=16", "model.attn.ramp=4", "train.block=8", "train.batch_size=2",
         "train.device=cpu"]


ADAGRAD = '''
    import torch


    class AdagradWithGradClip(torch.optim.Adagrad):
        def __init__(self, params, lr, grad_clip):
            super().__init__(params, lr=lr)
            self.grad_clip = grad_clip

        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        torch.nn.utils.clip_grad_norm_([p], self.grad_clip)
            super().step()
'''


@pytest.fixture
def checkouts(tmp_path):
    """(nanogpt dir, reference dir, enwik8-like byte file) in tmp_path."""
    nano, ref = tmp_path / "nanoGPT", tmp_path / "adaptive-span"
    for folder, name, text in ((nano, "model.py", NANOGPT), (ref, "models.py", REFERENCE),
                               (ref, "adagrad_with_grad_clip.py", ADAGRAD)):
        folder.mkdir(exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text))
    corpus = tmp_path / "enwik8.head"
    corpus.write_bytes(np.random.default_rng(0).integers(0, 256, 20_000, np.uint8).tobytes())
    return nano, ref, corpus


@pytest.fixture
def untimed(monkeypatch):
    """Fail the test if anything is timed."""
    def timed(*args, **kwargs):
        raise AssertionError("timed before the input was checked")
    monkeypatch.setattr(anchor_lib, "matmul_peak", timed)
    monkeypatch.setattr(anchor_lib, "time_steps", timed)


def argv(nano, ref, corpus, *extra):
    return ["--nanogpt", str(nano), "--reference", str(ref), "--data", str(corpus),
            *[a for s in SMALL for a in ("--set", s)], *extra]


@pytest.mark.parametrize("which", ["nanogpt", "reference", "data"])
def test_missing_path_exits_2(which, checkouts, tmp_path, untimed, capsys):
    args = dict(zip(["nanogpt", "reference", "data"], checkouts, strict=True))
    args[which] = tmp_path / "absent"
    with pytest.raises(SystemExit) as exit_:
        compare_outside_models.main(argv(*args.values()))
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--{which}" in err and str(tmp_path / "absent") in err
    assert ("enwik8 prefix not found" if which == "data" else "no such directory") in err


@pytest.mark.parametrize(("which", "file"), [("nanogpt", "model.py"), ("reference", "models.py"),
                                             ("reference", "adagrad_with_grad_clip.py")])
def test_dir_without_module_exits_2(which, file, checkouts, tmp_path, untimed, capsys):
    args = dict(zip(["nanogpt", "reference", "data"], checkouts, strict=True))
    (args[which] / file).unlink()
    with pytest.raises(SystemExit) as exit_:
        compare_outside_models.main(argv(*args.values()))
    assert exit_.value.code == 2
    assert f"{args[which]}: has no {file}" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--steps", "--rounds"])
@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_steps_and_rounds_must_be_positive(flag, value, checkouts, untimed, capsys):
    with pytest.raises(SystemExit) as exit_:
        compare_outside_models.main(argv(*checkouts, flag, value))
    assert exit_.value.code == 2
    assert f"{value!r}: expected a positive int" in capsys.readouterr().err


def test_module_without_its_class_and_bad_size_exit_2(checkouts, untimed, capsys):
    nano, ref, corpus = checkouts
    (nano / "model.py").write_text("GPTConfig = dict\n")
    assert compare_outside_models.main(argv(nano, ref, corpus)) == 2
    assert f"{nano / 'model.py'}: defines no GPT" in capsys.readouterr().err
    assert compare_outside_models.main(argv(*checkouts, "--set", "model.d_ff=48")) == 2
    assert "nanoGPT's MLP is 4 x n_embd" in capsys.readouterr().err


def analytic_flops(checkouts) -> dict[str, float]:
    """FLOPs of one cached training step (2 per multiply-add, backward twice the forward) of each
    fixed-span system at SMALL: what the counter must say. nanoGPT's stand-in: 6 x its matmul
    weights x tokens plus its fused causal attention, as torch counts it (the whole T x T score
    matrix, 2 products forward, 5 backward). The reference's stand-ins: 6 x matmul weights x
    tokens. attnbench `fixed`: 6 x `executed_flops` per token x tokens, plus what it executes
    beyond that: the W - 1 cached states re-projected through W_k and W_v, and its query chunk
    (here the whole block of M <= 64) computing q.k and w.v over M + W - 1 keys, not W."""
    m = anchor_lib.configs(checkouts[2], SMALL)["fixed"].model
    B, T, D, L, V, W = 2, 8, m.d_model, m.n_layers, 256, m.span
    ours = executed_flops(create_model(m, V), "max")
    extra = 2 * (W - 1) * D * D + 2 * T * (T - 1) * D  # per layer and row
    return {"nanoGPT": 6 * B * T * (L * 11 * D * D + V * D) + L * 14 * B * T * T * D,
            "reference fixed": 6 * B * T * (L * 2 * D * D + D * V),
            "reference adaptive": 6 * B * T * (L * 2 * D * D + D * V),
            "attnbench fixed": 6 * B * T * ours + 6 * B * L * extra}


def check_rows(rows: dict, checkouts, suffix: str = "") -> None:
    """Each row's tokens/s and FLOP rate are its counted FLOPs and tokens over its measured
    seconds; the fixed-span systems counted what `analytic_flops` says."""
    for r in rows.values():
        assert r["tok_s"] == pytest.approx(2 * 8 * 1e3 / r["ms_step"])
        assert r["gflop_s"] == pytest.approx(r["gflop_step"] * 1e3 / r["ms_step"])
    for name, flops in analytic_flops(checkouts).items():
        assert rows[name + suffix]["gflop_step"] * 1e9 == pytest.approx(flops, rel=1e-12), name


def check_verdicts(out: dict, capsys) -> None:
    """The text form prints each target with its value and verdict, in the JSON's order."""
    anchor_lib.show(out)
    text = capsys.readouterr().out
    assert "| system" in text and "gflop_step |" in text and "gflop_s |" in text
    assert all(f"| {r['system']} " in text for r in out["rows"])
    lines = [line for line in text.splitlines() if " / " in line or " MFU: " in line][-len(
        out["targets"]):]
    for line, t in zip(lines, out["targets"], strict=True):
        assert line.startswith(f"{t['target']}: ")
        assert line.endswith("(no target)" if t["pass"] is None else "PASS" if t["pass"] else
                             "FAIL")


def test_end_to_end_json(checkouts, monkeypatch, capsys):
    """Every system trains (its weights move), one row each with the FLOPs it counted; the
    ratios and MFU are those of the tokens/s and FLOP rates it reports, MFU against the median
    of the peaks measured once per round (stubbed: 1, 3, 2 GFLOP/s); the table says the same."""
    peaks = [1e9, 3e9, 2e9]
    monkeypatch.setattr(anchor_lib, "matmul_peak", lambda dev, dtype: peaks.pop(0))
    make, built, before = anchor_lib.systems, {}, {}

    def systems(*args):
        built.update(make(*args))
        before.update({k: [p.detach().clone() for p in s.model.parameters()]
                       for k, s in built.items()})
        return built
    monkeypatch.setattr(anchor_lib, "systems", systems)
    assert compare_outside_models.main(
        argv(*checkouts, "--steps", "2", "--rounds", "3", "--json")) == 0
    assert peaks == []  # one peak per round
    out = json.loads(capsys.readouterr().out)  # nothing else on stdout (nanoGPT's print)
    rows = {r["system"]: r for r in out["rows"]}
    assert list(rows) == ["nanoGPT", "reference fixed", "reference adaptive", "attnbench fixed",
                          "attnbench adaptive"]
    for name, system in built.items():
        after = list(system.model.parameters())
        assert any(not torch.equal(a, b) for a, b in zip(before[name], after, strict=True)), name
    assert built["reference adaptive"].spans and not built["reference fixed"].spans
    check_rows(rows, checkouts)
    targets = {t["target"]: t for t in out["targets"]}
    assert len(targets) == len(anchor_lib.COMPARISONS) + 1  # fp32 only, and the MFU
    for ours, anchor, metric, thresholds in anchor_lib.COMPARISONS:
        t = targets[f"{ours} / {anchor} ({anchor_lib.METRICS[metric]})"]
        assert t["value"] == pytest.approx(rows[ours][metric] / rows[anchor][metric])
        assert t["threshold"] == thresholds[""]
        assert t["pass"] == (None if t["threshold"] is None else t["value"] >= t["threshold"])
    fixed = anchor_lib.configs(checkouts[2], SMALL)["fixed"]  # the ramp is adaptive's only
    flops = executed_flops(create_model(fixed.model, 256), "max")
    mfu = targets["attnbench fixed MFU"]["value"]
    assert mfu == pytest.approx(6 * flops * rows["attnbench fixed"]["tok_s"] / 2e9)
    assert out["setting"]["matmul_gflops"] == 2 and out["setting"]["bf16_matmul_gflops"] is None
    assert out["setting"]["steps"] == 2 and out["setting"]["d_model"] == 16
    check_verdicts(out, capsys)


@pytest.mark.parametrize("native", [True, False])
def test_amp_adds_bf16_rows_or_says_why_not(native, checkouts, monkeypatch, capsys):
    """--amp: every system also steps in bf16 autocast, rows of their own in the same rounds,
    with the FLOPs each counted; attnbench's bf16 rows are compared with the anchors' bf16 rows
    (tokens/s, and FLOP rate against nanoGPT), bf16 over fp32 for every system, attnbench
    fixed's MFU against the bf16 matmul peak of the same rounds, each with the issue's targets;
    without native bf16 the command says why and times fp32 only (bf16 may be emulated here on
    tiny shapes)."""
    from bench.training import precision

    monkeypatch.setattr(precision, "bf16_unsupported",
                        lambda dev: None if native else "no bf16 on this test host")
    peaks = {torch.float32: [1e9, 3e9], torch.bfloat16: [4e9, 8e9]}
    monkeypatch.setattr(anchor_lib, "matmul_peak", lambda dev, dtype: peaks[dtype].pop(0))
    assert compare_outside_models.main(argv(*checkouts, "--steps", "1", "--rounds", "2", "--amp",
                             "--json")) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    rows = {r["system"]: r for r in out["rows"]}
    targets = {t["target"]: t for t in out["targets"]}
    if not native:
        assert "--amp: timing fp32 only, because no bf16 on this test host" in captured.err
        assert not any(anchor_lib.BF16 in name for name in [*rows, *targets])
        assert out["setting"]["bf16_matmul_gflops"] is None
        return
    fp32 = ["nanoGPT", "reference fixed", "reference adaptive", "attnbench fixed",
            "attnbench adaptive"]
    assert list(rows) == fp32 + [f"{name} bf16" for name in fp32]
    assert peaks == {torch.float32: [], torch.bfloat16: []}  # each precision's, every round
    check_rows(rows, checkouts, suffix=" bf16")
    fixed_gflop_s = rows["attnbench fixed bf16"]["gflop_s"] / rows["nanoGPT bf16"]["gflop_s"]
    assert targets["attnbench fixed bf16 / nanoGPT bf16 (GFLOP/s)"] == {
        "target": "attnbench fixed bf16 / nanoGPT bf16 (GFLOP/s)",
        "value": pytest.approx(fixed_gflop_s), "threshold": 1.0, "pass": fixed_gflop_s >= 1.0}
    adaptive = targets["attnbench adaptive bf16 / reference adaptive bf16 (tokens/s)"]
    assert adaptive["value"] == pytest.approx(rows["attnbench adaptive bf16"]["tok_s"] /
                                              rows["reference adaptive bf16"]["tok_s"])
    assert adaptive["threshold"] == 2.0
    assert targets["attnbench fixed bf16 / reference fixed bf16 (tokens/s)"]["threshold"] is None
    for name in fp32:
        gain = targets[f"{name} bf16 / fp32 (tokens/s)"]
        assert gain["value"] == pytest.approx(rows[f"{name} bf16"]["tok_s"] / rows[name]["tok_s"])
        assert gain["threshold"] == (1.5 if name.startswith("attnbench") else None)
    fixed = anchor_lib.configs(checkouts[2], SMALL)["fixed"]
    flops = executed_flops(create_model(fixed.model, 256), "max")
    mfu = targets["attnbench fixed bf16 MFU"]
    assert mfu["value"] == pytest.approx(
        6 * flops * rows["attnbench fixed bf16"]["tok_s"] / 6e9)  # the median of 4 and 8 GFLOP/s
    assert mfu["threshold"] == 0.45 and targets["attnbench fixed MFU"]["threshold"] == 0.5
    assert len(targets) == 2 * len(anchor_lib.COMPARISONS) + len(fp32) + 2
    check_verdicts(out, capsys)
