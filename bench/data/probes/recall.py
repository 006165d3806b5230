"""`Recall`: MQAR-like associative recall in one-symbol records, keyed or by content, and its
exact floor without recall (`first_asked`)."""

import math
from dataclasses import dataclass

import numpy as np

from .base import FusedRecords


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

    def without_recall(self, power: int = 1) -> dict[str, float]:
        """A repeated query's answer is copied from the earlier one (0 bits); a first-asked one
        is guessed from the counts of the values not yet answered (`first_asked`)."""
        return self._parts(first_asked(self.records, self.values, self.queries, power)[1], 0.0)

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


def first_asked(N: int, V: int, Q: int, power: int = 1) -> tuple[float, float]:
    """Q queries drawn with replacement, uniform over N records whose values are iid uniform
    over V: (the expected number per episode of first-asked queries, whose key was not asked
    before, and the expected sum over them of their bits for the best model without recall,
    each bit count raised to `power`: 2 gives the second moment the noise bars read).

    With m keys asked before, such a query asks one of the N - m others, which one unknown
    without recall, so its answer is one of their n = N - m values (those recorded, less those
    answered): a value held by c of them has probability c / n. Its expected bits are
    h(n) = sum_k Binomial(k; n - 1, 1/V) log2(n / (k + 1)), the asked record's value shared by
    k of the other n - 1; m follows the chain m -> m + 1 with probability (N - m) / N.
    """
    m = np.arange(N + 1)
    h = np.array([sum(math.comb(n - 1, k) * (1 / V) ** k * (1 - 1 / V) ** (n - 1 - k)
                      * math.log2(n / (k + 1)) ** power for k in range(n))
                  for n in range(N, -1, -1)])
    prob = np.eye(N + 1)[0]  # P(m keys asked before the query)
    count = bits = 0.0
    for _ in range(Q):
        new = prob * (N - m) / N
        count, bits = count + new.sum(), bits + new @ h
        prob = prob * m / N + np.concatenate([[0.0], new[:-1]])
    return float(count), float(bits)
