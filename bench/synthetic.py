"""The built-in synthetic corpus: an order-1 Markov background with verbatim copies at planted
distances, whose entropy rate (the best achievable bpc) is known in closed form."""

import hashlib
import math
from dataclasses import asdict, dataclass, fields
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from .data import SPLITS, Corpus, DataError, split_sizes

_Q = 1 << 16  # transition probabilities are multiples of 1/_Q, so sampling them is exact


class SyntheticStream(NamedTuple):
    tokens: np.ndarray  # (n,) uint8 ids
    bits: np.ndarray  # (n,) float64: -log2 p(token | all previous tokens) under the generator
    distance: np.ndarray  # (n,) int64: copy distance d for copied chars, 0 for the others


@dataclass(frozen=True)
class Synthetic:
    """Seeded character stream of background text and verbatim copies at fixed distances.

    The stream is a sequence of units. After a warm-up of W = max(distances) background chars
    (so no copy reaches before the start), each unit is, independently:
      * a copy unit, with probability p = p_copy: a marker symbol naming a distance d, drawn
        with probability q_d from `distances`, then L = copy_len chars each equal to the char d
        positions before it (deterministic given the past; copies of copies are fine);
      * else one background char c ~ P[s, :], where s is the previous *background* char, so
        copies never disturb the order-1 chain. P's rows are Dirichlet(concentration) draws over
        `alphabet` letters, quantised to multiples of 2^-16 with every entry >= 2^-16, so the
        chain is ergodic and P is exactly what is sampled.
    Markers are their own symbols, so the unit parse, the state s and hence the next-token
    distribution are functions of the past: a marker has probability p q_d, a background char
    (1 - p) P[s, c], a copied char 1. The chain's state at unit boundaries is stationary with
    distribution pi (pi P = pi; copy units hold it for a state-independent time), so the
    information per unit is i.i.d.-in-the-limit with mean
        E[h] = H_b(p) + p H(q) + (1 - p) sum_s pi_s H(P[s, :])        bits,
    and a unit has E[c] = 1 + p L chars. By renewal-reward the entropy rate, i.e. the lowest
    bpc any model can reach, is floor_bpc = E[h] / E[c].
    Key-value recall is left out on purpose: a recall's source is unboundedly far back, so no
    finite-span model could reach the floor; here every dependency is within max(distances).
    """

    alphabet: int = 24
    concentration: float = 0.1
    p_copy: float = 0.05
    copy_len: int = 12
    distances: tuple[int, ...] = (16, 64, 192)
    distance_probs: tuple[float, ...] = (0.4, 0.3, 0.3)
    seed: int = 0

    def __post_init__(self) -> None:
        checks = {
            "alphabet": 1 <= self.alphabet <= 26,
            "concentration": self.concentration > 0,
            "p_copy": 0 < self.p_copy < 1,
            "copy_len": self.copy_len >= 1,
            "distances": 1 <= len(self.distances) <= 10 and min(self.distances) >= 1,
            "distance_probs": len(self.distance_probs) == len(self.distances)
            and min(self.distance_probs) > 0
            and math.isclose(sum(self.distance_probs), 1),
        }
        for key, ok in checks.items():
            if not ok:
                raise DataError(
                    f"synthetic: bad {key}={getattr(self, key)!r} (alphabet 1..26, "
                    "concentration > 0, 0 < p_copy < 1, copy_len >= 1, 1..10 "
                    "distances >= 1, distance_probs > 0 matching them, sum 1)"
                )

    @property
    def symbols(self) -> str:
        """Letters then one marker digit per distance: ids 0..vocab_size-1."""
        return "abcdefghijklmnopqrstuvwxyz"[: self.alphabet] + "0123456789"[: len(self.distances)]

    def transitions(self) -> np.ndarray:
        """(alphabet, alphabet) background transition matrix, rows sum to 1 exactly."""
        k = self.alphabet
        rows = np.random.default_rng([self.seed, 0]).dirichlet(np.full(k, self.concentration), k)
        counts = 1 + np.floor(rows * (_Q - k)).astype(np.int64)
        counts[np.arange(k), counts.argmax(1)] += _Q - counts.sum(1)
        return counts / _Q

    def floor_bpc(self) -> float:
        """Entropy rate in bits per char (see the class docstring)."""
        P = self.transitions()
        p, q, pi = self.p_copy, np.array(self.distance_probs), _stationary(P)
        h_unit = (
            _entropy(np.array([p, 1 - p]))
            + p * _entropy(q)
            - (1 - p) * np.sum(pi[:, None] * P * np.log2(P))
        )
        return float(h_unit / (1 + p * self.copy_len))

    def stream(self, n: int, split: str = "train") -> SyntheticStream:
        """n chars of the split's stream (independent per split, same P), with true bits."""
        rng = np.random.default_rng([self.seed, 1 + SPLITS.index(split)])
        P, k, L, warmup = self.transitions(), self.alphabet, self.copy_len, max(self.distances)
        # Unit layout first: at most n units, each a copy w.p. p after the warm-up.
        is_copy = rng.random(n) < self.p_copy
        is_copy[:warmup] = False
        which = rng.choice(len(self.distances), size=n, p=self.distance_probs)
        length = np.where(is_copy, 1 + L, 1)
        start = np.cumsum(length) - length
        keep = start < n
        is_copy, which, start = is_copy[keep], which[keep], start[keep]
        tokens, bits = np.zeros(n, np.uint8), np.zeros(n)
        distance = np.zeros(n, np.int64)
        # Background chars: the chain sampled by table lookup, state s0 ~ pi.
        pi = _stationary(P)
        table = [np.repeat(np.arange(k), np.rint(row * _Q).astype(np.int64)).tolist() for row in P]
        bg_pos = start[~is_copy]
        r = rng.integers(0, _Q, size=len(bg_pos) - 1).tolist()
        bg = np.array(list(accumulate(r, lambda s, u: table[s][u], initial=rng.choice(k, p=pi))))
        tokens[bg_pos] = bg
        bits[bg_pos[0]] = -np.log2(pi[bg[0]])
        bits[bg_pos[1:]] = -np.log2(P[bg[:-1], bg[1:]])
        bits[bg_pos[warmup:]] -= np.log2(1 - self.p_copy)
        # Copy units: marker, then copy_len chars resolved to their first non-copied source.
        marker = start[is_copy]
        tokens[marker] = k + which[is_copy]
        bits[marker] = -np.log2(self.p_copy * np.array(self.distance_probs)[which[is_copy]])
        pos = (marker[:, None] + np.arange(1, L + 1)).ravel()
        d = np.repeat(np.array(self.distances)[which[is_copy]], L)
        pos, d = pos[pos < n], d[pos < n]
        distance[pos] = d
        src = pos - d
        while (chained := distance[src] > 0).any():
            src[chained] -= distance[src[chained]]
        tokens[pos] = tokens[src]
        return SyntheticStream(tokens, bits, distance)


