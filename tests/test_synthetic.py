"""The built-in corpus: its closed-form floors, of frames (copies) and of probe episodes (recall,
conjunctive recall, MQAR), against sampling and against predictors that see exactly S symbols
back or never match a query to its record; its copies and records; determinism; impossible
probes."""

import itertools
import math
import re
from collections import Counter
from dataclasses import asdict

import numpy as np
import pytest

from bench import data
from bench.config import ConfigError, corpus_options, parse_sets, resolve
from bench.data.frames import Frames, stationary
from bench.data.probes import MQAR, PROBES, Conjunctive, Recall, first_asked
from bench.data.probes.base import mixed
from bench.data.synthetic import Synthetic

DEFAULTS = {k: p.default for k, p in corpus_options("synthetic").items()
            if k in Frames.__dataclass_fields__}


def make(**options) -> Synthetic:
    """Frames alone, with the corpus builder's defaults, `options` on top."""
    return Synthetic(frames=Frames(**{**DEFAULTS, **options}))


def probed() -> Synthetic:
    """Background frames and every probe (MQAR with gaps), episodes small enough for tight
    statistics."""
    return Synthetic(frames=Frames(**{**DEFAULTS, "p_copy": 0.0}), probes=(
        Recall(rate=0.2, keys=12, stored=6, values=4, queries=8),
        Conjunctive(rate=0.2, keys_a=3, keys_b=4, grid=2, values=4, queries=6),
        MQAR(rate=0.2, keys=10, values=12, stored=5, queries=4, max_gap=3, power_a=0.3)))


SMALL = {"alphabet": 5, "concentration": 1.0, "frame": 4, "p_copy": 0.3, "distances": (4, 12),
         "distance_probs": (0.5, 0.5), "seed": 3}


def reach_bits(gen: Frames, tokens: np.ndarray, span: int) -> np.ndarray:
    """-log2 p(token t) under the best predictor that reads only tokens t-span .. t-1.

    Written from the stream alone, not from the generator's internals: the last delimiter
    (within the last frame) gives the phase and the frame's kind; a copied letter is read at its
    distance d when that is <= span, else at d - d_j when the letter there is in case j (a copy
    of the same source), else guessed from pi (first letter) or P[previous letter].
    """
    F, n_d, k = gen.frame, len(gen.distances), gen.alphabet
    P = gen.transitions()
    pi = stationary(P)
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


def floor_steps(gen: Synthetic) -> list[tuple[int, float]]:
    """[(S, floor_bpc(S))] at every reach where the generator's floor changes (at least the
    frame) and is known in closed form: the reaches its floors are tested at."""
    steps = gen.frames.steps().union(*(p.steps() for p in gen.probes))
    floors = [(S, gen.floor_bpc(S)) for S in sorted(s for s in steps if s >= gen.frames.frame)]
    return [(S, f) for S, f in floors if f is not None]


@pytest.mark.parametrize("options", [{}, SMALL], ids=["default", "small"])
def test_floor_per_span_matches_a_predictor_that_sees_exactly_span_back(options):
    gen = make(**options)
    s = gen.stream(400_000)
    steps = [S for S, _ in floor_steps(gen)]
    spans = sorted({*steps, *(S - 1 for S in steps if S > gen.frames.frame)})
    for span in spans:
        mean, se = mean_with_se(reach_bits(gen.frames, s.tokens, span))
        assert abs(mean - gen.floor_bpc(span)) < 4 * se + 1e-9, (span, mean, gen.floor_bpc(span))
        assert se < 0.01
    floors = [gen.floor_bpc(S) for S in spans]
    assert all(a >= b for a, b in zip(floors, floors[1:], strict=False))  # more reach, less bpc
    assert floors[-1] == pytest.approx(gen.floor_bpc())  # reaching every distance: the rate


