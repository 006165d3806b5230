"""Probe episodes of the built-in corpus: associative recall, each probe isolating one mechanism,
with exact floors on its target symbols (the answers).

An episode opens with its probe's delimiter, lays out records that each join a key and its value
in one symbol (so no two-token binding has to be learned), then asks queries whose answers are
the values: a value costs log2 V bits where it is recorded and 0 where it is answered, if the
model recalls it. Values are fresh per episode and uniform, so an answer whose record (and any
earlier answer of the same key) lies out of reach costs log2 V bits.

- `Recall`: multi-query associative recall in its one-symbol record form: N records R(k, v_k),
  then Q pairs Q(c) A(v_c) with c uniform over the recorded keys. By default every key of the
  alphabet is recorded, in key order (keyed recall); with `stored` < `keys`, each episode
  records `stored` keys drawn afresh, in a random order (MQAR, as in HazyResearch's zoology),
  so a head must match a query to its record by content: no fixed head can wait for one key
  once the alphabet outnumbers what the heads can each single out.
- `Conjunctive`: conjunctive recall: a grid of g a's and g b's drawn per episode, g^2 records
  C(a, b, v_ab) in a random order, then Q triples X(a) Y(b) A(v_ab): each a and each b is
  shared by g records, so only both key symbols together name one. The query's two symbols
  must first meet in one position (a head one step back), then match the record.

A head of width d_k scores a query against a key with a rank-d_k bilinear form; with d_k small
(many heads at a constant width) it cannot single out one of many keys by content, the low-rank
bottleneck behind talking-heads Table 1, while pre-softmax mixing (P_l) adds logits across
heads into one wider match.
"""

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .corpus import DataError


