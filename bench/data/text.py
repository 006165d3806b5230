"""Real text: enwik8 and text8 (the Hutter-prize files, 100,000,000 bytes, split 90M / 5M / 5M)
and any local byte file.

enwik8 and text8 come from `path` if given, else from the cache in `data_dir` (else
$ATTNBENCH_DATA, else the user cache dir), downloaded (from `url`, default the Hutter-prize zip)
and verified when absent. A shorter local file is a prefix, split by `fractions` and flagged
`meta["prefix"]`: any number measured on it must say so.
"""

import hashlib
import http.client
import os
import shutil
import tempfile
import urllib.request
import zipfile
from dataclasses import MISSING, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import platformdirs
from tqdm import tqdm

from bench.declare import option

from .corpus import SPLITS, STANDARD_FRACTIONS, Corpus, DataError, split_sizes
from .registry import register

FULL_BYTES = 100_000_000
TEXT8_SYMBOLS = " abcdefghijklmnopqrstuvwxyz"
Fractions = tuple[float, float, float]


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


def data_dir(explicit: Path | str | None = None) -> Path:
    """Where downloads are cached: `explicit`, else $ATTNBENCH_DATA, else the user cache dir."""
    env = os.environ.get("ATTNBENCH_DATA")
    return Path(explicit or env or platformdirs.user_cache_path("attnbench")).expanduser()


@dataclass(frozen=True)
class FileOptions:
    """A local file's options (data.<option>)."""

    path: Path = option(MISSING, "the file: text or bytes, one symbol per byte")
    fractions: Fractions = option(STANDARD_FRACTIONS, "train, dev and test fractions of the file")


@dataclass(frozen=True)
class HutterOptions:
    """enwik8's and text8's options (data.<option>): the file at `path`, else the cached
    download."""

    path: Path | None = option(None, "a local copy or prefix of the file (default: the cached "
                               "download)")
    fractions: Fractions = option(STANDARD_FRACTIONS, "train, dev and test fractions (the "
                                  "papers': 90M, 5M, 5M)")
    data_dir: Path | None = option(None, "the download cache (default: $ATTNBENCH_DATA, else "
                                   "the user cache directory)")
    download: bool = option(True, "download and verify the file when it is not cached")
    url: str | None = option(None, "where to download the zip from (default: the Hutter-prize "
                             "address)")


def enwik8(o: HutterOptions) -> Corpus:
    """The Hutter-prize enwik8 file (bytes, vocab 256), or a prefix of it at `path`."""
    return _hutter("enwik8", o)


register("enwik8", HutterOptions, enwik8, vocab=lambda o: 256)


def text8(o: HutterOptions) -> Corpus:
    """text8 (27 symbols: space and a-z, mapped to ids 0..26), or a prefix of it at `path`."""
    return _hutter("text8", o)


register("text8", HutterOptions, text8, vocab=lambda o: len(TEXT8_SYMBOLS))


def local_file(o: FileOptions) -> Corpus:
    """Any local text or byte file, split by `fractions`."""
    return _from_file("file", _existing("file", o.path), o.fractions)


register("file", FileOptions, local_file, vocab=lambda o: 256)


def _hutter(name: str, o: HutterOptions) -> Corpus:
    file = _existing(name, o.path) if o.path is not None else _cached(
        name, o.data_dir, o.download, o.url)
    return _from_file(name, file, o.fractions)


def _existing(name: str, path: Path | str) -> Path:
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise DataError(f"{name}: file not found: {file}")
    return file


def _from_file(name: str, file: Path, fractions: Fractions) -> Corpus:
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


SHIPPED = "../shared/data/{name}.head (relative to the repository's root)"  # tests and CI's


def _cached(name: str, root: Path | None, download: bool, url: str | None) -> Path:
    """The extracted file in the data dir, downloading it first when absent and allowed."""
    file = data_dir(root) / name
    url = url or SOURCES[name].url
    if file.is_file():
        return file
    if not download:
        raise DataError(
            f"{name}: no cached copy at {file} (data dir: data_dir=, else "
            f"$ATTNBENCH_DATA, else the user cache dir); set "
            f"download=true to fetch {url}, or path= to a local copy"
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
        raise DataError(f"{name}: could not download {url}: {e}; offline, set data.path to a "
                        f"local copy (--set data.path=FILE), such as the shipped prefix "
                        f"{SHIPPED.format(name=name)}") from e
    return out.tell(), digest.hexdigest()


def _extract(name: str, url: str, zip_path: str, out) -> None:
    try:
        with zipfile.ZipFile(zip_path) as archive, archive.open(name) as member:
            shutil.copyfileobj(member, out, 1 << 20)
    except (zipfile.BadZipFile, KeyError, EOFError, OSError) as e:
        raise DataError(f"{name}: could not extract {name!r} from the zip from {url}: {e!r}") from e


