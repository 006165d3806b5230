"""bench.speed: the memory it reports (deterministic, unlike its timings), its cases, bad input."""

import json

import pytest
import torch

from bench import speed as speed_cli
from bench.config import resolve
from bench.measure import throughput as speed
from bench.model import create_model
from bench.model.cost import analytic_flops
from bench.training import precision
from bench.training.memory import saved_bytes
from bench.training.step import maybe_compile

SMALL = {"train": {"batch_size": 2, "device": "cpu"}}  # on the smoke preset's sizes


def act_mem(case: speed.Case) -> int:
    b = speed.Bench(case, case.config(SMALL, "smoke"), torch.device("cpu"), compile_=False)
    return saved_bytes(b.model, b.x, b.cache)


def test_fixed_memory_is_linear_in_span():
    """Banded attention keeps O(S) per query: equal steps in S add equal bytes (nothing S^2)."""
    m = [act_mem(speed.Case("fixed", S, 2)) for S in (64, 128, 192, 256)]
    steps = [b - a for a, b in zip(m, m[1:], strict=False)]
    assert steps[0] > 0
    assert steps == [steps[0]] * 3


@pytest.mark.parametrize("variant", ["adaptive", "dynamic-span"])
def test_trimmed_memory_is_flat_in_span(variant):
    """A learned span of 64 keys costs the same whatever the limit S: the window is trimmed."""
    m = [act_mem(speed.Case(variant, S, 2, learned=48)) for S in (256, 512, 1024)]
    assert m == [m[0]] * 3
    assert m[0] < act_mem(speed.Case("fixed", 256, 2))


def test_cases_compose_and_set_spans():
    cases = speed.cases([256, 1024], [4, 8], ["talking-heads", "adaptive:mixing=both"], 0.1)
    labels = [(c.label, c.span, c.n_heads) for c in cases]
    assert labels[:4] == [("fixed", 256, 4), ("adaptive@26", 256, 4), ("fixed", 1024, 4),
                          ("adaptive@102", 1024, 4)]
    assert ("adaptive:mixing=both@26", 256, 8) in labels
    assert ("talking-heads", 256, 8) in labels and len(labels) == len(set(labels)) == 9
    flat = speed.cases([256, 1024], [4], [], None, keys=64)
    assert [c.label for c in flat] == ["fixed", "adaptive@64"] * 2
    composed = next(c for c in cases if c.attn).config({}, "tiny").model
    assert composed.variant == "adaptive" and composed.attn == {"mixing": "both"}