@dataclass(frozen=True, kw_only=True)
class Probe:
    """An episode probe mixed into the stream at `rate` (the chance that a unit is one of its
    episodes), recalling `queries` values uniform over `values`."""

    rate: float
    values: int = 8
    queries: int = 24

    name = "probe"  # its option (data.<name>) and its target set in the corpus
    stride = 2  # symbols per query, its answer included
    # Its script: the delimiter, then the first code points of its record, query and answer
    # symbols, chosen where no other script's symbols are
    script: ClassVar[tuple[str, int, int, int]]
    max_values = 20  # answer symbols: a run of 20 numbered forms
    max_records = 4096  # record symbols

    def __post_init__(self) -> None:
        checks = {"rate": (0 <= self.rate < 1, "a mix rate in [0, 1)"),
                  "values": (2 <= self.values <= self.max_values,
                             f"2..{self.max_values} values"),
                  "queries": (self.queries >= 1, "at least 1 query"), **self.checks()}
        for key, (ok, allowed) in checks.items():
            if not ok:
                got = ", ".join(f"{k}={getattr(self, k)!r}" for k in key.split(", "))
                raise DataError(f"{self.name}: {got} is impossible (allowed: {allowed})")

    def checks(self) -> dict[str, tuple[bool, str]]:
        """The probe's own options: {"key" (or "key, key"): (valid, what is allowed)}."""
        raise NotImplementedError

    @property
    def records(self) -> int:
        """N: how many records an episode holds."""
        raise NotImplementedError

    @property
    def length(self) -> int:
        """Symbols per episode: the delimiter, N records, the queries with their answers."""
        return 1 + self.records + self.stride * self.queries

    @property
    def record_symbols(self) -> int:
        """Record symbols in the probe's script, one per (key, value)."""
        raise NotImplementedError

    @property
    def query_symbols(self) -> int:
        raise NotImplementedError

    @property
    def n_symbols(self) -> int:
        """The probe's script: delimiter, record, query and answer symbols."""
        return 1 + self.record_symbols + self.query_symbols + self.values

    @property
    def symbols(self) -> str:
        """Its symbols in local id order: the delimiter (0), records, queries, answers."""
        delim, rec, query, ans = self.script
        return delim + "".join(chr(start + i) for start, n in (
            (rec, self.record_symbols), (query, self.query_symbols), (ans, self.values))
            for i in range(n))

    def bits(self) -> float:
        """Expected bits of an episode after its delimiter, every value recalled."""
        raise NotImplementedError

    def answer(self, q: int) -> int:
        """Index of the q-th answer in the episode."""
        return 1 + self.records + self.stride * (q + 1) - 1

    def loss(self, reach: int | None) -> float | None:
        """Expected extra bits per episode of a model that sees `reach` symbols back (None:
        unlimited): 0 from the episode's length on, where every symbol sees its episode whole;
        None below unless the probe knows it in closed form."""
        return 0.0 if reach is None or reach >= self.length - 1 else None

    def steps(self) -> set[int]:
        """The reaches where `loss` changes."""
        return {self.length - 1}

    def generate(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
        """n episodes: (tokens (n, L) as local ids, 0 the delimiter; bits (n, L) after the
        delimiter; answers (n, L) bool, the target symbols)."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class Recall(Probe):
    """Associative recall with one-symbol records over an alphabet of `keys` (module doc): every
    key in key order, or `stored` of them per episode in a random order (MQAR)."""

    keys: int = 16
    stored: int | None = None
    name = "recall"
    # CJK ideographs, Hangul syllables, circled numbers
    script = ("|", 0x4E00, 0xAC00, 0x2460)

    def checks(self) -> dict[str, tuple[bool, str]]:
        return {"keys": (2 <= self.keys <= self.max_records // self.values,
                         f"2 or more keys, keys x values <= {self.max_records}"),
                "stored": (self.stored is None or 2 <= self.stored <= self.keys,
                           "2 .. keys, or none for every key")}

    @property
    def records(self) -> int:
        return self.keys if self.stored is None else self.stored

    @property
    def record_symbols(self) -> int:
        return self.keys * self.values

    @property
    def query_symbols(self) -> int:
        return self.keys

    @property
    def drawn(self) -> bool:
        """Whether each episode draws its keys (MQAR) rather than recording all in order."""
        return self.records < self.keys

    def bits(self) -> float:
        """Which keys (the k-th record uniform over the K - k not yet recorded) and their values,
        then each query's key, uniform over the N recorded."""
        N, K = self.records, self.keys
        pick = sum(math.log2(K - k) for k in range(N)) if self.drawn else 0.0
        return float(pick + N * np.log2(self.values) + self.queries * np.log2(N))

    def loss(self, reach: int | None) -> float | None:
        """With every key in key order, in closed form at any reach: an answer at index j is
        named by its query just before it (out of reach, the answer is a guess); its key's
        record r (index 1 + r) is read where j - 1 - r <= reach, or an earlier answer of the
        same key, whose query must be within reach too (each earlier query has that key w.p.
        1 / N). With drawn keys, as every probe (a window without the records cannot know
        which keys a query may name)."""
        if self.drawn or reach is None:
            return super().loss(reach)
        if reach < 1:
            return float(self.queries * np.log2(self.values))
        N, out = self.records, 0.0
        for q in range(self.queries):
            j = self.answer(q)
            unseen = sum(j - 1 - r > reach for r in range(N)) / N
            earlier = min(q, (reach - 1) // 2)  # queries within reach
            out += unseen * (1 - 1 / N) ** earlier
        return float(out * np.log2(self.values))

    def steps(self) -> set[int]:
        if self.drawn:
            return super().steps()
        return {self.answer(q) - 1 - r for q in range(self.queries) for r in range(self.records)
                } | {2 * k + 1 for k in range(self.queries)}

    def generate(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
        K, V, Q, N = self.keys, self.values, self.queries, self.records
        key = rng.random((n, K)).argsort(1)[:, :N] if self.drawn else np.tile(np.arange(K),
                                                                                (n, 1))
        value = rng.integers(0, V, (n, N))
        asked = rng.integers(0, N, (n, Q))  # a recorded key, uniform
        rec = 1 + key * V + value  # R(k, v): 1 .. K V
        query = 1 + K * V + np.take_along_axis(key, asked, 1)  # Q(c)
        ans = 1 + K * V + K + np.take_along_axis(value, asked, 1)  # A(v)
        tokens = np.concatenate([np.zeros((n, 1), np.int64), rec,
                                 np.stack([query, ans], 2).reshape(n, 2 * Q)], 1)
        pick = np.log2(K - np.arange(N)) if self.drawn else np.zeros(N)
        bits = np.concatenate([np.zeros((n, 1)), np.tile(pick + np.log2(V), (n, 1)),
                               np.tile([np.log2(N), 0.0], (n, Q))], 1)
        return tokens, bits, _answers(n, self)


@dataclass(frozen=True, kw_only=True)
class Conjunctive(Probe):
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
        return tokens, bits, _answers(n, self)


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


def _answers(n: int, probe: Probe) -> np.ndarray:
    """(n, L) bool: the answer positions of n episodes."""
    mask = np.zeros(probe.length, bool)
    mask[[probe.answer(q) for q in range(probe.queries)]] = True
    return np.tile(mask, (n, 1))


# The built-in corpus's probes: each is an option of `bench.data.synthetic.synthetic` (data.<name>)
# and a target set it scores. A new probe is a class here and an entry in this tuple.
PROBES = (Recall, Conjunctive)