@pytest.mark.parametrize("options", [{}, SMALL], ids=["default", "small"])
def test_true_bits_average_to_the_entropy_rate(options):
    gen = make(**options)
    s, fr = gen.stream(400_000), gen.frames
    warm = max(fr.distances)
    mean, se = mean_with_se(s.bits[warm:])
    assert abs(mean - gen.floor_bpc()) < 4 * se and se < 0.01
    assert (s.bits[s.target == 1] == 0).all() and (s.target == 1).sum() == (s.distance > 0).sum()
    for d in fr.distances:  # copies are the letters d back, in the copy's own case
        at = np.flatnonzero(s.distance == d)
        assert at.size > 1000
        n_d, k = len(fr.distances), fr.alphabet
        np.testing.assert_array_equal((s.tokens[at] - 1 - n_d) % k,
                                      (s.tokens[at - d] - 1 - n_d) % k)
        assert ((s.tokens[at] - 1 - n_d) // k == fr.distances.index(d) + 1).all()


def test_the_corpus_gives_its_generators_floors():
    gen = make()
    corpus = data.build("synthetic", n_chars=20_000)
    steps = dict(floor_steps(gen))
    for S in (16, 40, 64, 100, 128, 255, 256, 4096):  # a step function: the last step <= S
        assert corpus.floor_bpc(S) == pytest.approx(steps[max(k for k in steps if k <= S)])
    assert corpus.floor_bpc(3) == gen.floor_bpc(gen.frames.frame)  # below the frame: its floor
    assert corpus.describe()["entropy_rate"] == gen.floor_bpc()
    assert corpus.planted() == list(gen.frames.distances)
    assert corpus.target_floors(4096) == {"rest": pytest.approx(gen.floor_bpc() * 8 / 4.5),
                                          "copy": 0.0}  # half the frames: 7 copied letters
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


def episodes(gen: Synthetic, tokens: np.ndarray, probe) -> list[np.ndarray]:
    """Each whole episode of `probe` in a stream, from its delimiter on, in the probe's own ids
    (0 the delimiter), with its start in the stream."""
    first = len(gen.frames.symbols) + sum(p.n_symbols for p in gen.probes[
        :gen.probes.index(probe)])
    starts = np.flatnonzero(tokens == first)
    return [(t, tokens[t:t + probe.length].astype(np.int64) - first) for t in starts
            if t + probe.length <= len(tokens)]


def keyed(probe, episode: np.ndarray) -> tuple[dict, list]:
    """Read an episode as a predictor that knows the layout: {key: value} from its records, and
    its queries as (query's key, answer's value, the answer's index)."""
    V, N = probe.values, probe.records
    rec = episode[1:1 + N] - 1
    if isinstance(probe, Recall):
        table = dict(zip((rec // V).tolist(), (rec % V).tolist(), strict=True))
        q = episode[1 + N:].reshape(-1, 2) - 1 - probe.record_symbols
        asked = [(int(k),) for k in q[:, 0]]
        answers = q[:, 1] - probe.keys
    else:
        A, B = probe.keys_a, probe.keys_b
        table = {(int(r // V // B), int(r // V % B)): int(r % V) for r in rec}
        q = episode[1 + N:].reshape(-1, 3) - 1 - probe.record_symbols
        asked = [(int(x), int(y) - A) for x, y in q[:, :2]]
        answers = q[:, 2] - A - B
    index = [probe.answer(i) for i in range(probe.queries)]
    return table, list(zip(asked, answers.tolist(), index, strict=True))


def answer_bits(gen: Synthetic, tokens: np.ndarray, span: int) -> dict[str, np.ndarray]:
    """Keyed recall (every key, in key order): -log2 p(answer) under the best predictor that
    reads only the `span` symbols before it and knows the layout: the value is read from the
    record of the key its query names, or from an earlier answer to the same key, inside that
    window and after the episode's delimiter; else it is a uniform guess (log2 values bits).
    Per scored set: all answers, the first-asked (key not asked before in the episode) and the
    repeated."""
    out = {}
    for p in gen.probes:
        bits, repeated = [], []
        for _, episode in episodes(gen, tokens, p):
            table, queries = keyed(p, episode)
            for i, (key, value, j) in enumerate(queries):
                lo = j - span  # the window: indices lo .. j - 1 of the episode
                record = 1 + key[0] >= max(lo, 1)
                earlier = any(k == key and jj - 1 >= lo for k, _, jj in queries[:i])
                assert table[key[0]] == value
                bits.append(0.0 if span >= 1 and (record or earlier) else np.log2(p.values))
                repeated.append(any(k == key for k, _, _ in queries[:i]))
        bits, repeated = np.array(bits), np.array(repeated)
        out |= {p.name: bits, f"{p.name}_first": bits[~repeated],
                f"{p.name}_repeat": bits[repeated]}
    return out


def test_keyed_recall_floors_match_a_predictor_that_sees_exactly_span_back():
    """Keyed recall's floor on its answers, at reaches from one symbol to the whole episode, is
    what a predictor that reads exactly that far back pays (within 4 standard errors), on all
    answers and on the first-asked and repeated apart; the floor falls to 0 once the window
    holds every record and answer of an episode."""
    gen = Synthetic(frames=Frames(**{**DEFAULTS, "p_copy": 0.0}),
                    probes=(Recall(rate=0.5, keys=6, values=4, queries=8),))
    s = gen.stream(200_000)
    for span in (1, 3, 4, 6, 8, 9, 12, 16, 20, 22):
        floors, bits = gen.target_floors(span), answer_bits(gen, s.tokens, span)
        for t in ("recall", "recall_first", "recall_repeat"):
            mean, se = mean_with_se(bits[t])
            assert bits[t].size > 1000 and abs(mean - floors[t]) < 4 * se + 1e-9, (span, t, mean)
    assert gen.target_floors(22) == {"rest": gen.target_floors()["rest"], "recall": 0.0,
                                     "recall_first": 0.0, "recall_repeat": 0.0}
    assert 0 < gen.target_floors(12)["recall"] < gen.target_floors(6)["recall"] < np.log2(4)
    assert gen.target_floors(1)["recall_repeat"] == pytest.approx(2)  # no earlier answer seen


@pytest.mark.parametrize("probe", [Recall(rate=0.5, keys=9, stored=4, values=3, queries=5),
                                   Conjunctive(rate=0.5, keys_a=4, keys_b=3, grid=2, values=3,
                                               queries=5)], ids=["recall", "conjunctive"])
def test_drawn_probes_are_exact_from_their_length_and_unknown_below(probe):
    """A probe whose keys are drawn per episode: every answer is its record's value (0 bits
    for a model that sees the episode whole), the floors hold from the episode's length on,
    and below it none is claimed (a window inside the records cannot know the grid)."""
    gen = Synthetic(frames=Frames(**{**DEFAULTS, "p_copy": 0.0}), probes=(probe,))
    s = gen.stream(20_000)
    labels = [gen.targets.index(t) for t in probe.sets]
    for start, episode in episodes(gen, s.tokens, probe):
        table, queries = keyed(probe, episode)
        assert len(table) == probe.records  # distinct keys, all recorded
        for key, value, j in queries:
            assert table[key if len(key) > 1 else key[0]] == value
            assert s.bits[start + j] == 0 and s.target[start + j] in labels
    L = probe.length
    assert gen.target_floors(L - 1)[probe.name] == 0.0
    assert gen.target_floors(L - 2) == dict.fromkeys(gen.scored)
    assert gen.floor_bpc(L - 2) is None and (L - 1, gen.floor_bpc()) in floor_steps(gen)


def _sequences(A: int, B: int, g: int) -> list[tuple]:
    """Every equally likely record order of a conjunctive episode: a's, b's, and a permutation
    of their grid."""
    return [perm for sa in itertools.combinations(range(A), g)
            for sb in itertools.combinations(range(B), g)
            for perm in itertools.permutations([(x, y) for x in sa for y in sb])]


def test_conjunctive_records_cost_what_counting_their_orders_gives():
    """Each record's bits, -log2 p(pair | earlier records) + log2 V under the generator, against
    counting every equally likely order of every grid that agrees with the records so far."""
    probe = Conjunctive(rate=0.5, keys_a=3, keys_b=4, grid=2, values=2, queries=2)
    orders = _sequences(3, 4, 2)
    tokens, bits, _ = probe.generate(np.random.default_rng(5), 200)
    for row, row_bits in zip(tokens, bits, strict=True):
        rec = row[1:1 + probe.records] - 1
        pairs = list(zip((rec // 2 // 4).tolist(), (rec // 2 % 4).tolist(), strict=True))
        for k, pair in enumerate(pairs):
            agree = [o for o in orders if list(o[:k]) == pairs[:k]]
            p = sum(o[k] == pair for o in agree) / len(agree)
            assert row_bits[1 + k] == pytest.approx(1 - math.log2(p), abs=1e-12)


def test_probed_stream_averages_to_its_floors():
    """The true bits average to the entropy rate, the answers cost 0 and every other symbol
    averages to the `rest` floor; the target masks are the answers, in the share the floors
    count."""
    gen = probed()
    s = gen.stream(400_000)
    mean, se = mean_with_se(s.bits)
    assert abs(mean - gen.floor_bpc()) < 4 * se and se < 0.01
    rest, se = mean_with_se(s.bits[s.target == 0])
    assert abs(rest - gen.target_floors()["rest"]) < 4 * se
    _, count, length = gen._per_unit(None)
    for p in gen.probes:
        for t in p.sets:
            answers = np.flatnonzero(s.target == gen.targets.index(t))
            assert (s.bits[answers] == 0).all()
            assert answers.size / len(s.tokens) == pytest.approx(count[t] / length, rel=0.05)


def no_recall_by_enumeration(worlds: list[tuple[tuple, tuple]], power: int = 1
                             ) -> tuple[float, float]:
    """Expected bits per episode, on first-asked and on repeated answers, of the best predictor
    without recall, over equally likely episodes (values: the records' values by key; asked: the
    queries' keys); each answer's bits raised to `power`. Its view of the q-th answer: the
    records' values as a multiset (which key holds which, unknown), the keys asked up to this
    one and the answers before it; it gives each value the share of the episodes with that view
    whose answer it is."""
    def view(values: tuple, asked: tuple, q: int) -> tuple:
        return tuple(sorted(values)), asked[:q + 1], tuple(values[k] for k in asked[:q])

    seen, joint = Counter(), Counter()
    for values, asked in worlds:
        for q, k in enumerate(asked):
            seen[view(values, asked, q)] += 1
            joint[view(values, asked, q), values[k]] += 1
    first = repeat = 0.0
    for values, asked in worlds:
        for q, k in enumerate(asked):
            v = view(values, asked, q)
            bits = (-math.log2(joint[v, values[k]] / seen[v])) ** power
            first, repeat = (first, repeat + bits) if k in asked[:q] else (first + bits, repeat)
    return first / len(worlds), repeat / len(worlds)


@pytest.mark.parametrize("probe", [Recall(rate=0.5, keys=3, values=2, queries=4),
                                   Recall(rate=0.5, keys=5, stored=3, values=3, queries=3),
                                   Conjunctive(rate=0.5, keys_a=2, keys_b=2, grid=2, values=2,
                                               queries=3)], ids=["keyed", "drawn", "conjunctive"])
def test_floors_without_recall_are_the_best_predictor_enumerated(probe):
    """Probes with values iid and queries drawn with replacement: the closed form without recall
    is, to rounding, what the best predictor that never matches a query to its record pays
    over every equally likely episode, counted: a repeated query's answer is copied (0 bits)."""
    N, V, Q = probe.records, probe.values, probe.queries
    worlds = list(itertools.product(itertools.product(range(V), repeat=N),
                                    itertools.product(range(N), repeat=Q)))
    first, repeat = no_recall_by_enumeration(worlds)
    assert repeat == 0.0 and first > 0
    assert sum(probe.without_recall().values()) == pytest.approx(first, abs=1e-12)
    if isinstance(probe, Recall):
        got = probe.without_recall()
        assert (got["recall_first"], got["recall_repeat"]) == (pytest.approx(first), 0.0)
    squares, _ = no_recall_by_enumeration(worlds, power=2)  # what the noise bars read
    assert sum(probe.without_recall(2).values()) == pytest.approx(squares, abs=1e-12)


def no_recall_answers(probe, episode: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per answer of a recall or conjunctive episode: (bits of the best predictor without
    recall: a repeated query's earlier answer copied, else the share of the answer's value among
    the recorded values not yet answered; bits of the issue's predictor: copied, else the share
    among all recorded values; whether the query repeats one before it)."""
    table, queries = keyed(probe, episode)
    left, every = Counter(table.values()), Counter(table.values())
    best, counted, repeated, answered = [], [], [], {}
    for key, value, _ in queries:
        repeated.append(key in answered)
        if key in answered:
            assert answered[key] == value
            best.append(0.0)
            counted.append(0.0)
        else:
            best.append(-math.log2(left[value] / sum(left.values())))
            counted.append(-math.log2(every[value] / probe.records))
            left[value] -= 1
            answered[key] = value
    return np.array(best), np.array(counted), np.array(repeated)


def test_the_main_jobs_recall_without_recall_matches_a_predictor_on_the_stream():
    """The main job's recall (8 of 36 keys, values of 2, 12 queries): on the stream, the best
    predictor without recall pays the closed form, on all answers and first-asked and repeated
    apart (within 4 standard errors); the issue's predictor (values counted over all records,
    answered ones included) pays 0.902 bits on first-asked answers and 0.480 on all, more."""
    probe = Recall(rate=0.9, keys=36, stored=8, values=2, queries=12)
    gen = Synthetic(frames=Frames(**{**DEFAULTS, "p_copy": 0.0}), probes=(probe,))
    rows = [no_recall_answers(probe, e) for _, e in episodes(gen, gen.stream(150_000).tokens,
                                                             probe)]
    best, counted, repeated = (np.concatenate(part) for part in zip(*rows, strict=True))
    floors = gen.no_recall_floors()
    for t, mask in (("recall", np.ones_like(repeated)), ("recall_first", ~repeated),
                    ("recall_repeat", repeated)):
        mean, se = mean_with_se(best[mask])
        assert abs(mean - floors[t]) < 4 * se + 1e-12, (t, mean, floors[t])
    assert floors == pytest.approx({"recall": 0.4226, "recall_first": 0.7937,
                                    "recall_repeat": 0.0}, abs=1e-4)
    share = probe.counts()["recall_first"] / probe.queries  # 53% first-asked
    counted_first = first_asked(8, 2, 1)[1]  # the first query's: counts of all 8 values
    assert (share, counted_first, share * counted_first) == pytest.approx((0.532, 0.902, 0.480),
                                                                          abs=5e-4)
    for got, want in ((counted[~repeated], counted_first), (counted, share * counted_first)):
        mean, se = mean_with_se(got)
        assert abs(mean - want) < 4 * se, (mean, want)


def test_a_model_without_recall_measures_above_the_bar_on_a_test_split():
    """The main job's recall on streams of its test split's length (100,000 symbols): the best
    predictor without recall measures its mean bits per answer within 3 of the standard errors
    `mixed` bounds (spread / sqrt(episodes)) of the floor, so above the findings' bar; the
    spread bounds the standard deviation of one episode's excess bits over the floor per
    expected answer (Cauchy-Schwarz over its answers), and the episodes are what it expects."""
    probe = Recall(rate=0.9, keys=36, stored=8, values=2, queries=12)
    cost = mixed((probe,), 8, 100_000)["recall"]
    se = cost.spread / math.sqrt(cost.episodes)
    for seed in range(3):
        gen = Synthetic(frames=Frames(**{**DEFAULTS, "p_copy": 0.0, "seed": seed}),
                        probes=(probe,))
        per = [no_recall_answers(probe, e)[0] for _, e in episodes(gen, gen.stream(
            100_000, "test").tokens, probe)]
        assert len(per) == pytest.approx(cost.episodes, rel=0.05)
        mean = np.concatenate(per).mean()
        assert abs(mean - cost.floor) < 3 * se, (seed, mean, cost.floor, se)
        excess = np.array([(b - cost.floor).sum() for b in per]) / probe.queries
        assert excess.std() <= cost.spread


def test_conjunctive_without_recall_matches_a_predictor_on_the_stream():
    gen = probed()
    probe = gen.probes[1]
    rows = [no_recall_answers(probe, e)[0] for _, e in episodes(gen, gen.stream(100_000).tokens,
                                                                probe)]
    mean, se = mean_with_se(np.concatenate(rows))
    assert abs(mean - gen.no_recall_floors()["conjunctive"]) < 4 * se


MQARS = [MQAR(rate=0.5, keys=12, values=10, stored=6, queries=6),
         MQAR(rate=0.5, keys=10, values=12, stored=5, queries=4, max_gap=3, power_a=0.3)]


def mqar_read(probe: MQAR, episode: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                         np.ndarray, np.ndarray]:
    """Read an MQAR episode as a predictor that knows the layout: its records' keys and values
    (0-based), then the keys asked, their answers' values, the answers' indices in the episode,
    all in order of the queries, and the blanks before each query."""
    K, N = probe.keys, probe.stored
    keys, values = episode[1:1 + 2 * N:2] - 1, episode[2:2 + 2 * N:2] - 1 - K
    after = episode[1 + 2 * N:]
    at = np.flatnonzero(after != 1 + K + probe.values)  # not a blank: a query or its answer
    asked, answers = after[at[::2]] - 1, after[at[1::2]] - 1 - K
    assert (at[1::2] == at[::2] + 1).all() and len(at) == 2 * probe.queries
    gaps = np.diff(at[::2], prepend=-2) - 2
    return keys, values, asked, answers, 1 + 2 * N + at[1::2], gaps


@pytest.mark.parametrize("probe", MQARS, ids=["back-to-back", "gaps"])
def test_mqar_episodes_bind_keys_to_distinct_values_and_ask_each_once(probe):
    """An MQAR episode as zoology's: records of two symbols, key then value, with distinct keys
    and distinct values; each query is a stored key's own symbol again, asked once, after
    every record; its answer, the value recorded with it, is the target, free given the
    records. Blanks before a query follow the power law, and each symbol's bits are exact."""
    gen = Synthetic(frames=Frames(**{**DEFAULTS, "p_copy": 0.0}), probes=(probe,))
    s = gen.stream(60_000)
    K, V, N, Q = probe.keys, probe.values, probe.stored, probe.queries
    p, label, every, records = probe.gap_probs, gen.targets.index("mqar"), [], []
    for start, episode in episodes(gen, s.tokens, probe):
        keys, values, asked, answers, index, gaps = mqar_read(probe, episode)
        assert ((0 <= keys) & (keys < K)).all() and ((0 <= values) & (values < V)).all()
        assert len(set(keys)) == N and len(set(values)) == N
        assert len(set(asked)) == Q and set(asked) <= set(keys.tolist())
        table = dict(zip(keys.tolist(), values.tolist(), strict=True))
        assert [table[k] for k in asked] == answers.tolist()
        window = slice(start, start + probe.length)
        assert (np.flatnonzero(s.target[window]) == index).all() and (s.target[index + start]
                                                                       == label).all()
        assert (s.bits[start + index] == 0).all() and index.min() > 2 * N
        assert ((0 <= gaps) & (gaps <= probe.max_gap)).all()
        assert s.bits[start + 1:start + 1 + 2 * N].tolist() == pytest.approx(
            np.log2(np.stack([K - np.arange(N), V - np.arange(N)], 1)).ravel().tolist())
        assert s.bits[start + 1 + 2 * N:start + probe.length].sum() == pytest.approx(
            np.log2(N - np.arange(Q)).sum() - np.log2(p[gaps]).sum())  # keys asked, gaps
        every.append(gaps)
        records.append((keys, values))
    for drawn, pool in zip(np.array(records).transpose(1, 2, 0), (K, V), strict=True):
        for column in drawn:  # the i-th record's key (value): uniform over the pool
            assert np.bincount(column, minlength=pool) / column.size == pytest.approx(
                np.full(pool, 1 / pool), abs=0.03)
    gaps = np.concatenate(every)
    assert gaps.size > 3000
    k = 1 + np.arange(probe.max_gap + 1)  # zoology's p(k) proportional to a k^(a - 1)
    assert p == pytest.approx(k ** (probe.power_a - 1) / np.sum(k ** (probe.power_a - 1)))
    assert np.bincount(gaps, minlength=probe.max_gap + 1) / gaps.size == pytest.approx(p, abs=0.02)


@pytest.mark.parametrize("probe", MQARS, ids=["back-to-back", "gaps"])
def test_mqar_floors_with_recall_and_without(probe):
    """Recalled, the answers cost 0 from the episode's length on (unknown below); the episode's
    bits are bits() (exactly per episode without gaps). Without recall, the best predictor
    reading the stream (the recorded values not yet answered, uniform) pays the closed form
    exactly in every episode, and the best predictor over every episode enumerated agrees."""
    gen = Synthetic(frames=Frames(**{**DEFAULTS, "p_copy": 0.0}), probes=(probe,))
    s = gen.stream(30_000)
    N, Q, L = probe.stored, probe.queries, probe.length
    per_episode = []
    for start, episode in episodes(gen, s.tokens, probe):
        _, values, _, answers, _, _ = mqar_read(probe, episode)
        left, bits = set(values.tolist()), 0.0
        for v in answers.tolist():
            assert v in left
            bits += math.log2(len(left))
            left.remove(v)
        assert bits == pytest.approx(probe.without_recall()["mqar"], abs=1e-9)
        per_episode.append(s.bits[start + 1:start + L].sum())
    mean, se = mean_with_se(np.array(per_episode))
    assert abs(mean - probe.bits()) < 4 * se + 1e-9 and (se < 1e-9) == (probe.max_gap == 0)
    assert gen.target_floors(L - 1)["mqar"] == 0.0 and gen.target_floors(L - 2)["mqar"] is None
    assert gen.no_recall_floors()["mqar"] == pytest.approx(np.log2(N - np.arange(Q)).mean())
    for N, V, Q in ((3, 4, 3), (4, 5, 2)):
        worlds = list(itertools.product(itertools.permutations(range(V), N),
                                        itertools.permutations(range(N), Q)))
        first, repeat = no_recall_by_enumeration(worlds)
        got = MQAR(rate=0.5, keys=N, values=V, stored=N, queries=Q).without_recall()["mqar"]
        assert (got, repeat) == (pytest.approx(first, abs=1e-12), 0.0)


def test_mqar_is_deterministic_per_seed_and_its_splits_share_no_episode():
    """One seed, one corpus; another seed, another. Each split draws its episodes from its own
    stream: no record block of the dev or test split is one of the train split's."""
    probe = MQAR(rate=0.5)

    def build(seed: int) -> data.Corpus:
        return data.build("synthetic", n_chars=200_000, p_copy=0.0, seed=seed, mqar=probe)

    a, b, other = build(0), build(0), build(1)
    blocks = {}
    for split in data.SPLITS:
        np.testing.assert_array_equal(a.split(split), b.split(split))
        assert not np.array_equal(a.split(split), other.split(split))
        blocks[split] = {tuple(e[:1 + 2 * probe.stored]) for _, e in episodes(
            a.gen, a.split(split), probe)}
    assert len(blocks["dev"]) > 100 and len(blocks["train"]) > 2000
    assert blocks["train"].isdisjoint(blocks["dev"] | blocks["test"])
    assert blocks["dev"].isdisjoint(blocks["test"])
    assert a.meta["options"]["mqar"] == {**asdict(probe)} and a.needs_span() == {"data.mqar": 32}


def test_every_probe_class_is_an_option_writing_its_own_script():
    """A probe is its class: PROBES makes each an option of the corpus (data.<name>, typed by
    the class, with help) and its script is the class's own, in its code points, after the
    frames'."""
    takes = corpus_options("synthetic")
    for P in PROBES:
        assert takes[P.name].type == P | None and takes[P.name].default is None
        assert P.name in takes[P.name].help
    probes = [P(rate=0.2) for P in PROBES]
    corpus = data.build("synthetic", n_chars=20_000, p_copy=0.0, **{p.name: p for p in probes})
    symbols = corpus.meta["symbols"]
    for p in probes:
        delim, *starts = p.script
        assert len(p.symbols) == p.n_symbols and p.symbols[0] == delim
        assert len(starts) == len(p.runs)
        first = 1 + np.cumsum([0, *p.runs[:-1]])  # each run's first local id
        assert all(p.symbols[i] == chr(c) for i, c, n in zip(first, starts, p.runs, strict=True)
                   if n)
    assert symbols.endswith("".join(p.symbols for p in probes))
    assert len(set(symbols)) == len(symbols)  # no two symbols alike


def test_a_probed_corpus_scores_its_probes_apart():
    corpus = data.build("synthetic", n_chars=60_000, p_copy=0.0, recall=Recall(rate=0.5),
                        conjunctive=Conjunctive(rate=0.3))
    masks = corpus.targets("dev")
    assert list(masks) == ["rest", "recall", "recall_first", "recall_repeat", "conjunctive"]
    assert sum(masks[t].sum() for t in ("rest", "recall", "conjunctive")) == len(corpus.dev)
    first, repeat = masks["recall_first"], masks["recall_repeat"]
    assert not (first & repeat).any() and ((first | repeat) == masks["recall"]).all()
    assert 0.4 < repeat.sum() / masks["recall"].sum() < 0.6  # 24 queries of 16 keys
    assert corpus.vocab_size == len(corpus.meta["symbols"]) > 256 and corpus.dev.dtype.itemsize == 2
    assert corpus.needs_span() == {"data.recall": 64, "data.conjunctive": 30}
    assert corpus.planted() == [] and set(corpus.describe()["probes"]) == set(masks)


@pytest.mark.parametrize("sets,line", [
    (["data.recall={rate: 1.2}"], "data.recall"),
    (["data.recall={rate: 0.5, keys: 1}"], "recall: keys=1 is impossible (allowed: 2 or more"),
    (["data.conjunctive={rate: 0.5, values: 40}"], "values=40 is impossible (allowed: 2..20"),
    (["data.conjunctive={rate: 0.5, keys_a: 2, grid: 3}"],
     "conjunctive: grid=3 is impossible (allowed: 2 .. min(keys_a, keys_b))"),
    (["data.recall={rate: 0.5, keys: 8, stored: 9}"],
     "recall: stored=9 is impossible (allowed: 2 .. keys, or none for every key)"),
    (["data.recall={rate: 0.5, kees: 3}"], "data.recall"),
    (["data.mqar={rate: 0.5, stored: 8, queries: 9}"],
     "mqar: queries=9, stored=8 is impossible (allowed: queries <= stored"),
    (["data.mqar={rate: 0.5, stored: 8, values: 6}"],
     "mqar: values=6, stored=8 is impossible (allowed: values >= stored"),
    (["data.mqar={rate: 0.5, keys: 4}"],
     "mqar: stored=8, keys=4 is impossible (allowed: 2 <= stored <= keys"),
    (["data.mqar={rate: 0.5, max_gap: 4, power_a: 0}"],
     "mqar: power_a=0.0 is impossible (allowed: 0 < power_a <= 1"),
    (["data.mqar={rate: 0.5, power_a: 1.5}"], "mqar: power_a=1.5 is impossible"),
    (["data.mqar={rate: 0.5, max_gap: -1}"], "mqar: max_gap=-1 is impossible"),
])
def test_impossible_probes_are_refused_naming_the_key(sets, line):
    with pytest.raises(ConfigError, match=re.escape(line)):
        resolve(parse_sets(["data.p_copy=0", *sets]))


def test_probes_need_their_span_and_no_copies(tmp_path):
    cfg = resolve(parse_sets(["data.p_copy=0", "data.n_chars=40000", "data.recall={rate: 0.5}",
                              "model.span=32", "train.block=32"]))
    with pytest.raises(data.DataError, match=r"data.recall: an episode needs model.span >= 64"):
        cfg.corpus()
    cfg = resolve(parse_sets(["data.p_copy=0", "data.n_chars=40000", "model.span=32",
                              "data.mqar={rate: 0.5, max_gap: 2}", "train.block=32"]))
    with pytest.raises(data.DataError, match=r"data.mqar: an episode needs model.span >= 48"):
        cfg.corpus()
    with pytest.raises(data.DataError, match="cannot be mixed with copies"):
        data.build("synthetic", n_chars=40_000, recall=Recall(rate=0.5))
    with pytest.raises(data.DataError, match="rates sum to 1.2"):
        data.build("synthetic", n_chars=40_000, p_copy=0.0, recall=Recall(rate=0.6),
                   conjunctive=Conjunctive(rate=0.6))
