"""Frames of the built-in corpus: Markov background text and copies at planted distances, the
probe of reach (span policies), with what each costs a model that reaches S symbols back."""

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from bench.declare import option

from .corpus import DataError

_Q = 1 << 16  # transition probabilities are multiples of 1/_Q, so sampling them is exact
# One script per kind of frame (background, then each copy distance), each with >= 22 letters in
# consecutive code points: Latin, LATIN, Greek, Cyrillic, Hebrew, Armenian, Georgian, Cherokee,
# Hiragana, Katakana.
CASES = ("a", "A", "α", "а", "א", "Ա", "ა", "Ꭰ", "ぁ", "ァ")


class FrameBlock(NamedTuple):
    tokens: np.ndarray  # (n, F) ids: a frame's kind symbol, then its F - 1 letters
    bits: np.ndarray  # (n, F) -log2 p(token | the past) under the generator
    distance: np.ndarray  # (n, F) int64: the copy distance d of a copied letter, else 0


@dataclass(frozen=True, kw_only=True)
class Frames:
    """Frames of `frame` = F symbols, each independently one of:

    * background, with probability 1 - p (p = p_copy): the delimiter `.`, then F - 1 letters of
      an order-1 Markov chain over `alphabet` letters, c ~ P[s, :] with s the previous letter of
      the stream (whatever frame it was in; after a probe's episode, a fresh draw from pi);
    * a copy of distance d_i (a multiple of F), with probability p q_i: the marker of d_i, then
      the F - 1 letters of the frame d_i back, written in copy case i (the source's letter c
      becomes the i-th case of c, whatever case the source was in).

    A frame's first symbol costs -log2(1 - p) or -log2(p q_i), a background letter -log2 P[s, c],
    a copied letter 0 bits. Its case names its distance, so a single attention head at distance
    d - 1 from the query can learn a copy without first finding the marker: tiny models learn
    every copy within a few hundred steps, in every seed. P's rows are Dirichlet(concentration)
    draws, quantised to multiples of 2^-16 with every entry >= 2^-16, so the chain is ergodic
    with stationary pi and exactly what is sampled; every letter is pi-distributed (copies copy
    pi-distributed letters), so a background letter costs H_P = sum_s pi_s H(P[s, :]) on average
    and one drawn fresh H(pi).

    A model whose keys reach back S symbols from the one it predicts (distances 0..S-1 from the
    query) sees a copy of distance d <= S exactly. For d > S the source frame is out of reach,
    but a copy of it may not be: a frame d - d_j back written in case j (d_j < d, d - d_j <= S)
    copied the same source, and its case says so. Such a child frame exists with probability
    p q_j, independently for each j, so the copy is read at distance d - d_j with probability
    seen(d) = 1 - prod_j (1 - p q_j). Otherwise the model sees the marker (S >= F) and its own
    previous letters, so its best guess of the first copied letter is pi and of each further
    letter P[previous, :]: the frame costs H(pi) + (F - 2) H_P bits (`copy_loss`). Left out, so
    the floor below the largest distance is an upper bound on the lowest reachable bpc, exact at
    the entropy rate: the chain's memory across the out-of-reach source (a background frame
    right after it, within reach, hints at its last letter).
    """

    alphabet: int = option(8, "letters of the background chain")
    concentration: float = option(0.1, "Dirichlet concentration of the chain's rows (small: "
                                  "predictable text)")
    frame: int = option(8, "F, symbols per frame")
    p_copy: float = option(0.5, "p, the chance a frame is a copy")
    distances: tuple[int, ...] = option((16, 64, 128), "the copy distances d_i (multiples of F)")
    distance_probs: tuple[float, ...] = option((1 / 3, 1 / 3, 1 / 3), "q_i, the chance a copy "
                                               "is of distance d_i")
    seed: int = option(0, "the chain's seed (the text's, not the run's)")

    def __post_init__(self) -> None:
        checks = {
            "alphabet": 2 <= self.alphabet <= 22,
            "concentration": self.concentration > 0,
            "frame": self.frame >= 3,
            "p_copy": 0 <= self.p_copy < 1,
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
                    "concentration > 0, frame >= 3, 0 <= p_copy < 1, 1..9 distinct distances, "
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

    def kind_probs(self) -> np.ndarray:
        """P(a frame is background, a copy of d_1, ...): 1 - p, p q_1, ..."""
        return np.concatenate([[1 - self.p_copy], self.p_copy * np.array(self.distance_probs)])

    def entropies(self) -> tuple[float, float]:
        """(H_P, H(pi)): the mean bits of a background letter after a letter, drawn fresh."""
        P = self.transitions()
        pi = stationary(P)
        return float(-np.sum(pi[:, None] * P * np.log2(P))), entropy(pi)

    def copy_loss(self, reach: int | None) -> float:
        """Expected extra bits per frame from copies whose source lies beyond `reach` (None:
        unlimited, 0); a reach below the frame counts as the frame."""
        if reach is None:
            return 0.0
        reach, p, q = max(reach, self.frame), self.p_copy, self.distance_probs
        lost = 0.0  # probability that a frame is a copy whose source it cannot read
        for d, qi in zip(self.distances, q, strict=True):
            if d > reach:
                children = [p * qj for dj, qj in zip(self.distances, q, strict=True)
                            if dj < d and d - dj <= reach]
                lost += qi * np.prod([1 - c for c in children])
        H_P, H_pi = self.entropies()
        return float(p * lost * (H_pi + (self.frame - 2) * H_P))

    def steps(self) -> set[int]:
        """The spans where `copy_loss` changes: the frame, every d_i, every gap d_i - d_j."""
        gaps = {a - b for a in self.distances for b in self.distances if a - b >= self.frame}
        return {self.frame, *self.distances, *gaps}

    def generate(self, rng: np.random.Generator, n_frames: int,
                 restart: np.ndarray | None = None) -> FrameBlock:
        """n_frames frames, with true bits; where `restart` (a probe's episode came before),
        the chain starts afresh from pi."""
        P, F, k = self.transitions(), self.frame, self.alphabet
        warm = -(-max(self.distances) // F)  # background frames first: no copy reaches before 0
        kind = np.where(rng.random(n_frames) < self.p_copy,
                        1 + rng.choice(len(self.distances), n_frames, p=self.distance_probs), 0)
        kind[:warm] = 0
        table = [np.repeat(np.arange(k), np.rint(row * _Q).astype(np.int64)).tolist() for row in P]
        draws = rng.integers(0, _Q, size=(n_frames, F - 1)).tolist()
        base = np.zeros((n_frames, F - 1), np.int64)  # letters without their case
        pi = stationary(P)
        s = int(rng.choice(k, p=pi))
        fresh = np.zeros(n_frames, bool) if restart is None else np.asarray(restart, bool)
        starts = rng.choice(k, n_frames, p=pi).tolist() if fresh.any() else None
        for f, (c, u) in enumerate(zip(kind.tolist(), draws, strict=True)):
            if c:
                base[f] = base[f - self.distances[c - 1] // F]
            else:
                row = base[f]
                for j in range(F - 1):
                    s = row[j] = starts[f] if j == 0 and fresh[f] else table[s][u[j]]
            s = int(base[f, -1])
        # `.` is id 0 and the marker of distance i is id i: a frame's first symbol is its kind
        tokens = np.concatenate([kind[:, None], self.letter(kind[:, None], base)], 1)
        bits = np.zeros((n_frames, F))
        bits[:, 0] = -np.log2(self.kind_probs()[kind])
        bits[:warm, 0] = 0  # the warm-up is background for sure
        prev = np.concatenate([[base[0, 0]], base[:-1, -1]])  # the letter before each frame
        chain = -np.log2(P[np.concatenate([prev[:, None], base[:, :-1]], 1), base])
        bits[:, 1:] = np.where(kind[:, None] == 0, chain, 0)
        bits[0, 1] = -np.log2(pi[base[0, 0]])
        bits[fresh, 1] = -np.log2(pi[base[fresh, 0]])
        dist = np.array((0, *self.distances))[kind]
        distance = np.concatenate([np.zeros((n_frames, 1), np.int64),
                                   np.repeat(dist[:, None], F - 1, 1)], 1)
        return FrameBlock(tokens, bits, distance)


def stationary(P: np.ndarray) -> np.ndarray:
    """pi with pi P = pi, sum 1 (unique: every entry of P is positive)."""
    A = P.T - np.eye(len(P))
    A[-1] = 1
    return np.linalg.solve(A, np.eye(len(P))[-1])


def entropy(p: np.ndarray) -> float:
    return float(-np.sum(p * np.log2(p)))
