"""Probe episodes of the built-in corpus: associative recall, each probe isolating one mechanism,
with exact floors on its target symbols (the answers), with recall and without it.

An episode opens with its probe's delimiter, lays out records that each join a key and its
value, then asks queries whose answers are the values. A model that recalls (matches a query to
its record) answers in 0 bits once the record is in reach. `without_recall` is what the best
model that never makes that match pays while it sees the episode whole: it still sees which
values the records hold and the answers already given, so it is not log2 V bits.

- `Recall`: MQAR-like associative recall in one-symbol records (so no two-token binding has to
  be learned): N records R(k, v_k), values iid uniform over V, then Q pairs Q(c) A(v_c) with c
  drawn with replacement, uniform over the recorded keys. By default every key of the alphabet
  is recorded, in key order (keyed recall); with `stored` < `keys`, each episode records
  `stored` keys drawn afresh, in a random order, so a head must match a query to its record by
  content: no fixed head can wait for one key once the alphabet outnumbers what the heads can
  each single out. Its answers are scored in two parts: first-asked (the key not asked before
  in the episode) and repeated (a model copies the earlier answer, no recall needed).
- `Conjunctive`: conjunctive recall: a grid of g a's and g b's drawn per episode, g^2 records
  C(a, b, v_ab) in a random order, then Q triples X(a) Y(b) A(v_ab): each a and each b is
  shared by g records, so only both key symbols together name one. The query's two symbols
  must first meet in one position (a head one step back), then match the record.
- `MQAR`: multi-query associative recall as zoology defines it (HazyResearch's
  `multiquery_ar.py`; Arora et al. 2023): records of two tokens, key then value (the model must
  bind them), N distinct keys of `keys` and N distinct values of `values` drawn per episode;
  then Q <= N of the stored keys, each asked once in a random order, as its key token again,
  answered by its value token; optionally each query after a power-law number of blanks.

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
    episodes), asking `queries` values of `values`."""

    rate: float
    values: int = 8
    queries: int = 24

    name = "probe"  # its option (data.<name>) and the target set of all its answers
    stride = 2  # symbols per query, its answer included
    # Its script: the delimiter, then the first code point of each run of its symbols (`runs`),
    # chosen where no other script's symbols are
    script: ClassVar[tuple[str, *tuple[int, ...]]]
    max_values = 20  # answer symbols: a run of 20 numbered forms

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
        """Symbols per episode, its delimiter included."""
        raise NotImplementedError

    @property
    def runs(self) -> tuple[int, ...]:
        """How many symbols each run of its script holds, in the order of `script`."""
        raise NotImplementedError

    @property
    def n_symbols(self) -> int:
        """The probe's script: the delimiter and its runs."""
        return 1 + sum(self.runs)

    @property
    def symbols(self) -> str:
        """Its symbols in local id order: the delimiter (0), then each run."""
        delim, *starts = self.script
        return delim + "".join(chr(start + i) for start, n in zip(starts, self.runs, strict=True)
                               for i in range(n))

    @property
    def sets(self) -> tuple[str, ...]:
        """Its answers' target sets, disjoint: the parts it scores apart (<name>_<part>), or its
        name alone."""
        return (self.name,)

    def bits(self) -> float:
        """Expected bits of an episode after its delimiter, every value recalled."""
        raise NotImplementedError

    def counts(self) -> dict[str, float]:
        """Expected answers per episode in each of its `sets`."""
        return {self.name: float(self.queries)}

    def loss(self, reach: int | None) -> dict[str, float] | None:
        """Expected extra bits per episode, on each of its `sets`, of a model that recalls and
        sees `reach` symbols back (None: unlimited): 0 from the episode's length on, where
        every symbol sees its episode whole; None below unless the probe knows it in closed
        form."""
        if reach is None or reach >= self.length - 1:
            return dict.fromkeys(self.sets, 0.0)
        return None

    def without_recall(self) -> dict[str, float]:
        """Expected bits per episode, on each of its `sets`, of the best model that sees the
        episode whole but never matches a query to its record: it knows the values the records
        hold (not which key holds which) and the answers given before."""
        raise NotImplementedError

    def steps(self) -> set[int]:
        """The reaches where `loss` changes."""
        return {self.length - 1}

    def generate(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
        """n episodes: (tokens (n, L) as local ids, 0 the delimiter; bits (n, L) after the
        delimiter; answers (n, L) int8, 1 + the index in `sets` of an answer's set, 0 for the
        other symbols)."""
        raise NotImplementedError


class FusedRecords(Probe):
    """A probe whose records each join a key and its value in one symbol (no binding of two
    tokens to learn), with its queries back to back after them, each `stride` symbols, its
    answer last: the runs of its script are the record, query and answer symbols."""

    max_records = 4096  # record symbols

    @property
    def record_symbols(self) -> int:
        """Record symbols in the probe's script, one per (key, value)."""
        raise NotImplementedError

    @property
    def query_symbols(self) -> int:
        raise NotImplementedError

    @property
    def runs(self) -> tuple[int, ...]:
        return (self.record_symbols, self.query_symbols, self.values)

    @property
    def length(self) -> int:
        """The delimiter, N records, the queries with their answers."""
        return 1 + self.records + self.stride * self.queries

    def answer(self, q: int) -> int:
        """Index of the q-th answer in the episode."""
        return 1 + self.records + self.stride * (q + 1) - 1

    def answers(self, n: int) -> np.ndarray:
        """(n, L) int8: 1 at the answers of n episodes, 0 elsewhere."""
        mask = np.zeros(self.length, np.int8)
        mask[[self.answer(q) for q in range(self.queries)]] = 1
        return np.tile(mask, (n, 1))


@dataclass(frozen=True, kw_only=True)
class Recall(FusedRecords):
    """Associative recall with one-symbol records over an alphabet of `keys` (module doc): every
    key in key order, or `stored` of them per episode in a random order (MQAR-like)."""

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
        """Whether each episode draws its keys (MQAR-like) rather than recording all in order."""
        return self.records < self.keys

    @property
    def sets(self) -> tuple[str, ...]:
        """First-asked answers (the key not asked before in the episode) and repeated ones,
        apart; one set where a single query cannot repeat."""
        return (f"{self.name}_first", f"{self.name}_repeat") if self.queries > 1 else (self.name,)

    def _parts(self, first: float, repeat: float) -> dict[str, float]:
        """{set: bits or count} from the first-asked and the repeated answers' shares."""
        if len(self.sets) == 1:
            return {self.name: first + repeat}
        return dict(zip(self.sets, (first, repeat), strict=True))

    def bits(self) -> float:
        """Which keys (the k-th record uniform over the K - k not yet recorded) and their values,
        then each query's key, uniform over the N recorded."""
        N, K = self.records, self.keys
        pick = sum(math.log2(K - k) for k in range(N)) if self.drawn else 0.0
        return float(pick + N * np.log2(self.values) + self.queries * np.log2(N))

    def counts(self) -> dict[str, float]:
        """Query q asks a key not asked before with probability (1 - 1/N)^q."""
        first = sum((1 - 1 / self.records) ** q for q in range(self.queries))
        return self._parts(first, self.queries - first)

    def loss(self, reach: int | None) -> dict[str, float] | None:
        """With every key in key order, in closed form at any reach: an answer at index j is
        named by its query just before it (out of reach, the answer is a guess); its key's
        record r (index 1 + r) is read where j - 1 - r <= reach, and a repeated one also from
        an earlier answer of the same key whose query is within reach (each earlier query has
        that key w.p. 1 / N, whatever the record). With drawn keys, as every probe (a window
        without the records cannot know which keys a query may name)."""
        if self.drawn or reach is None:
            return super().loss(reach)
        N, first, repeat = self.records, 0.0, 0.0
        for q in range(self.queries):
            j = self.answer(q)
            unseen = sum(j - 1 - r > reach for r in range(N)) / N
            near = max(0, min(q, (reach - 1) // 2))  # earlier queries within reach
            first += unseen * (1 - 1 / N) ** q
            repeat += unseen * ((1 - 1 / N) ** near - (1 - 1 / N) ** q)
        return self._parts(first * np.log2(self.values), repeat * np.log2(self.values))

    def without_recall(self) -> dict[str, float]:
        """A repeated query's answer is copied from the earlier one (0 bits); a first-asked one
        is guessed from the counts of the values not yet answered (`first_asked`)."""
        return self._parts(first_asked(self.records, self.values, self.queries)[1], 0.0)

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
        answers = self.answers(n)
        if len(self.sets) == 2:  # an earlier query asked the same key: a repeat
            repeated = ((asked[:, :, None] == asked[:, None, :]) & np.tri(Q, k=-1, dtype=bool)
                        ).any(2)
            answers[:, [self.answer(q) for q in range(Q)]] += repeated.astype(np.int8)
        return tokens, bits, answers


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

    def without_recall(self) -> dict[str, float]:
        """As recall's: a repeated pair's answer copied, a first-asked one guessed from the
        counts of the values not yet answered (`first_asked`)."""
        return {self.name: first_asked(self.records, self.values, self.queries)[1]}

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

    def without_recall(self) -> dict[str, float]:
        """The j-th answer (from 0) is uniform over the N - j recorded values not yet answered
        (values are distinct): sum over j < Q of log2(N - j); log2(N!) / N per answer when every
        key is asked."""
        return {self.name: float(np.sum(np.log2(self.stored - np.arange(self.queries))))}

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


def first_asked(N: int, V: int, Q: int) -> tuple[float, float]:
    """Q queries drawn with replacement, uniform over N records whose values are iid uniform
    over V: (the expected number per episode of first-asked queries, whose key was not asked
    before, and their expected bits for the best model without recall).

    With m keys asked before, such a query asks one of the N - m others, which one unknown
    without recall, so its answer is one of their n = N - m values (those recorded, less those
    answered): a value held by c of them has probability c / n. Its expected bits are
    h(n) = sum_k Binomial(k; n - 1, 1/V) log2(n / (k + 1)), the asked record's value shared by
    k of the other n - 1; m follows the chain m -> m + 1 with probability (N - m) / N.
    """
    m = np.arange(N + 1)
    h = np.array([sum(math.comb(n - 1, k) * (1 / V) ** k * (1 - 1 / V) ** (n - 1 - k)
                      * math.log2(n / (k + 1)) for k in range(n)) for n in range(N, -1, -1)])
    prob = np.eye(N + 1)[0]  # P(m keys asked before the query)
    count = bits = 0.0
    for _ in range(Q):
        new = prob * (N - m) / N
        count, bits = count + new.sum(), bits + new @ h
        prob = prob * m / N + np.concatenate([[0.0], new[:-1]])
    return float(count), float(bits)


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


# The built-in corpus's probes: each is an option of `bench.data.synthetic.synthetic` (data.<name>)
# and a target set it scores. A new probe is a class here and an entry in this tuple.
PROBES = (Recall, Conjunctive, MQAR)
