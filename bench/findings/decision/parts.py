"""One part of a claim at one look (one test: a value of its `at_each` keys, or the whole
claim): its numbers on the look's seeds (effect, the interval, p both ways, n; its vacuous
seeds on neither side: `vacuity`), or `not tested` where the setup decides it (`bounds`), or
why it cannot be computed; a raw span statistic's seeds whose side the floor R decides, and
the test against heads growing alike. What `verdicts` judges, look by look."""

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bench.experiment.claims import MIN_SEEDS, SPAN_SHAPE, Claim, cells
from bench.experiment.floors import Floors
from bench.findings.reading import samples
from bench.findings.reading.samples import Unavailable, match
from bench.findings.statistics import stats
from bench.findings.statistics.bounds import SPAN_METRICS, Spans, decided

from . import costs, vacuity
from .said import NOT_TESTED

# "a few long heads": the claims that also need the heads not alike (`_alike`)
SPECIALISED = {("long_head_fraction", "less"), ("head_span_spread", "greater")}


@dataclass(frozen=True)
class Seen:
    """What one look reads: the finished runs (derived metrics added), the sweep's other trials,
    the look's seeds, whether confirmatory (`evidence`; `why` not), the cells' `floors` and the
    cost measurement (`cost`, where made)."""

    runs: pd.DataFrame
    missing: pd.DataFrame
    seeds: list[Any]
    evidence: str = "confirmatory"
    why: str = ""
    floors: Floors | None = None
    cost: pd.DataFrame | None = None  # the interleaved measurement (cost.csv), where made


def spans_of(runs: pd.DataFrame, cell: dict) -> Spans | None:
    """What fixes the spans of the cell's runs, from what their layer logged (its span limit,
    whether its spans are learned, its ramp, its softmax heads); None where they do not say."""
    sub = runs[match(runs, cell)]
    if sub.empty or not {"model.span", "layer.learned_spans", "layer.h"} <= set(sub):
        return None
    r = sub.iloc[0]
    learned = samples.as_bool(r["layer.learned_spans"])
    ramp = r.get("layer.options.ramp") if learned else None
    if learned and (ramp is None or pd.isna(ramp)):
        return None
    return Spans(int(r["model.span"]), None if ramp is None else float(ramp), int(r["layer.h"]))


def floor_decided(claim: Claim, runs: pd.DataFrame, missing: pd.DataFrame, pairs: list,
                  seeds: list[Any]) -> pd.Series | None:
    """For a claim on a raw span statistic (SPAN_SHAPE without `floor: R`: every head's span is
    at least the ramp R, so R pulls the raw statistic): per seed, whether the floor decides its
    side of the margin, its raw value on the claimed side and its value above R not, or the
    reverse (None: not such a claim, or no ramp recorded)."""
    if claim.metric not in SPAN_SHAPE or claim.floor == "R":
        return None
    raw = samples.sample(claim, runs, missing, pairs, seeds)[0]
    try:
        above = samples.sample(claim.model_copy(update={"floor": "R"}), runs, missing, pairs,
                               seeds)[0]
    except Unavailable:
        return None
    if above.isna().all():
        return None
    margin = float(claim.margin)
    return pd.Series(np.asarray(stats.holds(raw, claim.expect, margin)) != np.asarray(
        stats.holds(above.reindex(raw.index), claim.expect, margin)), raw.index)


