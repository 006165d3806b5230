"""The built-in corpus: frames of Markov text and of copies at planted distances, with the lowest
reachable bpc known in closed form for every span limit S (`floor_bpc(S)`).

Span experiments need a known answer. Here a dependency at distance d exists exactly where a copy
frame of distance d was planted, its value in bits is known, and a model that can reach neither
d nor a later copy of the same source pays exactly that many bits: so the dev bpc of a span-S
model has a floor, `floor_bpc(S)`, a step function of S.
"""

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

from .corpus import SPLITS, STANDARD_FRACTIONS, Corpus, DataError, sha256_of, split_sizes
from .registry import register

_Q = 1 << 16  # transition probabilities are multiples of 1/_Q, so sampling them is exact
# One script per kind of frame (background, then each copy distance), each with >= 22 letters in
# consecutive code points: Latin, LATIN, Greek, Cyrillic, Hebrew, Armenian, Georgian, Cherokee,
# Hiragana, Katakana.
CASES = ("a", "A", "α", "а", "א", "Ա", "ა", "Ꭰ", "ぁ", "ァ")


class SyntheticStream(NamedTuple):
    tokens: np.ndarray  # (n,) uint8 ids
    bits: np.ndarray  # (n,) float64: -log2 p(token | all previous tokens) under the generator
    distance: np.ndarray  # (n,) int64: copy distance d of a copied letter, 0 for the others


