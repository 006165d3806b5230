"""`MQAR`: multi-query associative recall as zoology defines it (two-token records)."""

from dataclasses import dataclass

import numpy as np

from .base import Probe


@dataclass(frozen=True, kw_only=True)
class MQAR(Probe):
    """Multi-query associative recall as zoology defines it (module doc).

    An episode: the delimiter; N = `stored` records of two symbols, K(k) V(v), with N distinct
    keys of `keys` and N distinct values of `values`, each uniform over those not yet drawn;
    then Q = `queries` <= N of the stored keys, a random ordered sample (each asked once), each
    as K(k) V(v_k): its key symbol again, then the answer, its value symbol. With `max_gap` > 0
    each query follows g blanks, g in 0 .. max_gap iid with P(g) proportional to
    (g + 1)^(power_a - 1) (zoology's power law; power_a = 1: uniform), and blanks pad the
    episode to its fixed length after the last answer.
    """

    keys: int = 64
    values: int = 64
    stored: int = 8
    queries: int = 8
    max_gap: int = 0
    power_a: float = 0.01
    name = "mqar"
    # CJK Extension A (keys), CJK ideographs past conjunctive's (values), the blank
    script = ("#", 0x3400, 0x8000, ord("_"))
    max_keys = 4096
    max_values = 4096

    def checks(self) -> dict[str, tuple[bool, str]]:
        K, N = self.keys, self.stored
        return {"keys": (2 <= K <= self.max_keys, f"2 .. {self.max_keys} keys"),
                "stored, keys": (2 <= N <= K, "2 <= stored <= keys: an episode's keys are "
                                 "distinct"),
                "values, stored": (self.values >= N, "values >= stored: an episode's values "
                                   "are distinct, one per stored key"),
                "queries, stored": (self.queries <= N, "queries <= stored: each query asks a "
                                    "stored key not asked before"),
                "max_gap": (self.max_gap >= 0, "0 or more blanks before a query"),
                "power_a": (0 < self.power_a <= 1, "0 < power_a <= 1: P(gap g) is "
                            "proportional to (g + 1)^(power_a - 1), uniform at 1")}

    @property
    def records(self) -> int:
        return self.stored

    @property
    def length(self) -> int:
        """The delimiter, N two-symbol records, Q queries with their answers and the most
        blanks before each."""
        return 1 + 2 * self.stored + (self.stride + self.max_gap) * self.queries

    @property
    def runs(self) -> tuple[int, ...]:
        """Keys, values, and the blank where queries have gaps."""
        return (self.keys, self.values, 1 if self.max_gap else 0)

    @property
    def gap_probs(self) -> np.ndarray:
        """(max_gap + 1,) P(g blanks before a query), g = 0 .. max_gap."""
        p = (1.0 + np.arange(self.max_gap + 1)) ** (self.power_a - 1)
        return p / p.sum()

    def bits(self) -> float:
        """The keys and values (the i-th record's uniform over the K - i and V - i not yet
        drawn), each query's gap and its key, uniform over the N - j stored keys not asked."""
        N, Q, p = self.stored, self.queries, self.gap_probs
        i = np.arange(N)
        records = np.sum(np.log2(self.keys - i) + np.log2(self.values - i))
        return float(records + np.sum(np.log2(N - np.arange(Q))) - Q * np.sum(p * np.log2(p)))

    def without_recall(self, power: int = 1) -> dict[str, float]:
        """The j-th answer (from 0) is uniform over the N - j recorded values not yet answered
        (values are distinct): sum over j < Q of log2(N - j); log2(N!) / N per answer when every
        key is asked."""
        return {self.name: float(np.sum(np.log2(self.stored - np.arange(self.queries))
                                        ** power))}

    def generate(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
        K, V, N, Q, G = self.keys, self.values, self.stored, self.queries, self.max_gap
        key, value = _distinct(rng, n, K, N), _distinct(rng, n, V, N)
        asked = rng.random((n, N)).argsort(1)[:, :Q]  # which records are asked, in order
        p = self.gap_probs
        gap = rng.choice(G + 1, (n, Q), p=p) if G else np.zeros((n, Q), np.int64)
        at = 1 + 2 * N + np.cumsum(gap, 1) + 2 * np.arange(Q)  # (n, Q): each query's index
        rows = np.arange(n)[:, None]
        # blanks wherever no record, query or answer goes (nowhere without gaps)
        tokens = np.full((n, self.length), 1 + K + V, np.int64)
        tokens[:, 0] = 0
        tokens[:, 1:1 + 2 * N:2], tokens[:, 2:2 + 2 * N:2] = 1 + key, 1 + K + value
        tokens[rows, at] = 1 + np.take_along_axis(key, asked, 1)
        tokens[rows, at + 1] = 1 + K + np.take_along_axis(value, asked, 1)
        bits = np.zeros((n, self.length))
        bits[:, 1:1 + 2 * N:2] = np.log2(K - np.arange(N))
        bits[:, 2:2 + 2 * N:2] = np.log2(V - np.arange(N))
        longer = p[::-1].cumsum()[::-1]  # P(gap >= g)
        bits[rows, at] = np.log2(longer[gap] / p[gap]) + np.log2(N - np.arange(Q))
        for t in range(G):  # the blank after t blanks: P(gap > t | gap >= t)
            r, q = np.nonzero(gap > t)
            bits[r, at[r, q] - gap[r, q] + t] = np.log2(longer[t] / longer[t + 1])
        answers = np.zeros((n, self.length), np.int8)
        answers[rows, at + 1] = 1
        return tokens, bits, answers


def _distinct(rng: np.random.Generator, n: int, pool: int, k: int) -> np.ndarray:
    """(n, k): per row, k distinct draws from range(pool) in draw order, each uniform over those
    not drawn before it, in O(n k^2) rather than a permutation of the pool per row."""
    out = np.empty((n, k), np.int64)
    for i in range(k):
        c = rng.integers(0, pool - i, n)  # its rank among those not drawn yet
        for u in np.sort(out[:, :i], 1).T:  # skip those drawn, in increasing order
            c += c >= u
        out[:, i] = c
    return out
