"""The built-in corpus: units of frames (Markov background text and copies at planted distances,
`frames.py`) and of probe episodes (recall, conjunctive recall and MQAR, `probes.py`), each unit
drawn independently, with every floor known in closed form.

Experiments need a known answer. Each probe isolates one mechanism a paper claims and is scored
on its own target symbols (copied letters for reach; answers for recall), and the generator
knows the lowest bpc a model can reach on them and in total, for every reach S (the symbols back
a model's outputs can see: L (S - 1) + 1 for L layers of span S). Per unit (frame or episode),
with r the probes' total rate, f = 1 - r, p = p_copy (0 when episodes are mixed in: a copy's
source could fall inside one):

    E[bits] = H(unit kinds) + f (1 - p) [(F - 2) H_P + r H(pi) + (1 - r) H_P]
              + f copy_loss(S) + sum_j r_j (B_j + loss_j(S)),
    E[len]  = f F + sum_j r_j L_j,

(a background frame's first letter follows an episode with probability r, and then is drawn
fresh from pi), the floor is E[bits] / E[len], and a target's floor is the bits its mechanism
leaves over its count. Without probes the stream is the frames' own, as it always was.
"""

from dataclasses import asdict, dataclass, field, fields, make_dataclass
from typing import NamedTuple, get_type_hints

import numpy as np

from bench.declare import option

from .corpus import SPLITS, STANDARD_FRACTIONS, Corpus, DataError, sha256_of, split_sizes
from .frames import Frames, entropy
from .probes import PROBES, Probe
from .probes.base import unit_length
from .registry import register


class SyntheticStream(NamedTuple):
    tokens: np.ndarray  # (n,) ids (uint8 where the vocabulary fits, else uint16)
    bits: np.ndarray  # (n,) float64: -log2 p(token | all previous tokens) under the generator
    distance: np.ndarray  # (n,) int64: copy distance d of a copied letter, 0 for the others
    target: np.ndarray  # (n,) int8: index into Synthetic.targets of the symbol's label


