"""A corpus: three splits of token ids and what it knows about itself (identity, floors)."""

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

SPLITS = ("train", "dev", "test")
STANDARD_FRACTIONS = (0.9, 0.05, 0.05)


class DataError(ValueError):
    """A user error: names the dataset/file/key, what was wrong and what is expected."""


@dataclass
class Corpus:
    """A dataset's three splits of token ids (1-D integer arrays; np.memmap for byte files on
    disk), its vocabulary size and its JSON-able provenance `meta` (name, source, sha256,
    n_bytes, prefix, split_sizes, fractions, options, symbols where the ids are not bytes).

    A corpus describes itself (`describe`) the way a layer does, so tracking and reports ask it
    rather than know its kind. Real text knows no floor; a generated corpus overrides
    `floor_bpc`, `targets`, `target_floors`, `no_recall_floors`, `planted` and `needs_span`.
    """

    name: str
    vocab_size: int
    train: np.ndarray
    dev: np.ndarray
    test: np.ndarray
    meta: dict = field(default_factory=dict)

    def split(self, name: str) -> np.ndarray:
        return getattr(self, name)

    def floor_bpc(self, reach: int | None = None) -> float | None:
        """The lowest bpc a model whose outputs see `reach` symbols back can reach (None: the
        entropy rate); None where unknown (real text)."""
        return None

    def targets(self, split: str) -> dict[str, np.ndarray]:
        """Per target set, a bool mask over the split's ids marking the symbols it scores (the
        ones a model predicts through a probe's mechanism, or a part of them: sets may
        overlap); {} where the corpus has none."""
        return {}

    def target_floors(self, reach: int | None = None) -> dict[str, float | None]:
        """Per target set and for `rest` (every other symbol), the lowest bpc reachable on its
        symbols with `reach` symbols of context (None: unlimited); {} or a None where unknown."""
        return {}

    def no_recall_floors(self) -> dict[str, float]:
        """Per probe's target set, the lowest bpc on its answers of a model that sees all of its
        episode but never matches a query to its record: what recall must beat; {} where the
        corpus has no probes."""
        return {}

    def planted(self) -> list[int]:
        """Distances at which dependencies were planted (figures mark them); [] for real text."""
        return []

    def needs_span(self) -> dict[str, int]:
        """Per option that plants a dependency one head must see whole (a probe's episodes),
        the shortest span limit S whose window holds it; {} where there is none."""
        return {}

    def identity(self) -> dict:
        """What the data is, wherever it lies: its name, the sha256 of its bytes and its split
        sizes (a trial's identity uses this instead of paths)."""
        return {k: self.meta[k] for k in ("name", "sha256", "split_sizes")}

    def describe(self) -> dict:
        """JSON-able: the meta, the entropy rate where known, the planted distances and the
        probes with their floors at unlimited reach, with recall and without it (what tracking
        logs and reports read)."""
        return {**self.meta, "entropy_rate": self.floor_bpc(), "planted": self.planted(),
                "probes": self.target_floors(), "no_recall": self.no_recall_floors()}


def check_fractions(fractions: tuple[float, float, float]) -> None:
    if len(fractions) != 3 or min(fractions) <= 0 or not math.isclose(sum(fractions), 1):
        raise DataError(f"fractions={tuple(fractions)}: expected three positive numbers "
                        "(train, dev, test) that sum to 1")


def split_sizes(what: str, n: int, fractions: tuple[float, float, float]) -> list[int]:
    """Sizes of the train, dev and test splits of n tokens (each at least 2)."""
    check_fractions(fractions)
    n_train, n_dev = round(n * fractions[0]), round(n * fractions[1])
    sizes = [n_train, n_dev, n - n_train - n_dev]
    for split, size in zip(SPLITS, sizes, strict=True):
        if size < 2:
            raise DataError(f"{what}: {n} tokens with fractions={tuple(fractions)} leave the "
                            f"{split} split {size} tokens; each split needs at least 2")
    return sizes


def sha256_of(*arrays: np.ndarray) -> str:
    """sha256 of the arrays' bytes, one after the other."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