def numbers(c: Claim, margin: float | None, pairs: list, seen: Seen, alpha: float) -> dict:
    """One part's numbers at these seeds (effect, the interval at `alpha`, p both ways, n; its
    vacuous seeds on neither side), or `not tested` where the setup decides it; raises
    Unavailable with the reason it cannot be computed."""
    if not pairs:
        raise Unavailable(f"the runs have no trials for {', '.join(c.rows)}")
    if margin is None:
        raise Unavailable("the corpus plants no structure (real text): the claim is about "
                          "planted distances")
    runs, missing, seeds = seen.runs, seen.missing, seen.seeds
    if c.type == "cost":
        (rows, base), = pairs
        return costs.part(c, (rows, base), seen.cost, runs, seeds, alpha) | {"usable": True}
    if c.type == "compare":
        (rows, base), = pairs
        spans = [spans_of(runs, cell) for cell in (rows, base) if cell is not None] \
            if c.metric in SPAN_METRICS else [None]
        if None not in spans and (why := decided(c, margin, *spans, *[None] * (base is None))):
            return {"verdict": NOT_TESTED, "reason": why}
        if why := samples.one_precision(runs, c, rows, base):
            raise Unavailable(why)
    values, shape = samples.sample(c, runs, missing, pairs, seeds)
    vac = vacuity.of_test(c, margin, pairs, samples.arms(c, runs, missing, pairs, seeds),
                          seen.floors)  # None: not a claim on a probe's bits per answer
    est = vacuity.estimate(c, margin, values.to_numpy(dtype=float), vac, alpha)
    out = {"effect": est.effect, "ci_low": est.ci_low, "ci_high": est.ci_high, "p": est.p,
           "p_opposite": est.p_opposite, "n": est.n, "sd": est.sd, "share": est.share,
           "unlearned": vac.counted if vac else None}
    out |= _floor(c, margin, pairs, seen, (values, est, alpha))
    out["floor_decided"] = bool(out.get("decided_by_floor"))
    out |= _alike(c, pairs, seen)
    vacuous = vac.reason if vac else ""
    out["reason"] = "; ".join(filter(None, [vacuous, shape, out.pop("decided_by_floor", ""),
                                            out.pop("alike_said", "")]))
    if est.n < MIN_SEEDS:  # the numbers are shown, the verdict waits
        return out | {"reason": "; ".join(filter(None, [vacuous, f"{est.n} paired seeds; a "
                                                        f"verdict needs {MIN_SEEDS}"]))}
    return out | {"usable": True}


def _floor(c: Claim, margin: float, pairs: list, seen: Seen, got: tuple) -> dict:
    """For a raw span statistic: in how many seeds the floor R decides the side of the margin
    (`floor_decided`), and, where the same test on the values above R would decide otherwise
    at this level, that the verdict is the floor's. `got`: (values, estimate, level)."""
    values, est, level = got
    flips = floor_decided(c, seen.runs, seen.missing, pairs, seen.seeds)
    if flips is None or not flips.any():
        return {}
    above = samples.sample(c.model_copy(update={"floor": "R"}), seen.runs, seen.missing, pairs,
                           seen.seeds)[0]
    alt = stats.estimate(above, c.expect, margin, test=c.test, alpha=level)
    said = {"fixed_by_floor": f"{int(flips.sum())} of {len(values)} seeds"}
    if any((a <= level) != (b <= level) for a, b in ((est.p, alt.p),
                                                     (est.p_opposite, alt.p_opposite))):
        said["decided_by_floor"] = (f"withdrawn: decided by the floor R (measured above R the "
                                    f"same test gives p {alt.p:.3g}, opposite p "
                                    f"{alt.p_opposite:.3g})")
    return said


def _alike(c: Claim, pairs: list, seen: Seen) -> dict:
    """For a claim that a few heads are long (SPECIALISED), the test against every head growing
    alike: the sign test of each seed's mean head span above its median (`samples.skew`),
    exact where the heads are iid and symmetric about a common centre. The claim is
    reproduced only where this test rejects too, at its level (an intersection-union test, no
    correction: Berger 1982); a wide spread of alike heads makes "few long heads" hold on its
    own, in most seeds."""
    if (c.metric, c.expect) not in SPECIALISED:
        return {}
    (rows, _), = pairs
    d = samples.skew(c, seen.runs, rows, seen.seeds)
    p = float(stats.tail(d.to_numpy(), 0.0, "greater", "sign"))
    return {"alike_p": p, "alike_said": f"against heads alike (a symmetric spread): the mean "
                                        f"head above the median in {int((d > 0).sum())} of "
                                        f"{len(d)} seeds, p {p:.3g}"}


def claim_tests(c: Claim, runs: pd.DataFrame, missing: pd.DataFrame) -> dict[str, list]:
    """The claim's tests, one per part: label -> its (rows, baseline) cell pairs."""
    keys = [*c.rows, *(c.baseline or {}), *c.at_each, *([c.along] if c.along else [])]
    axes = samples.axes(runs, missing, keys)
    tests: dict[str, list] = {}
    if all(k in axes for k in keys):
        for label, rows, base in cells(c, axes):
            tests.setdefault(label, []).append((rows, base))
    return tests