@dataclass(frozen=True, kw_only=True)
class Synthetic:
    """The generator: frames and the probes mixed in (those of positive rate)."""

    frames: Frames
    probes: tuple[Probe, ...] = ()

    def __post_init__(self) -> None:
        if sum(p.rate for p in self.probes) > 1:
            raise DataError(f"synthetic: the probes' rates sum to "
                            f"{sum(p.rate for p in self.probes):g}; at most 1")
        if self.probes and self.frames.p_copy > 0:
            raise DataError(f"synthetic: {self.probes[0].name} episodes cannot be mixed with "
                            f"copies (p_copy={self.frames.p_copy:g}): a copy's source could fall "
                            "inside an episode; set data.p_copy: 0")

    @property
    def targets(self) -> tuple[str, ...]:
        """The stream's labels, one a symbol: `rest`, copies (if planted), then each probe's
        answer sets (`Probe.sets`: its parts, or its name)."""
        return ("rest", "copy", *(s for p in self.probes for s in p.sets))

    @property
    def scored(self) -> tuple[str, ...]:
        """The target sets this corpus scores: `rest`, copies where p_copy > 0, each probe (all
        its answers), then its parts where it has them (sets inside the probe's)."""
        probes = (t for p in self.probes for t in dict.fromkeys((p.name, *p.sets)))
        return ("rest", *(("copy",) if self.frames.p_copy > 0 else ()), *probes)

    def members(self, target: str) -> tuple[str, ...]:
        """The labels of `targets` that a scored set holds: a probe's are its answer sets."""
        return next((p.sets for p in self.probes if p.name == target), (target,))

    @property
    def symbols(self) -> str:
        """The frames' symbols, then each probe's: delimiter, records, queries, answers."""
        return self.frames.symbols + "".join(p.symbols for p in self.probes)

    def _unit_probs(self) -> np.ndarray:
        """P(unit kind): the frames' kinds scaled by 1 - r, then each probe's rate."""
        r = [p.rate for p in self.probes]
        return np.concatenate([(1 - sum(r)) * self.frames.kind_probs(), r])

    def _per_unit(self, reach: int | None) -> tuple[dict[str, float], dict[str, float], float
                                                     ] | None:
        """Expected (floor bits, symbols) per unit, by label of `targets`, and symbols per unit;
        None where a probe's floor at this reach has no closed form."""
        losses = [q.loss(reach) for q in self.probes]
        if None in losses:
            return None
        F, p = self.frames.frame, self.frames.p_copy
        r = sum(q.rate for q in self.probes)
        f = 1 - r
        H_P, H_pi = self.frames.entropies()
        kinds = self._unit_probs()
        total = (entropy(kinds[kinds > 0]) + f * (1 - p) * ((F - 2) * H_P + r * H_pi
                                                               + (1 - r) * H_P)
                 + f * self.frames.copy_loss(reach)
                 + sum(q.rate * (q.bits() + sum(loss.values()))
                       for q, loss in zip(self.probes, losses, strict=True)))
        length = unit_length(self.probes, F)
        bits = {"copy": f * self.frames.copy_loss(reach),
                **{s: q.rate * b for q, loss in zip(self.probes, losses, strict=True)
                   for s, b in loss.items()}}
        count = {"copy": f * p * (F - 1),
                 **{s: q.rate * c for q in self.probes for s, c in q.counts().items()}}
        bits["rest"], count["rest"] = total - sum(bits.values()), length - sum(count.values())
        return bits, count, length

    def floor_bpc(self, reach: int | None = None) -> float | None:
        """Lowest bpc of a model whose outputs see `reach` symbols back (None: the entropy rate);
        a reach below the frame counts as the frame; None where a probe's floor at that reach
        has no closed form (below its episode's length)."""
        if reach is not None and reach < self.frames.frame:
            reach = self.frames.frame
        if (per_unit := self._per_unit(reach)) is None:
            return None
        bits, _, length = per_unit
        return float(sum(bits.values()) / length)

    def target_floors(self, reach: int | None = None) -> dict[str, float | None]:
        """Per target set this corpus scores, the lowest bpc on its symbols with `reach` (None
        where it has no closed form)."""
        if (per_unit := self._per_unit(reach)) is None:
            return dict.fromkeys(self.scored)
        bits, count, _ = per_unit
        return {t: float(sum(bits[s] for s in self.members(t))
                         / sum(count[s] for s in self.members(t))) for t in self.scored}

    def no_recall_floors(self) -> dict[str, float]:
        """Per probe's target set (all its answers, then each part), the bits per answer of the
        best model that sees every episode whole but never matches a query to its record
        (`Probe.no_recall`: what the findings compute from a grid, `bench.experiment.floors`)."""
        return {t: cost.floor for p in self.probes for t, cost in p.no_recall().items()}

    def stream(self, n: int, split: str = "train") -> SyntheticStream:
        """n symbols of the split's stream (independent per split, the same P), with true bits.
        Each unit's kind is drawn first, then the frames and each probe's episodes from streams
        of their own; without probes, the frames' own stream."""
        seeds, F = [self.seed, 1 + SPLITS.index(split)], self.frames.frame
        if not self.probes:
            frames = self.frames.generate(np.random.default_rng(seeds), -(-n // F))
            return _joined([_Block(*frames, target=(frames.distance > 0) * 1)], n, self)
        rng = np.random.default_rng(seeds)
        probs = np.array([1 - sum(p.rate for p in self.probes), *(p.rate for p in self.probes)])
        lengths = np.array([F, *(p.length for p in self.probes)])
        kinds = rng.choice(len(probs), -(-n // min(lengths)) + 1, p=probs)
        kinds = kinds[: np.searchsorted(np.cumsum(lengths[kinds]), n) + 1]
        after_episode = np.concatenate([[False], kinds[:-1] > 0])
        frames = self.frames.generate(np.random.default_rng([*seeds, 0]), int(np.sum(kinds == 0)),
                                      after_episode[kinds == 0])
        blocks = [_Block(*frames, target=(frames.distance > 0) * 1)]
        first, label = len(self.frames.symbols), 2  # each probe's first symbol and label
        for j, p in enumerate(self.probes, start=1):
            tokens, bits, answers = p.generate(np.random.default_rng([*seeds, j]),
                                               int(np.sum(kinds == j)))
            blocks.append(_Block(tokens + first, bits, np.zeros_like(tokens),
                                 np.where(answers > 0, label - 1 + answers, 0)))
            first, label = first + p.n_symbols, label + len(p.sets)
        for k, b in enumerate(blocks):  # a unit's first symbol names its kind
            b.bits[:, 0] = -np.log2(probs[k])
        row = np.zeros(len(kinds), np.int64)
        for k in range(len(blocks)):
            row[kinds == k] = np.arange(np.sum(kinds == k))
        units = [_Block(*(part[i] for part in blocks[k])) for k, i in zip(kinds, row, strict=True)]
        return _joined(units, n, self)

    @property
    def seed(self) -> int:
        return self.frames.seed


class _Block(NamedTuple):
    """Units of one kind (rows), or one unit, as the stream holds them."""

    tokens: np.ndarray
    bits: np.ndarray
    distance: np.ndarray
    target: np.ndarray


def _joined(blocks: list[_Block], n: int, gen: Synthetic) -> SyntheticStream:
    """The blocks' symbols one after the other, the first n."""
    tokens, bits, distance, target = (np.concatenate([np.ravel(part) for part in parts])[:n]
                                      for parts in zip(*blocks, strict=True))
    dtype = np.uint8 if len(gen.symbols) <= 256 else np.uint16
    return SyntheticStream(tokens.astype(dtype), bits, distance, target.astype(np.int8))


class SyntheticCorpus(Corpus):
    """The built-in corpus: its generator knows every floor, where it planted copies and which
    symbols each probe scores."""

    def __init__(self, gen: Synthetic, streams: list[SyntheticStream], meta: dict) -> None:
        super().__init__("synthetic", len(gen.symbols), *(s.tokens for s in streams), meta)
        self.gen = gen
        self._targets = dict(zip(SPLITS, (s.target for s in streams), strict=True))

    def floor_bpc(self, reach: int | None = None) -> float | None:
        return self.gen.floor_bpc(reach)

    def target_floors(self, reach: int | None = None) -> dict[str, float | None]:
        return self.gen.target_floors(reach)

    def no_recall_floors(self) -> dict[str, float]:
        return self.gen.no_recall_floors()

    def targets(self, split: str) -> dict[str, np.ndarray]:
        """Per scored set, its labels' symbols: a probe's parts lie inside the probe's set."""
        labels = self._targets[split]
        return {t: np.isin(labels, [self.gen.targets.index(s) for s in self.gen.members(t)])
                for t in self.gen.scored}

    def planted(self) -> list[int]:
        return list(self.gen.frames.distances) if self.gen.frames.p_copy > 0 else []

    def needs_span(self) -> dict[str, int]:
        """An episode fits one head's window (answer to its delimiter) from S = length - 1."""
        return {f"data.{p.name}": p.length - 1 for p in self.gen.probes}


def _options() -> type:
    """The built-in corpus's options (data.<option>), declared from its parts' classes: `n_chars`
    and `fractions`, one per field of `Frames` (its type, default and help: `data.p_copy`, ...)
    and one per class of PROBES (`data.<name>`: an instance of the class, or None). Adding a
    probe is its class in probes.py; a frame option, a field of Frames."""
    hints = get_type_hints(Frames)
    frames = [(f.name, hints[f.name], field(default=f.default, metadata={
        **f.metadata, "owner": "Frames"})) for f in fields(Frames)]
    probes = [(P.name, P | None, field(default=None, metadata={
        "help": f"the {P.name} probe's episodes (rate, ...; None: none)",
        "owner": P.__name__})) for P in PROBES]
    return make_dataclass("SyntheticOptions", [
        ("n_chars", int, option(2_000_000, "symbols generated, split by `fractions`")),
        ("fractions", tuple[float, float, float], option(
            STANDARD_FRACTIONS, "train, dev and test fractions, each split its own stream")),
        *frames, *probes], frozen=True, namespace={"__module__": __name__})


SyntheticOptions = _options()


def generator(o: SyntheticOptions) -> Synthetic:
    """The generator the options give: frames (`Frames`, from the options named by its fields)
    and the probes (PROBES, by name) given a positive rate, in PROBES' order."""
    frames = Frames(**{f.name: tuple(v) if isinstance(v := getattr(o, f.name), list) else v
                       for f in fields(Frames)})
    given = [p for P in PROBES if (p := getattr(o, P.name)) is not None]
    return Synthetic(frames=frames, probes=tuple(p for p in given if p.rate > 0))


def synthetic(o: SyntheticOptions) -> SyntheticCorpus:
    """`n_chars` symbols of the generator (`generator`), split by `fractions`, each split its
    own stream."""
    gen = generator(o)
    frames = gen.frames
    given = [p for P in PROBES if (p := getattr(o, P.name)) is not None]
    n_chars, fractions = o.n_chars, o.fractions
    sizes = split_sizes(f"synthetic (n_chars={n_chars})", n_chars, fractions)
    streams = [gen.stream(size, split) for split, size in zip(SPLITS, sizes, strict=True)]
    options = {"n_chars": n_chars, **asdict(frames), **{p.name: asdict(p) for p in given}}
    meta = {"name": "synthetic", "source": "generated", "n_bytes": n_chars,
            "sha256": sha256_of(*(s.tokens for s in streams)), "prefix": False,
            "split_sizes": dict(zip(SPLITS, sizes, strict=True)), "fractions": list(fractions),
            "symbols": gen.symbols, "options": options}
    return SyntheticCorpus(gen, streams, meta)


register("synthetic", SyntheticOptions, synthetic, vocab=lambda o: len(generator(o).symbols))
