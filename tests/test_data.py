import hashlib
import math
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench import data
from bench.config import ConfigError, resolve
from bench.data import DataError, text

SHARED = Path(__file__).parents[1].parent / "shared" / "data"


def shared_file(name: str) -> Path:
    if not (SHARED / name).is_file():
        pytest.skip(reason=f"../shared/data absent: no {SHARED / name}")
    return SHARED / name


def readme_sha256(name: str) -> str:
    return re.search(
        rf"`{re.escape(name)}`.*\|\s*([0-9a-f]{{64}})\s*\|", (SHARED / "README.md").read_text()
    )[1]


def uniform_bpc(split: np.ndarray, vocab_size: int, batch_size: int, block: int) -> float:
    """bpc of equal logits over the vocab, summed over eval_batches like the real evaluation."""
    nats, count = 0.0, 0
    for x, y, _ in data.eval_batches(split, batch_size, block):
        logits = torch.zeros(*x.shape, vocab_size)
        nats += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        count += int((y != -100).sum())
    assert count == len(split) - 1
    return nats / count / math.log(2)


@pytest.mark.parametrize("name", ["enwik8", "text8", "synthetic"])
def test_uniform_predictor_scores_log2_vocab(name):
    if name == "synthetic":
        corpus = data.build("synthetic", n_chars=200_000)
    else:
        corpus = data.build(name, path=str(shared_file(f"{name}.head")))
    bpc = uniform_bpc(corpus.dev, corpus.vocab_size, batch_size=7, block=100)
    assert bpc == pytest.approx(math.log2(corpus.vocab_size), rel=1e-6)


@pytest.mark.parametrize("batch_size,block,context", [
    (1, 7, 0), (3, 10, 0), (4, 1000, 0), (8, 5, 0), (150, 3, 0),
    (1, 7, 20), (3, 10, 12), (8, 5, 9), (4, 16, 60), (150, 3, 4), (3, 10, 500)])
def test_eval_batches_cover_every_target_once(batch_size, block, context):
    """Every target once; each scored target follows its `context` preceding characters (or all
    of the text before it) in its own stream; streams are consecutive text, padding last."""
    n = 101
    positions = np.arange(n)  # token value = its position
    xs, ys, ats = zip(*data.eval_batches(positions, batch_size, block, context), strict=True)
    for x, at in zip(xs, ats, strict=True):  # the text position of each stream's first input
        inside = at < len(positions)
        assert torch.equal(x[inside, 0], at[inside])
    assert all(x.shape == y.shape == (batch_size, block) for x, y in zip(xs, ys, strict=True))
    x, y = torch.cat(xs, 1).numpy(), torch.cat(ys, 1).numpy()
    valid = y != -100
    np.testing.assert_array_equal(np.sort(y[valid]), np.arange(1, n))
    np.testing.assert_array_equal(x[valid], y[valid] - 1)
    for row_x, row, keep in zip(x, y, valid, strict=True):
        if not keep.any():
            continue
        first, last = keep.argmax(), len(keep) - keep[::-1].argmax()
        assert keep[first:last].all()  # one scored run, then padding
        assert (np.diff(row[keep]) == 1).all()
        seen = row[first] - 1 - row_x[0]  # characters read before the first scored one
        assert row_x[0] == 0 or seen == context  # the text's start, or exactly the context
        assert (np.diff(row_x[: last]) == 1).all()  # inputs: consecutive text