def test_json_table_ratios(capsys):
    """One real (smoke) run: ratios are against fixed at the same S and heads, FLOPs analytic."""
    argv = ["--preset", "smoke", "--set", "train.batch_size=2", "--set", "train.device=cpu"]
    assert speed_cli.main([*argv, "--spans", "256", "--heads", "2", "--repeats", "1",
                           "--json"]) == 0
    rows = {r["variant"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    fixed, adaptive, th = rows["fixed"], rows["adaptive@26"], rows["talking-heads"]
    assert fixed["train_x"] == fixed["flops_x"] == fixed["mem_x"] == 1
    assert adaptive["window"] == 64 and adaptive["mem_x"] > 1.5
    assert th["train_x"] == pytest.approx(th["train_tok_s"] / fixed["train_tok_s"])
    cfg = resolve({"model": {"variant": "talking-heads", "span": 256}}, "smoke")
    model = create_model(cfg.model, 256)
    assert th["flops_per_tok"] == analytic_flops(model, "max") > fixed["flops_per_tok"]


@pytest.mark.parametrize("native", [True, False])
def test_amp_side_by_side(native, capsys, monkeypatch):
    """--amp times each case in fp32 and in bf16 autocast (amp_x: bf16 over fp32 tokens/s, and
    train_x against fixed in the same precision); without bf16 it says why and times fp32."""
    monkeypatch.setattr(precision, "bf16_unsupported", lambda d: None if native else "no bf16")
    monkeypatch.setattr(speed, "matmul_peak", lambda dev, dtype: 1e9 * (2 if dtype.itemsize < 4
                                                                        else 1))
    argv = ["--preset", "smoke", "--set", "train.batch_size=2", "--set", "train.device=cpu"]
    assert speed_cli.main([*argv, "--spans", "64", "--heads", "2", "--variants", "talking-heads",
                       "--repeats", "1", "--amp", "--json"]) == 0
    out = capsys.readouterr()
    table = json.loads(out.out)
    rows = {(r["variant"], r["precision"]): r for r in table["rows"]}
    if not native:
        assert "--amp: timing fp32 only, because no bf16" in out.err
        assert {p for _, p in rows} == {"fp32"} and "amp_x" not in table["rows"][0]
        assert table["bf16_matmul_gflops"] is None
        return
    assert set(rows) == {(v, p) for v in ("fixed", "adaptive@6", "talking-heads")
                         for p in ("fp32", "bf16-autocast")}
    assert table["bf16_matmul_gflops"] == 2 * table["matmul_gflops"]
    for v in ("fixed", "talking-heads"):
        fp32, amp = rows[v, "fp32"], rows[v, "bf16-autocast"]
        assert fp32["amp_x"] == 1 and amp["amp_x"] == pytest.approx(
            amp["train_tok_s"] / fp32["train_tok_s"])
        assert amp["train_x"] == pytest.approx(
            amp["train_tok_s"] / rows["fixed", "bf16-autocast"]["train_tok_s"])
        assert amp["mfu"] == pytest.approx(fp32["mfu"] * fp32["train_ms"] / amp["train_ms"] / 2)
        assert amp["act_mem_mb"] < fp32["act_mem_mb"]  # measured in the row's precision


@pytest.mark.parametrize("argv, message", [
    (["--variants", "talking-heds"], "unknown name 'talking-heds'"),
    (["--variants", "adaptive:mixng=both"], "model.attn.mixng='both': unknown option"),
    (["--set", "model.nheads=3"], "model.nheads"),
    (["--graphs"], "captures the whole step, optimiser included, which needs "
                   "train.optimizer=adamw"),  # the tiny preset's Adagrad
])
def test_bad_config_exits_2_before_timing(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(speed, "run", lambda *a: pytest.fail("timed before validating"))
    assert speed_cli.main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--spans", "256,x"], "expected comma-separated positive ints"),
    (["--heads", "0"], "expected comma-separated positive ints"),
    (["--span-frac", "1.5"], "expected a fraction of S"),
    (["--repeats", "0"], "--repeats: expected a positive int"),
    (["--spans", "256,1024", "--learned-span", "512"], "expected one int <= every span limit"),
    (["--span-frac", "0.1", "--learned-span", "64"], "not allowed with argument"),
])
def test_bad_arguments_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        speed_cli.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_graphs_name_the_cases_not_captured_and_say_why_off_cuda(capsys, monkeypatch):
    """--graphs times the captured step of every case whose config allows it: a learned span
    that trims is named on stderr with the reason; off CUDA the run says it times eager only."""
    seen, run = {}, speed_cli.run
    monkeypatch.setattr(speed_cli, "run", lambda *a: seen.update(a[-1]) or run(*a))
    sets = ["train.batch_size=2", "train.device=cpu", "train.optimizer=adamw",
            "train.clip_mode=global"]
    argv = ["--preset", "smoke", *[a for s in sets for a in ("--set", s)]]
    assert speed_cli.main([*argv, "--spans", "64", "--heads", "2", "--variants", "fixed",
                           "--repeats", "1", "--graphs"]) == 0
    err = capsys.readouterr().err
    assert "--graphs: adaptive@6 is timed eagerly only" in err and "trim the window" in err
    assert "CUDA graphs need a CUDA device, not cpu; timing eager only" in err
    assert [c.label for c in seen] == ["fixed"]
    assert all(c.train.compile == "graphs" for c in seen.values())


def test_compile_falls_back_with_the_reason(capsys, monkeypatch):
    """Where torch.compile fails (no compiler, unsupported backend), both the benchmark and the
    trainer go on eagerly and say why."""
    def broken(*args, **kwargs):
        raise RuntimeError("backend 'inductor' needs a C++ compiler")

    monkeypatch.setattr(torch, "compile", broken)
    b = speed.Bench(speed.Case("fixed", 64, 2), speed.Case("fixed", 64, 2).config(SMALL, "smoke"),
                    torch.device("cpu"), compile_=True)
    assert b.compiled is None
    assert "RuntimeError: backend 'inductor' needs a C++ compiler" in capsys.readouterr().err
    x = torch.zeros(2, 32, dtype=torch.long)
    assert maybe_compile(b.model, True, x) is b.model
    assert "running eagerly" in capsys.readouterr().err
