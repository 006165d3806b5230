"""bench.compare_xtransformers: bad input exits 2 naming the flag, and a missing x-transformers
exits 2 saying how to install it, before anything is built (neither needs x-transformers); with
x-transformers installed (an optional extra: skipped without it), the weight copy makes the two
layers compute the same function, which the check tells apart from a missing or misplaced copy, the
extra pieces timed on their own are exactly ours' work beyond x-transformers' (FLOPs), the command
refuses to time layers that disagree, and it runs end to end at a tiny size."""

import json
import sys

import pytest
import torch

from bench import compare_xtransformers
from bench.measure import xtransformers as lib

TINY = ["--batch", "1", "--tokens", "8", "--dim", "16", "--heads", "2", "--repeats", "1"]


@pytest.fixture
def threads():
    """main sets torch's threads; the other tests keep theirs."""
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.fixture
def no_xformers(monkeypatch):
    monkeypatch.setitem(sys.modules, "x_transformers", None)  # import raises ImportError


@pytest.mark.parametrize(("args", "message"), [
    (["--batch", "0"], "--batch: '0': expected a positive int"),
    (["--tokens", "x"], "--tokens: 'x': expected a positive int"),
    (["--repeats", "-1"], "--repeats: '-1': expected a positive int"),
    (["--dim", "30", "--heads", "4"], "--dim 30 is not a multiple of --heads 4"),
    (["--dtype", "fp16"], "--dtype: invalid choice: 'fp16'"),
])
def test_bad_input_exits_2(args, message, no_xformers, capsys):
    with pytest.raises(SystemExit) as exit_:
        compare_xtransformers.main(args)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_xformers_exits_2(no_xformers, capsys):
    assert compare_xtransformers.main(TINY) == 2
    assert "pip install -e '.[anchors]'" in capsys.readouterr().err


@pytest.fixture
def xt():
    return pytest.importorskip("x_transformers")


def pair(xt, tokens: int = 80, dim: int = 32, heads: int = 4):
    """Ours (two query chunks at 80 tokens: 64 and 16) and x-transformers', weights copied."""
    a, b = lib.ours(dim, heads, tokens), lib.theirs(xt, dim, heads)
    lib.copy_weights(a, b)
    return a, b, torch.randn(2, tokens, dim)


def test_copied_weights_agree(xt):
    a, b, x = pair(xt)
    agree = lib.agreement(a, b, x)
    assert max(agree.values()) < 1e-5, agree
    assert a(x).abs().max() > 0.1  # not agreeing on nothing


def transpose_maps(b):
    for conv in (b.attend.pre_softmax_talking_heads, b.attend.post_softmax_talking_heads):
        conv.weight.data = conv.weight.data.transpose(0, 1).contiguous()


def no_residual(b, a):
    b.attend.pre_softmax_talking_heads.weight.data[..., 0, 0] = a.mixing.matrices()["P_l"].T


@pytest.mark.parametrize("spoil", ["no copy", "maps transposed", "P_l without the residual",
                                   "position table"])
def test_the_check_fails_without_the_copy(xt, spoil):
    a, b, x = pair(xt)
    if spoil == "no copy":
        b = lib.theirs(xt, 32, 4)
    elif spoil == "maps transposed":
        transpose_maps(b)
    elif spoil == "P_l without the residual":
        no_residual(b, a)
    else:
        with torch.no_grad():
            a.key_pe.normal_()
    assert lib.agreement(a, b, x)["output"] > 1e-3


@pytest.mark.parametrize("tokens", [16, 80, 130])  # one chunk, a short last one, three
def test_the_extra_work_is_all_of_ours_beyond_theirs(xt, tokens):
    """Counted by FlopCounterMode, ours' forward+backward is x-transformers' plus the extra
    pieces, exactly: the pieces leave out none of ours' extra matmuls and count none twice."""
    a, b, x = pair(xt, tokens)
    extra = lib.extra_work(a, x, False)
    assert set(extra) == set(lib.EXTRA)
    ours, theirs = (lib.layer_work(layer, x, False).flops() for layer in (a, b))
    assert all(w.flops() > 0 for w in extra.values())
    assert ours == theirs + sum(w.flops() for w in extra.values())


def test_disagreeing_layers_are_not_timed(xt, threads, monkeypatch, capsys):
    monkeypatch.setattr(lib, "copy_weights", lambda a, b: None)
    monkeypatch.setattr(lib, "run", lambda *a: pytest.fail("timed layers that disagree"))
    assert compare_xtransformers.main(TINY) == 1
    assert "the layers disagree" in capsys.readouterr().err


def test_end_to_end_json(xt, threads, capsys):
    assert compare_xtransformers.main([*TINY, "--threads", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["system"]: r for r in out["rows"]}
    assert list(rows) == [lib.XT, lib.OURS, *lib.EXTRA, lib.MINUS]
    assert all(r["ms"] > 0 for name, r in rows.items() if name != lib.MINUS)
    assert rows[lib.OURS]["vs_xt"] == pytest.approx(rows[lib.XT]["ms"] / rows[lib.OURS]["ms"])
    assert rows[lib.MINUS]["ms"] < rows[lib.OURS]["ms"]
    assert rows[lib.MINUS]["gflop"] == pytest.approx(rows[lib.XT]["gflop"])
    assert rows[lib.OURS]["gflop"] > rows[lib.XT]["gflop"]
    assert max(out["agreement"].values()) < lib.TOLERANCE
    assert out["setting"]["threads"] == 1
    assert [t["threshold"] for t in out["targets"]] == [1.0, None]
