"""Corpora and batching for character-level language modelling.

Every corpus is three 1-D uint8 arrays of token ids (train / dev / test) plus a JSON-able
`meta`. enwik8 and text8 are the Hutter-prize files (100,000,000 bytes, split 90M / 5M / 5M);
a shorter local file is a prefix, split by `fractions` and flagged `meta["prefix"]`, and any
number measured on it must say so. `file` is any local byte file; `synthetic` is a seeded
generator whose entropy rate (the best achievable bpc) is known in closed form.
"""

import hashlib
import http.client
import math
import os
import shutil
import tempfile
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import platformdirs
import torch
from tqdm import tqdm

DATASETS = ("enwik8", "text8", "file", "synthetic")
SPLITS = ("train", "dev", "test")
FULL_BYTES = 100_000_000
STANDARD_FRACTIONS = (0.9, 0.05, 0.05)
TEXT8_SYMBOLS = " abcdefghijklmnopqrstuvwxyz"


class DataError(ValueError):
    """A user error: names the dataset/file/key, what was wrong and what is expected."""


@dataclass
class Corpus:
    """A dataset's three splits of token ids, its vocabulary size and JSON-able provenance."""

    name: str
    vocab_size: int
    train: np.ndarray  # (N_train,) uint8 ids; np.memmap for byte files on disk
    dev: np.ndarray
    test: np.ndarray
    meta: dict


@dataclass(frozen=True)
class Source:
    url: str
    size: int  # bytes of the zip
    sha256: str  # of the zip


# Published zips, not re-downloaded here (no network where this was written):
# - enwik8.zip: 36,445,475 bytes and this SHA-256 are pinned in huggingface/datasets
#   (datasets/enwik8/dataset_infos.json, download_checksums) and, identically, by several
#   independent public loaders and benchmark scripts.
# - text8.zip: 31,344,016 bytes is the size TensorFlow's word2vec tutorial checks
#   (maybe_download('text8.zip', 31344016)); the SHA-256 is pinned identically by several
#   independent public loaders, one of them together with that size.
# Extraction also checks the member's CRC-32 (zipfile does it on read).
SOURCES = {
    "enwik8": Source(
        "http://mattmahoney.net/dc/enwik8.zip",
        36_445_475,
        "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc",
    ),
    "text8": Source(
        "http://mattmahoney.net/dc/text8.zip",
        31_344_016,
        "a6640522afe85d1963ad56c05b0ede0a0c000dddc9671758a6cc09b7a38e5232",
    ),
}


def data_dir(explicit: str | None = None) -> Path:
    """Where downloads are cached: `explicit`, else $ATTNBENCH_DATA, else the user cache dir."""
    env = os.environ.get("ATTNBENCH_DATA")
    return Path(explicit or env or platformdirs.user_cache_path("attnbench")).expanduser()


def load(
    name: str,
    *,
    path: str | None = None,
    fractions: tuple[float, float, float] = STANDARD_FRACTIONS,
    data_dir: str | None = None,
    download: bool = True,
    url: str | None = None,
    **synthetic_options,
) -> Corpus:
    """Load dataset `name` ("enwik8", "text8", "file" or "synthetic") split into train/dev/test.

    enwik8/text8 come from `path` if given, else from the cache in `data_dir(data_dir)`,
    downloaded (from `url`, default the Hutter-prize zip) and verified when absent.
    `synthetic_options` are `n_chars` (total over the three splits) and the fields of
    `Synthetic`.
    """
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
    _check_fractions(fractions)
    if name == "synthetic":
        if path is not None or url is not None:
            raise DataError("synthetic: is generated, path= and url= do not apply")
        from .synthetic import synthetic_corpus  # it builds on this module's Corpus

        return synthetic_corpus(fractions, **synthetic_options)
    if synthetic_options:
        raise DataError(
            f"{name}: unexpected options {sorted(synthetic_options)} "
            "(they only apply to 'synthetic')"
        )
    if name == "file":
        if path is None:
            raise DataError("file: path= is required (any local text or byte file)")
        return _from_file(name, _existing(name, path), fractions)
    file = _existing(name, path) if path is not None else _cached(name, data_dir, download, url)
    return _from_file(name, file, fractions)


def _check_fractions(fractions: tuple[float, float, float]) -> None:
    if len(fractions) != 3 or min(fractions) <= 0 or not math.isclose(sum(fractions), 1):
        raise DataError(
            f"fractions={tuple(fractions)}: expected three positive numbers "
            "(train, dev, test) that sum to 1"
        )


