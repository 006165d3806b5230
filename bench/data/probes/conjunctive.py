"""`Conjunctive`: recall of records that only two key symbols together name."""

import math
from dataclasses import dataclass

import numpy as np

from .base import FusedRecords
from .recall import first_asked


@dataclass(frozen=True, kw_only=True)
class Conjunctive(FusedRecords):
    """Conjunctive associative recall over a grid of keys drawn per episode (module doc).

    An episode draws `grid` distinct a's of `keys_a` and `grid` distinct b's of `keys_b` and
    records every pair once, as C(a, b, v), in a random order; a query X(a) Y(b) asks for a
    recorded pair, uniform. With keys_a = keys_b = grid every episode holds the same pairs.
    """

    keys_a: int = 4
    keys_b: int = 4
    grid: int = 3
    queries: int = 7
    name = "conjunctive"
    stride = 3
    # CJK ideographs past recall's, Hangul syllables past recall's, parenthesized numbers
    script = ("&", 0x6000, 0xB000, 0x2474)

    def checks(self) -> dict[str, tuple[bool, str]]:
        A, B, g, V = self.keys_a, self.keys_b, self.grid, self.values
        return {"keys_a, keys_b": (min(A, B) >= 2 and A * B * V <= self.max_records,
                                   f"2 or more of each, keys_a x keys_b x values <= "
                                   f"{self.max_records}"),
                "grid": (2 <= g <= min(A, B), "2 .. min(keys_a, keys_b)")}

    @property
    def records(self) -> int:
        return self.grid**2

    @property
    def record_symbols(self) -> int:
        return self.keys_a * self.keys_b * self.values

    @property
    def query_symbols(self) -> int:
        """X(a), then Y(b)."""
        return self.keys_a + self.keys_b

    def bits(self) -> float:
        """Which grid (a's and b's), in which order, the values; each query's a and b, uniform
        over the grid's."""
        g, N = self.grid, self.records
        order = math.lgamma(N + 1) / math.log(2)
        pick = math.log2(math.comb(self.keys_a, g)) + math.log2(math.comb(self.keys_b, g))
        return float(pick + order + N * np.log2(self.values) + self.queries * 2 * np.log2(g))

    def without_recall(self, power: int = 1) -> dict[str, float]:
        """As recall's: a repeated pair's answer copied, a first-asked one guessed from the
        counts of the values not yet answered (`first_asked`)."""
        return {self.name: first_asked(self.records, self.values, self.queries, power)[1]}

    def generate(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
        A, B, g, V, Q = self.keys_a, self.keys_b, self.grid, self.values, self.queries
        N = g * g
        a_set = rng.random((n, A)).argsort(1)[:, :g]  # the episode's a's and b's
        b_set = rng.random((n, B)).argsort(1)[:, :g]
        order = rng.random((n, N)).argsort(1)  # the records' order: pair k = (k // g, k % g)
        a = np.take_along_axis(a_set, order // g, 1)
        b = np.take_along_axis(b_set, order % g, 1)
        value = rng.integers(0, V, (n, N))
        asked = rng.integers(0, N, (n, Q))  # a recorded pair, uniform
        X, Y, ans = 1 + A * B * V, 1 + A * B * V + A, 1 + A * B * V + A + B  # first ids
        queries = np.stack([X + np.take_along_axis(a, asked, 1),
                            Y + np.take_along_axis(b, asked, 1),
                            ans + np.take_along_axis(value, asked, 1)], 2).reshape(n, 3 * Q)
        tokens = np.concatenate([np.zeros((n, 1), np.int64), 1 + (a * B + b) * V + value,
                                 queries], 1)
        bits = np.concatenate([np.zeros((n, 1)), np.log2(V) - np.log2(_pair_probs(a, b, A, B, g)),
                               np.tile([np.log2(g), np.log2(g), 0.0], (n, Q))], 1)
        return tokens, bits, self.answers(n)


def _pair_probs(a: np.ndarray, b: np.ndarray, A: int, B: int, g: int) -> np.ndarray:
    """(n, N) probability of each record's pair after the episode's earlier records. The next
    record is uniform over the grid's N - k pairs not yet recorded; an a not yet seen is in the
    grid with probability (g - i) / (A - i) after i distinct a's (b likewise, j)."""
    n, N = a.shape
    out = np.empty((n, N))
    for k in range(N):
        i = np.array([len(set(row)) for row in a[:, :k]]) if k else np.zeros(n, int)
        j = np.array([len(set(row)) for row in b[:, :k]]) if k else np.zeros(n, int)
        p_a = np.where((a[:, :k] == a[:, k:k + 1]).any(1), 1.0, (g - i) / np.maximum(A - i, 1))
        p_b = np.where((b[:, :k] == b[:, k:k + 1]).any(1), 1.0, (g - j) / np.maximum(B - j, 1))
        out[:, k] = p_a * p_b / (N - k)
    return out
