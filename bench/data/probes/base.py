"""What every probe of the built-in corpus is (`Probe`: its options, limits, script and exact
floors, with recall and without it: `NoRecall`, `mixed`) and what the one-symbol-record
probes share (`FusedRecords`)."""

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from ..corpus import DataError


class NoRecall(NamedTuple):
    """A target set's cost without recall: `floor`, the bits per answer of the best model that
    never matches a query to its record; `spread`, a bound on one episode's standard deviation
    about it per answer (`Probe.no_recall`); `episodes`, the episodes expected in the split
    scored (`mixed`; 0 where not given)."""

    floor: float
    spread: float
    episodes: float = 0.0


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

    def without_recall(self, power: int = 1) -> dict[str, float]:
        """Expected bits per episode, on each of its `sets`, of the best model that sees the
        episode whole but never matches a query to its record: it knows the values the records
        hold (not which key holds which) and the answers given before. `power` 2: the expected
        sum of each answer's bits squared (the second moment `no_recall` reads)."""
        raise NotImplementedError

    def no_recall(self) -> dict[str, NoRecall]:
        """Per target set it scores (all its answers, then each part): the bits per answer of
        the best model without recall (`without_recall` over `counts`), and `spread`, a bound
        on the standard deviation of one episode's excess bits over that floor, per expected
        answer: sqrt(Q E[sum (b - F)^2]) / c for the episode's answers b in the set (c of them
        expected, at most Q), which holds whatever the correlation between one episode's
        answers (Cauchy-Schwarz), with E[sum (b - F)^2] = E[sum b^2] - F^2 c."""
        bits, squares, count = self.without_recall(), self.without_recall(2), self.counts()
        out = {}
        for t in dict.fromkeys((self.name, *self.sets)):
            members = self.sets if t == self.name else (t,)
            c = sum(count[s] for s in members)
            floor = float(sum(bits[s] for s in members) / c)
            excess = max(0.0, sum(squares[s] for s in members) - floor ** 2 * c)
            out[t] = NoRecall(floor, float(np.sqrt(self.queries * excess) / c))
        return out

    def steps(self) -> set[int]:
        """The reaches where `loss` changes."""
        return {self.length - 1}

    def generate(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
        """n episodes: (tokens (n, L) as local ids, 0 the delimiter; bits (n, L) after the
        delimiter; answers (n, L) int8, 1 + the index in `sets` of an answer's set, 0 for the
        other symbols)."""
        raise NotImplementedError


def unit_length(probes: tuple[Probe, ...], frame: int) -> float:
    """Expected symbols per unit of a stream whose units are each probe's episodes (at its
    rate) and frames of `frame` symbols otherwise."""
    return (1 - sum(p.rate for p in probes)) * frame + sum(p.rate * p.length for p in probes)


def mixed(probes: tuple[Probe, ...], frame: int, symbols: int) -> dict[str, NoRecall]:
    """Per target set of each probe mixed into `symbols` symbols of such a stream (the split a
    claim scores): its cost without recall (`Probe.no_recall`) and the episodes expected
    there, symbols x rate / `unit_length`. Closed form: no stream is generated."""
    length = unit_length(probes, frame)
    return {t: cost._replace(episodes=symbols * p.rate / length)
            for p in probes for t, cost in p.no_recall().items()}


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