@dataclass(frozen=True, kw_only=True)
class Synthetic:
    """The generator of the corpus `synthetic` (its builder holds the defaults).

    Seeded stream of frames of `frame` = F symbols, each frame independently one of:

    * background, with probability 1 - p (p = p_copy): the delimiter `.`, then F - 1 letters of
      an order-1 Markov chain over `alphabet` letters, c ~ P[s, :] with s the previous letter of
      the stream (whatever frame it was in);
    * a copy of distance d_i (a multiple of F), with probability p q_i: the marker of d_i, then
      the F - 1 letters of the frame d_i back, written in copy case i (the source's letter c
      becomes the i-th case of c, whatever case the source was in).

    Every symbol a model must predict is a function of the past plus fresh randomness: a frame's
    first symbol costs -log2(1 - p) or -log2(p q_i), a background letter -log2 P[s, c], a copied
    letter 0 bits. Its case names its distance, so a single attention head at distance d - 1 from
    the query can learn a copy without first finding the marker: tiny models learn every copy
    within a few hundred steps, in every seed. P's rows are Dirichlet(concentration) draws,
    quantised to multiples of 2^-16 with every entry >= 2^-16, so the chain is ergodic with
    stationary pi and exactly what is sampled. Every letter of the stream is pi-distributed (copies
    copy pi-distributed letters), hence per frame
        E[h] = H_b(p) + p H(q) + (1 - p)(F - 1) H_P,      H_P = sum_s pi_s H(P[s, :]),
    and the entropy rate is floor_bpc() = E[h] / F.

    A model whose keys reach back S symbols from the one it predicts (`span` S: distances 0..S-1
    from the query) sees a copy of distance d <= S exactly. For d > S the source frame is out of
    reach, but a copy of it may not be: a frame d - d_j back written in case j (d_j < d, d - d_j
    <= S) copied the same source, and its case says so. Such a child frame exists with
    probability p q_j, independently for each j, so the copy is read at distance d - d_j with
    probability seen(d) = 1 - prod_j (1 - p q_j). Otherwise the model sees the marker (S >= F)
    and its own previous letters, so its best guess of the first copied letter is pi and of each
    further letter P[previous, :]: such a frame costs H(pi) + (F - 2) H_P bits. Hence, per frame,
        h(S) = E[h] + p sum_{d_i > S} q_i (1 - seen(d_i)) (H(pi) + (F - 2) H_P),
    a step function of S with steps at the frame, at every d_i and at every gap d_i - d_j.
    A model of L layers composes its windows and reaches L (S - 1) + 1 back (`floor_at`).
    Left out, so floor_bpc(S) for S below the largest distance is an upper bound on the lowest
    reachable bpc, exact at the entropy rate: the chain's memory across the out-of-reach source
    (a background frame right after it, within reach, hints at its last letter).
    """

    alphabet: int
    concentration: float
    frame: int
    p_copy: float
    distances: tuple[int, ...]
    distance_probs: tuple[float, ...]
    seed: int

    def __post_init__(self) -> None:
        checks = {
            "alphabet": 2 <= self.alphabet <= 22,
            "concentration": self.concentration > 0,
            "frame": self.frame >= 3,
            "p_copy": 0 < self.p_copy < 1,
            "distances": 1 <= len(self.distances) <= len(CASES) - 1
            and len(set(self.distances)) == len(self.distances)
            and all(d > 0 and d % self.frame == 0 for d in self.distances),
            "distance_probs": len(self.distance_probs) == len(self.distances)
            and min(self.distance_probs) > 0
            and math.isclose(sum(self.distance_probs), 1),
        }
        for key, ok in checks.items():
            if not ok:
                raise DataError(
                    f"synthetic: bad {key}={getattr(self, key)!r} (alphabet 2..22, "
                    "concentration > 0, frame >= 3, 0 < p_copy < 1, 1..9 distinct distances, "
                    "each a positive multiple of frame, distance_probs > 0 matching them, sum 1)"
                )

    @property
    def symbols(self) -> str:
        """Id order: the delimiter `.`, the markers `1..`, then each case's `alphabet` letters."""
        cases = CASES[: 1 + len(self.distances)]
        letters = (chr(ord(c) + j) for c in cases for j in range(self.alphabet))
        return "." + "123456789"[: len(self.distances)] + "".join(letters)

    def letter(self, case: int, base: np.ndarray | int) -> np.ndarray | int:
        """Token id of letter `base` (0..alphabet-1) in `case` (0 background, i copy i)."""
        return 1 + len(self.distances) + case * self.alphabet + base

    def transitions(self) -> np.ndarray:
        """(alphabet, alphabet) background transition matrix, rows sum to 1 exactly."""
        k = self.alphabet
        rows = np.random.default_rng([self.seed, 0]).dirichlet(np.full(k, self.concentration), k)
        counts = 1 + np.floor(rows * (_Q - k)).astype(np.int64)
        counts[np.arange(k), counts.argmax(1)] += _Q - counts.sum(1)
        return counts / _Q

    def floor_bpc(self, span: int | None = None) -> float:
        """Lowest bpc of a model whose keys reach `span` symbols back (None: the entropy rate)."""
        P = self.transitions()
        pi, F, p, q = _stationary(P), self.frame, self.p_copy, np.array(self.distance_probs)
        H_P = float(-np.sum(pi[:, None] * P * np.log2(P)))
        h = _entropy(np.array([p, 1 - p])) + p * _entropy(q) + (1 - p) * (F - 1) * H_P
        if span is not None:
            if span < F:
                raise DataError(f"synthetic: floor_bpc(span={span}) needs span >= frame={F}")
            lost = 0.0  # probability that a frame is a copy whose source it cannot read
            for d, qi in zip(self.distances, q, strict=True):
                if d > span:
                    children = [p * qj for dj, qj in zip(self.distances, q, strict=True)
                                if dj < d and d - dj <= span]
                    lost += qi * np.prod([1 - c for c in children])
            h += p * lost * (_entropy(pi) + (F - 2) * H_P)
        return float(h / F)

    def floor_steps(self) -> list[tuple[int, float]]:
        """[(S, floor_bpc(S)) at S = frame, at each planted distance d_i and at each gap
        d_i - d_j]: the whole step function, since floor_bpc(S) only changes there."""
        gaps = {a - b for a in self.distances for b in self.distances if a - b >= self.frame}
        return [(S, self.floor_bpc(S)) for S in sorted({self.frame, *self.distances, *gaps})]

    def stream(self, n: int, split: str = "train") -> SyntheticStream:
        """n symbols of the split's stream (independent per split, same P), with true bits."""
        rng = np.random.default_rng([self.seed, 1 + SPLITS.index(split)])
        P, F, k = self.transitions(), self.frame, self.alphabet
        n_frames = -(-n // F)
        warm = -(-max(self.distances) // F)  # background frames first: no copy reaches before 0
        kind = np.where(rng.random(n_frames) < self.p_copy,
                        1 + rng.choice(len(self.distances), n_frames, p=self.distance_probs), 0)
        kind[:warm] = 0
        table = [np.repeat(np.arange(k), np.rint(row * _Q).astype(np.int64)).tolist() for row in P]
        draws = rng.integers(0, _Q, size=(n_frames, F - 1)).tolist()
        base = np.zeros((n_frames, F - 1), np.int64)  # letters without their case
        s = int(rng.choice(k, p=_stationary(P)))
        for f, (c, u) in enumerate(zip(kind.tolist(), draws, strict=True)):
            if c:
                base[f] = base[f - self.distances[c - 1] // F]
            else:
                row = base[f]
                for j in range(F - 1):
                    s = row[j] = table[s][u[j]]
            s = int(base[f, -1])
        # `.` is id 0 and the marker of distance i is id i: a frame's first symbol is its kind
        tokens = np.concatenate([kind[:, None], self.letter(kind[:, None], base)], 1).ravel()
        bits = np.zeros((n_frames, F))
        probs = np.concatenate([[1 - self.p_copy], self.p_copy * np.array(self.distance_probs)])
        bits[:, 0] = -np.log2(probs[kind])
        bits[:warm, 0] = 0  # the warm-up is background for sure
        prev = np.concatenate([[base[0, 0]], base[:-1, -1]])  # the letter before each frame
        chain = -np.log2(P[np.concatenate([prev[:, None], base[:, :-1]], 1), base])
        bits[:, 1:] = np.where(kind[:, None] == 0, chain, 0)
        bits[0, 1] = -np.log2(_stationary(P)[base[0, 0]])
        dist = np.array((0, *self.distances))[kind]
        distance = np.concatenate([np.zeros((n_frames, 1), np.int64),
                                   np.repeat(dist[:, None], F - 1, 1)], 1).ravel()
        return SyntheticStream(tokens[:n].astype(np.uint8), bits.ravel()[:n], distance[:n])


def _stationary(P: np.ndarray) -> np.ndarray:
    """pi with pi P = pi, sum 1 (unique: every entry of P is positive)."""
    A = P.T - np.eye(len(P))
    A[-1] = 1
    return np.linalg.solve(A, np.eye(len(P))[-1])


def _entropy(p: np.ndarray) -> float:
    return float(-np.sum(p * np.log2(p)))


class SyntheticCorpus(Corpus):
    """The built-in corpus: its generator knows every floor and where it planted copies."""

    def __init__(self, gen: Synthetic, splits: list[np.ndarray], meta: dict) -> None:
        super().__init__("synthetic", len(gen.symbols), *splits, meta)
        self.gen = gen

    def floor_bpc(self, reach: int | None = None) -> float:
        """floor_bpc(reach) of the generator; a reach below the frame gets the frame's floor, a
        lower bound. A model of L layers with span S reaches L (S - 1) + 1 symbols back."""
        return self.gen.floor_bpc(None if reach is None else max(reach, self.gen.frame))

    def planted(self) -> list[int]:
        return list(self.gen.distances)


@register("synthetic")
def synthetic(n_chars: int = 2_000_000, fractions: tuple[float, float, float] = STANDARD_FRACTIONS,
              alphabet: int = 8, concentration: float = 0.1, frame: int = 8,
              p_copy: float = 0.5, distances: tuple[int, ...] = (16, 64, 128),
              distance_probs: tuple[float, ...] = (1 / 3, 1 / 3, 1 / 3), seed: int = 0
              ) -> SyntheticCorpus:
    """`n_chars` symbols of the generator (`Synthetic`: its fields are the other options),
    split by `fractions`, each split its own stream."""
    gen = Synthetic(alphabet=alphabet, concentration=concentration, frame=frame, p_copy=p_copy,
                    distances=tuple(distances), distance_probs=tuple(distance_probs), seed=seed)
    sizes = split_sizes(f"synthetic (n_chars={n_chars})", n_chars, fractions)
    splits = [gen.stream(size, split).tokens for split, size in zip(SPLITS, sizes, strict=True)]
    meta = {"name": "synthetic", "source": "generated", "n_bytes": n_chars,
            "sha256": sha256_of(*splits), "prefix": False,
            "split_sizes": dict(zip(SPLITS, sizes, strict=True)), "fractions": list(fractions),
            "symbols": gen.symbols, "options": {"n_chars": n_chars, **asdict(gen)}}
    return SyntheticCorpus(gen, splits, meta)