def split_sizes(what: str, n: int, fractions: tuple[float, float, float]) -> list[int]:
    n_train, n_dev = round(n * fractions[0]), round(n * fractions[1])
    sizes = [n_train, n_dev, n - n_train - n_dev]
    for split, size in zip(SPLITS, sizes, strict=True):
        if size < 2:
            raise DataError(
                f"{what}: {n} tokens with fractions={tuple(fractions)} leave the "
                f"{split} split {size} tokens; each split needs at least 2"
            )
    return sizes


def _existing(name: str, path: str) -> Path:
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise DataError(f"{name}: file not found: {file}")
    return file


def _from_file(name: str, file: Path, fractions: tuple[float, float, float]) -> Corpus:
    """Memory-map a byte file (text8: map to 27 ids in memory) and cut it into splits."""
    stat = file.stat()
    n = stat.st_size
    if name in SOURCES and n > FULL_BYTES:
        raise DataError(f"{name}: {file} has {n:,} bytes, more than the {FULL_BYTES:,} of {name}")
    if name in SOURCES and n == FULL_BYTES and tuple(fractions) != STANDARD_FRACTIONS:
        raise DataError(
            f"{name}: the full file uses the standard 90M/5M/5M split, got "
            f"fractions={tuple(fractions)}; use name='file' for another split"
        )
    sizes = split_sizes(f"{name} ({file})", n, fractions)
    if name == "text8":
        tokens = _text8_ids(str(file), n, stat.st_mtime_ns)
    else:
        tokens = np.memmap(file, dtype=np.uint8, mode="r")
    a, b = sizes[0], sizes[0] + sizes[1]
    with open(file, "rb") as f:
        sha256 = hashlib.file_digest(f, "sha256").hexdigest()
    meta = {
        "name": name,
        "source": str(file),
        "n_bytes": n,
        "sha256": sha256,
        "prefix": name in SOURCES and n < FULL_BYTES,
        "split_sizes": dict(zip(SPLITS, sizes, strict=True)),
        "fractions": list(fractions),
    }
    if name == "text8":
        meta["symbols"] = TEXT8_SYMBOLS
    vocab_size = len(TEXT8_SYMBOLS) if name == "text8" else 256
    return Corpus(name, vocab_size, tokens[:a], tokens[a:b], tokens[b:], meta)


@lru_cache(maxsize=2)
def _text8_ids(path: str, size: int, mtime_ns: int) -> np.ndarray:
    """text8 bytes -> ids (' ' 0, a-z 1..26) through a 256-entry table; cached per process."""
    table = np.full(256, 255, dtype=np.uint8)
    table[np.frombuffer(TEXT8_SYMBOLS.encode(), dtype=np.uint8)] = np.arange(27)
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    ids = table[raw]
    bad = np.flatnonzero(ids == 255)
    if bad.size:
        raise DataError(
            f"text8: {path} has byte {bytes(raw[bad[0] : bad[0] + 1])!r} at offset "
            f"{bad[0]} ({bad.size} such bytes); text8 holds only ' ' and a-z"
        )
    ids.flags.writeable = False
    return ids


def _cached(name: str, root: str | None, download: bool, url: str | None) -> Path:
    """The extracted file in the data dir, downloading it first when absent and allowed."""
    file = data_dir(root) / name
    url = url or SOURCES[name].url
    if file.is_file():
        return file
    if not download:
        raise DataError(
            f"{name}: no cached copy at {file} (data dir: data_dir=, else "
            f"$ATTNBENCH_DATA, else the user cache dir); call load({name!r}) with "
            f"download=True to fetch {url}, or pass path= to a local copy"
        )
    _download(name, url, file)
    return file


def _download(name: str, url: str, dest: Path) -> None:
    """Fetch the zip next to `dest`, check size and SHA-256, extract `name`, then os.replace.

    Temporary files live in dest's directory (same filesystem, so the replace is atomic) and
    are removed whatever happens.
    """
    src = SOURCES[name]
    dest.parent.mkdir(parents=True, exist_ok=True)
    temps = []
    try:
        with tempfile.NamedTemporaryFile(
            dir=dest.parent, prefix=f".{name}.", suffix=".zip", delete=False
        ) as f:
            temps.append(f.name)
            size, sha256 = _fetch(name, url, f)
        if (size, sha256) != (src.size, src.sha256):
            raise DataError(
                f"{name}: {url} gave {size:,} bytes with sha256 {sha256}; expected "
                f"{src.size:,} bytes with sha256 {src.sha256} (truncated or "
                "corrupt download; nothing was kept)"
            )
        with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{name}.", delete=False) as f:
            temps.append(f.name)
            _extract(name, url, temps[0], f)
        os.replace(temps[1], dest)
    finally:
        for temp in temps:
            Path(temp).unlink(missing_ok=True)


