"""The built-in corpus: its closed-form floor against the generator's own bits, determinism."""

import math

import numpy as np
import pytest

from bench import data, synthetic


@pytest.mark.parametrize(
    "options",
    [
        {},
        # overlapping self-copies (copy_len > distance) and a small, flat background
        {
            "alphabet": 5,
            "concentration": 1.0,
            "p_copy": 0.2,
            "copy_len": 20,
            "distances": (3, 40),
            "distance_probs": (0.5, 0.5),
            "seed": 3,
        },
    ],
)
def test_synthetic_true_model_matches_floor(options):
    gen = synthetic.Synthetic(**options)
    tokens, bits, distance = gen.stream(300_000)
    floor, vocab = gen.floor_bpc(), len(gen.symbols)
    assert floor < math.log2(vocab) - 1
    for d in gen.distances:
        copied = np.flatnonzero(distance == d)
        assert copied.size > 1000 and (tokens[copied] == tokens[copied - d]).all()
    # Units after the warm-up: each starts at a non-copied char; drop the possibly cut last one.
    warm = max(gen.distances)
    unit = np.cumsum(distance[warm:] == 0) - 1
    h = np.bincount(unit, weights=bits[warm:])[:-1]
    c = np.bincount(unit)[:-1]
    # Under the claimed floor E[h - floor c] = 0; batch means absorb the chain's correlation.
    batches = np.array([b.sum() for b in np.array_split(h - floor * c, 100)])
    se = math.sqrt(len(batches) * batches.var(ddof=1)) / c.sum()
    assert abs(h.sum() / c.sum() - floor) < 4 * se
    assert se < 0.01


def test_synthetic_is_deterministic_per_seed():
    a, b = (data.load("synthetic", n_chars=50_000, seed=0) for _ in range(2))
    other = data.load("synthetic", n_chars=50_000, seed=1)
    for split in data.SPLITS:
        np.testing.assert_array_equal(getattr(a, split), getattr(b, split))
        assert not np.array_equal(getattr(a, split), getattr(other, split))
    assert a.meta == b.meta and a.meta["floor_bpc"] != other.meta["floor_bpc"]
    assert not np.array_equal(a.dev, a.test[: len(a.dev)])
    assert a.meta["split_sizes"] == {"train": 45_000, "dev": 2_500, "test": 2_500}
    assert a.vocab_size == len(a.meta["symbols"]) == 27 and a.train.max() < 27