def _stationary(P: np.ndarray) -> np.ndarray:
    """pi with pi P = pi, sum 1 (unique: every entry of P is positive)."""
    A = P.T - np.eye(len(P))
    A[-1] = 1
    return np.linalg.solve(A, np.eye(len(P))[-1])


def _entropy(p: np.ndarray) -> float:
    return float(-np.sum(p * np.log2(p)))


def synthetic_corpus(
    fractions: tuple[float, float, float], n_chars: int = 2_000_000, **options
) -> Corpus:
    known = {f.name for f in fields(Synthetic)}
    if unknown := sorted(set(options) - known):
        raise DataError(
            f"synthetic: unknown options {unknown}; known: n_chars, {', '.join(sorted(known))}"
        )
    gen = Synthetic(**{k: tuple(v) if isinstance(v, list) else v for k, v in options.items()})
    sizes = split_sizes(f"synthetic (n_chars={n_chars})", n_chars, fractions)
    splits = [gen.stream(size, split).tokens for split, size in zip(SPLITS, sizes, strict=True)]
    meta = {
        "name": "synthetic",
        "source": "generated",
        "n_bytes": n_chars,
        "sha256": hashlib.sha256(b"".join(s.tobytes() for s in splits)).hexdigest(),
        "prefix": False,
        "split_sizes": dict(zip(SPLITS, sizes, strict=True)),
        "fractions": list(fractions),
        "symbols": gen.symbols,
        "floor_bpc": gen.floor_bpc(),
        "warmup": max(gen.distances),
        **asdict(gen),
    }
    return Corpus("synthetic", len(gen.symbols), *splits, meta)
