"""The built-in corpus: its closed-form floors against predictors that see exactly S symbols back,
its copies, determinism."""

import math

import numpy as np
import pytest

from bench import data
from bench.data.synthetic import Synthetic, _stationary

DEFAULTS = {k: p.default for k, p in data.options("synthetic").items()
            if k not in ("n_chars", "fractions")}


def make(**options) -> Synthetic:
    """The generator with the corpus builder's defaults, `options` on top."""
    return Synthetic(**{**DEFAULTS, **options})


SMALL = {"alphabet": 5, "concentration": 1.0, "frame": 4, "p_copy": 0.3, "distances": (4, 12),
         "distance_probs": (0.5, 0.5), "seed": 3}


def reach_bits(gen: Synthetic, tokens: np.ndarray, span: int) -> np.ndarray:
    """-log2 p(token t) under the best predictor that reads only tokens t-span .. t-1.

    Written from the stream alone, not from the generator's internals: the last delimiter
    (within the last frame) gives the phase and the frame's kind; a copied letter is read at its
    distance d when that is <= span, else at d - d_j when the letter there is in case j (a copy
    of the same source), else guessed from pi (first letter) or P[previous letter].
    """
    F, n_d, k = gen.frame, len(gen.distances), gen.alphabet
    P = gen.transitions()
    pi = _stationary(P)
    pos = np.arange(len(tokens))
    is_delim = tokens <= n_d
    last = np.maximum.accumulate(np.where(is_delim, pos, -1))
    kind_of = tokens[np.maximum(last, 0)].astype(np.int64)  # frame kind of each position
    case = np.maximum(tokens.astype(np.int64) - 1 - n_d, 0) // k
    base = (tokens.astype(np.int64) - 1 - n_d) % k
    t = pos[max(gen.distances) + 2 * F:]  # targets after the warm-up, whole context visible
    start = t - last[t - 1] == F  # the previous frame is complete: t begins a new frame
    delim_p = np.concatenate([[1 - gen.p_copy], gen.p_copy * np.array(gen.distance_probs)])
    kind = kind_of[t - 1]
    after_delim = is_delim[t - 1]
    prev = np.where(after_delim, base[t - 2], base[t - 1])  # the previous letter
    d = np.array((0, *gen.distances))[kind]
    chain = P[prev, base[t]]
    first = np.where(after_delim, pi[base[t]], chain)
    seen = d <= span
    for j, dj in enumerate(gen.distances, start=1):  # a child of the source within reach
        back = np.where((kind > 0) & (dj < d) & (d - dj <= span), d - dj, 0)
        seen |= (back > 0) & (case[t - back] == j)
    copied = np.where(seen, (base[t] == base[np.maximum(t - d, 0)]).astype(float), first)
    letter_p = np.where(kind == 0, chain, copied) * (case[t] == kind)
    p = np.where(start, delim_p[np.minimum(tokens[t], n_d)] * is_delim[t], letter_p)
    assert (p > 0).all(), "the stream holds a symbol its own predictor rules out"
    return -np.log2(p)


def mean_with_se(bits: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error from batch means (the chain's correlation is short)."""
    batches = np.array([b.mean() for b in np.array_split(bits, 200)])
    return float(bits.mean()), float(batches.std(ddof=1) / math.sqrt(len(batches)))


@pytest.mark.parametrize("options", [{}, SMALL], ids=["default", "small"])
def test_floor_per_span_matches_a_predictor_that_sees_exactly_span_back(options):
    gen = make(**options)
    s = gen.stream(400_000)
    steps = [S for S, _ in gen.floor_steps()]
    spans = sorted({*steps, *(S - 1 for S in steps if S > gen.frame)})
    for span in spans:
        mean, se = mean_with_se(reach_bits(gen, s.tokens, span))
        assert abs(mean - gen.floor_bpc(span)) < 4 * se + 1e-9, (span, mean, gen.floor_bpc(span))
        assert se < 0.01
    floors = [gen.floor_bpc(S) for S in spans]
    assert all(a >= b for a, b in zip(floors, floors[1:], strict=False))  # more reach, less bpc
    assert floors[-1] == pytest.approx(gen.floor_bpc())  # reaching every distance: the rate


@pytest.mark.parametrize("options", [{}, SMALL], ids=["default", "small"])
def test_true_bits_average_to_the_entropy_rate(options):
    gen = make(**options)
    s = gen.stream(400_000)
    warm = max(gen.distances)
    mean, se = mean_with_se(s.bits[warm:])
    assert abs(mean - gen.floor_bpc()) < 4 * se and se < 0.01
    for d in gen.distances:  # copies are the letters d back, in the copy's own case
        at = np.flatnonzero(s.distance == d)
        assert at.size > 1000
        n_d, k = len(gen.distances), gen.alphabet
        np.testing.assert_array_equal((s.tokens[at] - 1 - n_d) % k,
                                      (s.tokens[at - d] - 1 - n_d) % k)
        assert ((s.tokens[at] - 1 - n_d) // k == gen.distances.index(d) + 1).all()


def test_the_corpus_gives_its_generators_floors():
    gen = make()
    corpus = data.build("synthetic", n_chars=20_000)
    steps = dict(gen.floor_steps())
    for S in (16, 40, 64, 100, 128, 255, 256, 4096):  # a step function: the last step <= S
        assert corpus.floor_bpc(S) == pytest.approx(steps[max(k for k in steps if k <= S)])
    assert corpus.floor_bpc(3) == gen.floor_bpc(gen.frame)  # below the frame: the frame's
    assert corpus.describe()["entropy_rate"] == gen.floor_bpc()
    assert corpus.planted() == list(gen.distances)
    assert data.build("file", path=__file__).floor_bpc(64) is None


def test_synthetic_is_deterministic_per_seed():
    a, b = (data.build("synthetic", n_chars=50_000, seed=0) for _ in range(2))
    other = data.build("synthetic", n_chars=50_000, seed=1)
    for split in data.SPLITS:
        np.testing.assert_array_equal(getattr(a, split), getattr(b, split))
        assert not np.array_equal(getattr(a, split), getattr(other, split))
    assert a.meta == b.meta and a.floor_bpc() != other.floor_bpc()
    assert not np.array_equal(a.dev, a.test[: len(a.dev)])
    assert a.meta["split_sizes"] == {"train": 45_000, "dev": 2_500, "test": 2_500}
    assert a.vocab_size == len(a.meta["symbols"]) == 36 and a.train.max() < 36


@pytest.mark.parametrize("bad", [{"distances": (16, 44)}, {"frame": 2}, {"alphabet": 30},
                                 {"distance_probs": (0.5, 0.5)}, {"distances": (16, 16)}])
def test_bad_options_name_the_key(bad):
    key = next(iter(bad))
    with pytest.raises(data.DataError, match=f"bad {key}="):
        make(**bad)