def _fetch(name: str, url: str, out) -> tuple[int, str]:
    """Stream `url` into the open file `out`; return (bytes, sha256 hex)."""
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=name, disable=None) as bar:
                while chunk := response.read(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
                    bar.update(len(chunk))
    except (OSError, ValueError, http.client.HTTPException) as e:
        raise DataError(f"{name}: could not download {url}: {e}") from e
    return out.tell(), digest.hexdigest()


def _extract(name: str, url: str, zip_path: str, out) -> None:
    try:
        with zipfile.ZipFile(zip_path) as archive, archive.open(name) as member:
            shutil.copyfileobj(member, out, 1 << 20)
    except (zipfile.BadZipFile, KeyError, EOFError, OSError) as e:
        raise DataError(f"{name}: could not extract {name!r} from the zip from {url}: {e!r}") from e


# --- batching --------------------------------------------------------------------------------


def _tensor(a: np.ndarray, device: str | torch.device) -> torch.Tensor:
    return torch.from_numpy(a.astype(np.int64)).to(device)


def train_batches(
    data: np.ndarray,
    batch_size: int,
    block: int,
    start: int = 0,
    device: str | torch.device = "cpu",
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """Endless (pos, x, y) over `batch_size` parallel streams, each a contiguous row of data.

    x = rows[:, pos:pos+block], y = rows[:, pos+1:pos+block+1], both (B, block) int64, so
    consecutive yields continue each row (the cache carries over). When a row runs out the
    position wraps to 0, and a yielded pos of 0 tells the caller to reset its cache. `start`
    resumes at a position.
    """
    if batch_size < 1 or block < 1 or start < 0 or len(data) // batch_size < block + 1:
        raise DataError(
            f"train_batches: {len(data)} tokens in batch_size={batch_size} rows need at least "
            f"block + 1 = {block + 1} per row (and start={start} must be >= 0)"
        )
    n = len(data) // batch_size
    rows = data[: batch_size * n].reshape(batch_size, n)
    pos = start
    while True:
        if pos + block + 1 > n:
            pos = 0
        yield (
            pos,
            _tensor(rows[:, pos : pos + block], device),
            _tensor(rows[:, pos + 1 : pos + block + 1], device),
        )
        pos += block


def eval_batches(
    data: np.ndarray,
    batch_size: int,
    block: int,
    context: int = 0,
    device: str | torch.device = "cpu",
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(x, y) blocks, (B, block) int64, whose targets y != -100 are each of data[1:] once.

    The targets are cut into `batch_size` contiguous streams of m = ceil((N - 1 - c) / B)
    (c = min(context, N - 1)); stream b reads data[b*m : b*m + c + m + 1]: its first c inputs
    are the text before its first target, read without scoring it (y = -100), so that with
    `context` at least the model's reach every scored character sees the preceding text it
    would see in one stream, and the bpc does not depend on the batch size (SPEC section 1).
    Stream 0 starts at the text's start and scores from its first target (its c extra targets
    are its own). Streams are padded at their end to whole blocks, with y = -100 and x some valid
    token. Consecutive yields continue each stream, so the caller carries its cache across them.
    """
    n = len(data)
    if batch_size < 1 or block < 1 or context < 0 or n < 2:
        raise DataError(
            f"eval_batches: need batch_size, block >= 1, context >= 0 and 2 tokens, got "
            f"batch_size={batch_size}, block={block}, context={context}, {n} tokens"
        )
    c = min(context, n - 1)
    m = max(1, -(-(n - 1 - c) // batch_size))
    length = c + m  # inputs each stream reads
    first = np.arange(batch_size)[:, None] * m
    for pos in range(0, length, block):
        offset = pos + np.arange(block + 1)
        index = first + offset
        tokens = data[np.minimum(index, n - 1)]
        y = tokens[:, 1:].astype(np.int64)
        target = offset[1:] - 1  # the target's offset in its stream, 0-based
        scored = (target < length) & ((target >= c) | (first == 0)) & (index[:, 1:] <= n - 1)
        y[~scored] = -100
        yield _tensor(tokens[:, :-1], device), torch.from_numpy(y).to(device)
