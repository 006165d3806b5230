"""Probe episodes of the built-in corpus: associative recall, each probe isolating one mechanism,
with exact floors on its target symbols (the answers).

An episode opens with its probe's delimiter, lays out records that each join a key and its value
in one symbol (so no two-token binding has to be learned), in key order, then asks queries whose
answers are the values: a value costs log2 V bits where it is recorded and 0 where it is
answered, if the model recalls it. Values are fresh per episode and uniform, so an answer
whose record (and any earlier answer of the same key) lies out of reach costs log2 V bits.

- `Recall`: multi-query associative recall (MQAR, as in HazyResearch's zoology) in its one-symbol
  record form: K records R(k, v_k), then Q pairs Q(c) A(v_c) with c uniform over the keys. A head
  matches a query to its record by content; with heads of small d_k, the K keys crowd d_k
  dimensions (the low-rank bottleneck of multi-head attention behind talking-heads Table 1).
- `Conjunctive`: conjunctive recall: K_a x K_b records C(a, b, v_ab), then Q triples X(a) Y(b)
  A(v_ab): only both key symbols together name the record. One head must add a match on a to a
  match on b before its softmax; pre-softmax mixing (talking heads) adds logits across heads.
"""

from dataclasses import dataclass

import numpy as np

from .corpus import DataError

MAX_VALUES = 20  # the answer scripts hold 20 symbols each
MAX_RECORDS = 4096  # record symbols per probe


@dataclass(frozen=True, kw_only=True)
class Probe:
    """An episode probe mixed into the stream at `rate` (the chance that a unit is one of its
    episodes), recalling `queries` values uniform over `values`."""

    rate: float
    values: int = 8
    queries: int = 24

    name = "probe"
    key_options = "keys"  # the options that set how many keys an episode records
    stride = 2  # symbols per query, its answer included

    def __post_init__(self) -> None:
        checks = {"rate": (0 <= self.rate < 1, "a mix rate in [0, 1)"),
                  "values": (2 <= self.values <= MAX_VALUES, f"2..{MAX_VALUES} values"),
                  "queries": (self.queries >= 1, "at least 1 query"),
                  self.key_options: (2 <= self.records <= MAX_RECORDS // self.values,
                                     f"2 or more keys, keys x values <= {MAX_RECORDS}")}
        for key, (ok, allowed) in checks.items():
            if not ok:
                got = ", ".join(f"{k}={getattr(self, k)!r}" for k in key.split(", "))
                raise DataError(f"{self.name}: {got} is impossible (allowed: {allowed})")

    @property
    def records(self) -> int:
        """N: how many keys an episode records."""
        raise NotImplementedError

    @property
    def length(self) -> int:
        """Symbols per episode: the delimiter, N records, the queries with their answers."""
        return 1 + self.records + self.stride * self.queries

    @property
    def n_symbols(self) -> int:
        return 1 + self.records * self.values + self.query_symbols + self.values

    @property
    def query_symbols(self) -> int:
        raise NotImplementedError

    def bits(self) -> float:
        """Expected bits of an episode after its delimiter, every value recalled: the records'
        values and the queries' keys."""
        return float(self.records * np.log2(self.values) + self.queries * np.log2(self.records))

    def answer(self, q: int) -> int:
        """Index of the q-th answer in the episode."""
        return 1 + self.records + self.stride * (q + 1) - 1

    def loss(self, reach: int | None) -> float:
        """Expected extra bits per episode from answers out of reach. An answer at index j is
        named by its query's stride - 1 symbols just before it (out of reach, the answer is a
        guess); its key's record r (index 1 + r) is read where j - 1 - r <= reach, or an
        earlier answer of the same key, whose query must be within reach too (each earlier
        query has that key w.p. 1 / N)."""
        if reach is None:
            return 0.0
        if reach < self.stride - 1:
            return float(self.queries * np.log2(self.values))
        N, out = self.records, 0.0
        for q in range(self.queries):
            j = self.answer(q)
            unseen = sum(j - 1 - r > reach for r in range(N)) / N
            earlier = min(q, (reach - self.stride + 1) // self.stride)  # queries within reach
            out += unseen * (1 - 1 / N) ** earlier
        return float(out * np.log2(self.values))

    def steps(self) -> set[int]:
        """The reaches where `loss` changes."""
        return {self.answer(q) - 1 - r for q in range(self.queries) for r in range(self.records)
                } | {self.stride * k + self.stride - 1 for k in range(self.queries)}

    def generate(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
        """n episodes: (tokens (n, L) as local ids, 0 the delimiter; bits (n, L) after the
        delimiter; answers (n, L) bool, the target symbols)."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Recall(Probe):
    """Multi-query associative recall with one-symbol records (see the module doc)."""

    keys: int = 16
    name = "recall"

    @property
    def records(self) -> int:
        return self.keys

    @property
    def query_symbols(self) -> int:
        return self.keys

    def generate(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
        K, V, Q = self.keys, self.values, self.queries
        value = rng.integers(0, V, (n, K))
        asked = rng.integers(0, K, (n, Q))
        rec = 1 + np.arange(K) * V + value  # R(k, v): 1 .. K V
        query = 1 + K * V + asked  # Q(c)
        ans = 1 + K * V + K + np.take_along_axis(value, asked, 1)  # A(v)
        tokens = np.concatenate([np.zeros((n, 1), np.int64), rec,
                                 np.stack([query, ans], 2).reshape(n, 2 * Q)], 1)
        bits = np.concatenate([np.zeros((n, 1)), np.full((n, K), np.log2(V)),
                               np.tile([np.log2(K), 0.0], (n, Q))], 1)
        return tokens, bits, _answers(n, self)


@dataclass(frozen=True, kw_only=True)
class Conjunctive(Probe):
    """Conjunctive associative recall: keys (a, b) named by two symbols (see the module doc)."""

    keys_a: int = 4
    keys_b: int = 4
    queries: int = 12
    name = "conjunctive"
    key_options = "keys_a, keys_b"
    stride = 3

    @property
    def records(self) -> int:
        return self.keys_a * self.keys_b

    @property
    def query_symbols(self) -> int:
        return self.keys_a + self.keys_b

    def bits(self) -> float:
        return float(self.records * np.log2(self.values)
                     + self.queries * np.log2(self.keys_a * self.keys_b))

    def generate(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
        A, B, V, Q = self.keys_a, self.keys_b, self.values, self.queries
        N = A * B
        value = rng.integers(0, V, (n, N))
        a, b = rng.integers(0, A, (n, Q)), rng.integers(0, B, (n, Q))
        rec = 1 + np.arange(N) * V + value  # C(a, b, v), a major
        x, y = 1 + N * V + a, 1 + N * V + A + b  # X(a), Y(b)
        ans = 1 + N * V + A + B + np.take_along_axis(value, a * B + b, 1)
        tokens = np.concatenate([np.zeros((n, 1), np.int64), rec,
                                 np.stack([x, y, ans], 2).reshape(n, 3 * Q)], 1)
        bits = np.concatenate([np.zeros((n, 1)), np.full((n, N), np.log2(V)),
                               np.tile([np.log2(A), np.log2(B), 0.0], (n, Q))], 1)
        return tokens, bits, _answers(n, self)


def _answers(n: int, probe: Probe) -> np.ndarray:
    """(n, L) bool: the answer positions of n episodes."""
    mask = np.zeros(probe.length, bool)
    mask[[probe.answer(q) for q in range(probe.queries)]] = True
    return np.tile(mask, (n, 1))


PROBES = (Recall, Conjunctive)