def test_train_batches_rows_are_consecutive_and_wrap():
    positions = np.arange(1000)
    batches = data.train_batches(positions, batch_size=3, block=7)
    rows = 1000 // 3
    prev_y = None
    for step in range(2 * (rows // 7) + 1):
        pos, x, y, at = next(batches)
        assert torch.equal(at, x[:, 0])  # the text position of each row's first input
        assert x.dtype == y.dtype == torch.int64 and x.shape == (3, 7)
        assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y, x + 1)
        assert torch.equal(x[:, 0], torch.arange(3) * rows + pos)
        if step and pos:
            assert torch.equal(x[:, 0], prev_y[:, -1])
        assert pos == 7 * (step % ((rows - 1) // 7))  # wraps to 0 when a row is exhausted
        prev_y = y
    pos, x, _, _ = next(data.train_batches(positions, 3, 7, start=14))
    assert pos == 14 and torch.equal(x[:, 0], torch.arange(3) * rows + 14)


def test_enwik8_prefix():
    path = shared_file("enwik8.head")
    corpus = data.build("enwik8", path=str(path))
    assert corpus.meta["sha256"] == readme_sha256("enwik8.head")
    assert corpus.meta["prefix"] is True and corpus.vocab_size == 256
    assert corpus.meta["split_sizes"] == {"train": 3_285_000, "dev": 182_500, "test": 182_500}
    assert isinstance(corpus.train, np.memmap)
    joined = np.concatenate([corpus.train, corpus.dev, corpus.test])
    np.testing.assert_array_equal(joined, np.fromfile(path, dtype=np.uint8))


def test_text8_prefix_maps_to_27_symbols():
    path = shared_file("text8.head")
    corpus = data.build("text8", path=str(path))
    assert corpus.meta["sha256"] == readme_sha256("text8.head")
    assert corpus.meta["prefix"] is True and corpus.vocab_size == 27
    symbols = corpus.meta["symbols"]
    assert symbols == " abcdefghijklmnopqrstuvwxyz"
    ids = np.concatenate([corpus.train, corpus.dev, corpus.test])
    assert len(ids) == 2_600_000 and ids.max() == 26
    assert "".join(symbols[i] for i in ids[:10_000]) == path.read_bytes()[:10_000].decode()


def test_full_size_file_gets_standard_split(tmp_path):
    full = tmp_path / "enwik8"
    with open(full, "wb") as f:
        f.truncate(text.FULL_BYTES)  # sparse: cheap
    corpus = data.build("enwik8", path=str(full))
    assert [len(corpus.train), len(corpus.dev), len(corpus.test)] == [
        90_000_000,
        5_000_000,
        5_000_000,
    ]
    assert corpus.meta["prefix"] is False
    with pytest.raises(DataError, match="standard 90M/5M/5M"):
        data.build("enwik8", path=str(full), fractions=(0.8, 0.1, 0.1))


def test_text8_rejects_bytes_outside_its_alphabet(tmp_path):
    bad = tmp_path / "text8"
    bad.write_bytes(b"hello world and Hello again" + b" and again" * 10)
    with pytest.raises(DataError, match=rf"{re.escape(str(bad))}.*'H'.*offset 16"):
        data.build("text8", path=str(bad))


@pytest.fixture
def hosted_zip(tmp_path, monkeypatch):
    """A small enwik8.zip served from a file:// URL, with the module's constants pinned to it."""
    payload = np.random.default_rng(0).integers(0, 256, 50_000, dtype=np.uint8).tobytes()
    archive = tmp_path / "enwik8.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("enwik8", payload)

    def pin(blob: bytes) -> None:
        archive.write_bytes(blob)
        source = text.Source(archive.as_uri(), len(blob), hashlib.sha256(blob).hexdigest())
        monkeypatch.setitem(text.SOURCES, "enwik8", source)

    pin(archive.read_bytes())
    return archive, payload, pin


def test_download_verifies_and_extracts(tmp_path, hosted_zip):
    archive, payload, _ = hosted_zip
    cache = tmp_path / "cache"
    corpus = data.build("enwik8", data_dir=str(cache), url=archive.as_uri())
    assert os.listdir(cache) == ["enwik8"] and (cache / "enwik8").read_bytes() == payload
    assert corpus.meta["sha256"] == hashlib.sha256(payload).hexdigest()
    assert corpus.meta["prefix"] is True
    again = data.build("enwik8", data_dir=str(cache), download=False)
    np.testing.assert_array_equal(again.test, corpus.test)


@pytest.mark.parametrize("fault", ["checksum", "truncated download", "truncated zip", "no url"])
def test_failed_download_leaves_nothing(tmp_path, hosted_zip, monkeypatch, fault):
    archive, _, pin = hosted_zip
    blob, url = archive.read_bytes(), archive.as_uri()
    if fault == "checksum":
        monkeypatch.setitem(text.SOURCES, "enwik8", text.Source(url, len(blob), "0" * 64))
        expected = f"expected {len(blob):,} bytes with sha256 {'0' * 64}"
    elif fault == "truncated download":
        archive.write_bytes(blob[: len(blob) // 2])
        expected = f"gave {len(blob) // 2:,} bytes"
    elif fault == "truncated zip":  # checksum pinned to the bad zip: extraction must catch it
        pin(blob[: len(blob) // 2])
        expected = "could not extract 'enwik8'"
    else:
        url = (tmp_path / "missing.zip").as_uri()
        expected = "could not download"  # and, offline, what to do instead:
        expected_fix = "set data.path to a local copy (--set data.path=FILE), such as the shipped"
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match=re.escape(expected)) as error:
        data.build("enwik8", data_dir=str(cache), url=url)
    assert url in str(error.value)
    if fault == "no url":
        assert expected_fix in str(error.value) and "../shared/data/enwik8.head" in str(error.value)
    assert os.listdir(cache) == []


def test_data_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("ATTNBENCH_DATA", raising=False)
    assert text.data_dir().name == "attnbench"
    monkeypatch.setenv("ATTNBENCH_DATA", str(tmp_path / "env"))
    assert text.data_dir() == tmp_path / "env"
    assert text.data_dir(str(tmp_path / "explicit")) == tmp_path / "explicit"


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        ({"name": "enwik9"}, "enwik9.*enwik8, file, synthetic, text8"),
        ({"name": "file", "path": "{tmp}/nope.txt"}, "file not found: {tmp}/nope.txt"),
        ({"name": "text8", "path": "{tmp}/nope"}, "text8: file not found"),
        (
            {"name": "enwik8", "data_dir": "{tmp}", "download": False},
            "enwik8: no cached copy at {tmp}/enwik8.*path=",
        ),
        ({"name": "file", "path": "{tmp}/tiny", "fractions": (0.9, 0.05, 0.1)}, "fractions="),
        ({"name": "file", "path": "{tmp}/tiny", "fractions": (1.1, -0.05, -0.05)}, "fractions="),
        ({"name": "file", "path": "{tmp}/tiny"}, "{tmp}/tiny.*dev split 0 tokens"),
        ({"name": "synthetic", "n_chars": 20}, "synthetic \\(n_chars=20\\).*dev split 1 tokens"),
        ({"name": "synthetic", "p_copy": 1.5}, "bad p_copy=1.5"),
    ],
)
def test_bad_input_raises_data_error_naming_it(tmp_path, kwargs, expected):
    (tmp_path / "tiny").write_bytes(b"0123456789")
    kwargs = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in kwargs.items()}
    with pytest.raises(DataError, match=expected.format(tmp=re.escape(str(tmp_path)))):
        data.build(**kwargs)


@pytest.mark.parametrize("given,expected", [
    ({"name": "file"}, "data.path: required; an option of dataset 'file'"),
    ({"name": "synthetic", "copy_length": 3},
     "data.copy_length=3: unknown option of dataset 'synthetic'; allowed: n_chars"),
    ({"name": "text8", "n_chars": 10}, "data.n_chars=10: unknown option of dataset 'text8'"),
])
def test_a_configs_data_options_are_checked_by_the_schema(given, expected):
    """A corpus's options from a config are typed and checked once, by the schema, in the
    options' one format (the registry builds from the instance it made)."""
    with pytest.raises(ConfigError, match=re.escape(expected)):
        resolve({"data": given})


@pytest.mark.parametrize("given", [
    {"name": "synthetic", "n_chars": 20_000},
    {"name": "synthetic", "n_chars": 20_000, "p_copy": 0, "recall": {"rate": 0.1, "keys": 8}},
    {"name": "synthetic", "n_chars": 20_000, "distances": [16, 32, 48]},
    {"name": "enwik8", "path": "enwik8.head"}, {"name": "text8", "path": "text8.head"}])
def test_a_corpus_says_its_vocabulary_without_being_built(given):
    """The vocabulary a data section's corpus registers in closed form (what the findings
    bound bits by: log2 of it) is the one the built corpus has, probes and copies included."""
    from bench.config import DataConfig

    if given["name"] != "synthetic":
        given = {**given, "path": str(shared_file(given["path"]))}
    config = DataConfig(**given)
    built = data.fitted(config.name, config.typed, span=256, block=32, batch_size=4)
    assert config.vocab_size == built.vocab_size
