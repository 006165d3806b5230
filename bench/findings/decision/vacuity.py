"""Which seeds of a test on a probe's bits per answer are vacuous: their outcome could not tell a
variant that learned the probe from one that learned nothing (docs/claims.md, "Vacuous seeds").
One rule, decided per seed from the claim's own geometry, for the findings, the pilot and the
dry run:

- a claim whose margin is on the side against its expectation (not worse than a reference, or
  a value against a margin) or an equivalence: a seed is vacuous where the claimed arm anywhere
  from 0 bits (it learned the probe) to the no-recall floor (it learned nothing) lands on the
  same side of the margin (an equivalence: all inside it, or none of it reaching inside), on
  the claim's scale, its other arms as measured (`_extremes`); for a trend of one row the
  reference is its point at the smallest value along the axis, and the rest is the arm that
  could have learned nothing;
- any other claim (margin 0 or on the side of its expectation, against a baseline or along an
  axis): a seed is vacuous where every arm it reads answers at the no-recall floor within the
  probe's noise, at or above floor - Z standard errors of a test mean (`bar`), a rule
  symmetric in the arms, so a sign-flip test stays exact under its sharp null;
- a probe part whose no-recall floor is 0 (`recall_repeat`: repeated answers are copied)
  leaves nothing to learn without recall: every seed is vacuous (a grid is refused such a
  claim before anything runs: `refused`).

A vacuous seed lands on neither side (`neutral`): at the margin for the claim's test (against
it) and for its contrary, inside the margin for an equivalence's contrary.
"""

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bench.experiment.claims import PROBE_METRIC, Claim, fixed
from bench.experiment.floors import Floors, NoRecall
from bench.findings.reading.samples import Arms, Unavailable, label, per_seed
from bench.findings.statistics import stats
from bench.findings.statistics.stats import Estimate, holds

Z = 3.0  # standard errors below the no-recall floor a mean may fall by noise alone


@dataclass(frozen=True)
class Costs:
    """What a test's cells pay without recall, as its arms hold them: the probe's `target`
    set, the rows' and the baseline's costs per point (`NoRecall`), and their cells' names."""

    target: str
    rows: list[NoRecall]
    base: list[NoRecall] | None
    names: tuple[list[str], list[str] | None]


@dataclass(frozen=True)
class Vacuity:
    """Per seed of one test, whether it is vacuous ((seeds,) bool); the rule with its numbers
    (the dry run's words), what a vacuous seed met (the findings' words), and per cell the
    seeds that answered at the no-recall floor within noise (`unlearned`)."""

    vacuous: np.ndarray
    rule: str
    why: str
    unlearned: str = ""

    @property
    def counted(self) -> str:
        """The `unlearned` column: per cell the seeds at the floor, and the vacuous ones."""
        return "; ".join(filter(None, [self.unlearned, f"vacuous {int(self.vacuous.sum())}/"
                                                       f"{len(self.vacuous)}"]))

    @property
    def reason(self) -> str:
        """The findings' words: '' where no seed is vacuous."""
        k, n = int(self.vacuous.sum()), len(self.vacuous)
        if k == 0:
            return ""
        return (f"unanswerable: every seed is vacuous: {self.why}" if k == n else
                f"{k} of {n} seeds vacuous: {self.why}")


def target(metric: str) -> str | None:
    """The probe target set a claim on its test bits per answer (or gap) reads; None else."""
    m = PROBE_METRIC.match(metric)
    return m[3] if m and m[1] and m[2] in ("bpc", "gap") else None


def bar(cost: NoRecall) -> float:
    """The least test mean a model without recall measures but by chance: its floor less Z
    standard errors, se = spread / sqrt(test episodes) (`NoRecall`)."""
    return cost.floor - Z * cost.spread / np.sqrt(max(cost.episodes, 1.0))


def _better(c: Claim, margin: float) -> bool:
    """A claim that an arm is better (or worse) than a reference, its margin 0 or on the side
    of its expectation: judged by the symmetric rule."""
    paired = c.baseline is not None or c.type == "trend"
    return paired and ((c.expect == "less" and margin <= 0)
                       or (c.expect == "greater" and margin >= 0))


def _numbers(values: list[float], fmt: str = ".3g") -> str:
    low, high = min(values), max(values)
    return format(low, fmt) if low == high else f"{low:{fmt}} to {high:{fmt}}"


def words(c: Claim, margin: float, x: np.ndarray | None, costs: Costs) -> tuple[str, str]:
    """The rule that makes a seed of this test vacuous, with its numbers (the dry run's words),
    and what a vacuous seed met (the findings'): `x` the trend's axis values (None: compare)."""
    every = costs.rows + (costs.base or [])
    if any(cost.floor == 0 for cost in every):
        why = (f"the no-recall floor of {costs.target} is 0: a model without recall pays nothing "
               "there (repeated answers are copied), so no seed can tell learning from none")
        return f"every seed is vacuous: {why}", why
    if not _better(c, margin):
        return _geometry(c, margin, x, costs)
    bars = [bar(cost) for cost in every]
    se = _numbers([(cost.floor - b) / Z for cost, b in zip(every, bars, strict=True)])
    said = (f"at the no-recall floor {_numbers([cost.floor for cost in every])} within noise: "
            f"at or above {_numbers(bars)}")
    return (f"a seed is vacuous where every arm it reads answers {said} (the floor less {Z:g} x "
            f"{se}, the bound on the standard error of a mean over "
            f"{_numbers([cost.episodes for cost in every], ',.0f')} test episodes)",
            f"every arm {said}")


def decide(c: Claim, margin: float, arms: Arms, costs: Costs) -> Vacuity:
    """Per seed of one test (its `arms`, the cells' `costs`), whether it is vacuous (module
    doc), with the rule and its numbers (`words`)."""
    rule, why = words(c, margin, arms.x, costs)
    every = costs.rows + (costs.base or [])
    n = arms.rows.shape[1]
    if any(cost.floor == 0 for cost in every):
        return Vacuity(np.ones(n, bool), rule, why)
    bars = np.array([bar(cost) for cost in every])[:, None]
    values = np.concatenate([arms.rows, *([] if arms.base is None else [arms.base])])
    unlearned = "; ".join(f"{name}: {int((v >= b).sum())}/{n}" for name, v, b in zip(
        [*costs.names[0], *(costs.names[1] or [])], values, bars, strict=True))
    if _better(c, margin):
        return Vacuity((values >= bars).all(axis=0), rule, why, unlearned)
    lo, hi = _extremes(c, arms, costs)
    if c.expect == "equivalent":  # all inside the margin, or none of it reached
        vacuous = (lo > -margin) & (hi < margin) | (lo >= margin) | (hi <= -margin)
    else:
        vacuous = np.asarray(holds(lo, c.expect, margin)) == np.asarray(holds(hi, c.expect,
                                                                              margin))
    return Vacuity(vacuous, rule, why, unlearned)


def _weights(c: Claim, x: np.ndarray | None) -> np.ndarray:
    """Each point's weight in the per-seed value, which is linear in each point's value on the
    claim's scale: 1 for a compare claim; along a trend's scaled axis, the least-squares
    slope's (x - mean) / sum (x - mean)^2."""
    if x is None:
        return np.ones(1)
    at = np.log2(x) if c.scale == "log2" else x
    return (at - at.mean()) / ((at - at.mean()) ** 2).sum()


def _free(x: np.ndarray | None, paired: bool) -> np.ndarray:
    """The points where the claimed arm could have learned or not: every point, but a trend of
    one row's reference, its point at the smallest value along the axis (measured)."""
    free = np.ones(1 if x is None else len(x), bool)
    if x is not None and not paired:
        free[int(np.argmin(x))] = False
    return free


def _extremes(c: Claim, arms: Arms, costs: Costs) -> tuple[np.ndarray, np.ndarray]:
    """Per seed, the least and the greatest per-seed value the claim could have read with the
    claimed arm anywhere from 0 bits (learned) to its no-recall floor (learned nothing) at each
    free point (`_free`), its other values as measured: the value is monotone in each point, so
    they lie where each point is at 0 or at its floor as its weight says (`_weights`)."""
    up = _weights(c, arms.x) > 0
    floor = np.array([cost.floor for cost in costs.rows])
    free = _free(arms.x, arms.base is not None)
    out = []
    for high in (False, True):
        rows = arms.rows.copy()
        rows[free] = np.where(up == high, floor, 0.0)[free][:, None]
        out.append(per_seed(c, replace(arms, rows=rows)))
    return out[0], out[1]


def _geometry(c: Claim, margin: float, x: np.ndarray | None, costs: Costs) -> tuple[str, str]:
    """The geometric rule in words, with the reference's bounds where one value decides it (a
    one-sided compare claim against a baseline, or a trend of one row)."""
    free = _free(x, costs.base is not None)
    F = costs.rows[0].floor
    names = [n for n, f in zip(costs.names[0], free, strict=True) if f]
    generic = (f"{' and '.join(names)} anywhere from 0 bits to the no-recall floor "
               f"{_numbers([cost.floor for cost in costs.rows])} would land "
               + ("all inside or all outside the margin" if c.expect == "equivalent" else
                  "on the same side of the margin"))
    one = len({cost.floor for cost in costs.rows}) == 1 and c.expect != "equivalent"
    if not one or (costs.base is None) == (x is None):
        return f"a seed is vacuous where {generic}", generic
    off, w = c.log_offset, _weights(c, x)
    scale = f" on the log(y + {off:g}) scale" if off else ""
    ref, named = (("the baseline", f"the baseline ({costs.names[1][0]})") if costs.base
                  else (costs.names[0][int(np.argmin(x))],) * 2)
    g = np.array([np.log(v + off) if off else v for v in (0.0, F)])
    k = 1.0 if costs.base else -float(w[~free][0])  # the reference's weight, negated
    t_lo, t_hi = (float(np.exp(v) - off if off else v) for v in (
        (np.minimum(w * g[0], w * g[1])[free].sum() - margin) / k,
        (np.maximum(w * g[0], w * g[1])[free].sum() - margin) / k))
    if c.expect == "less":
        said = f"{ref} above {t_hi:.3g}" + (f" or at most {t_lo:.3g}" if t_lo >= 0 else "")
        how = (f"{named} + {margin:g}{scale} reaches the no-recall floor {F:.3g}" if costs.base
               else f"{' and '.join(names)} at the no-recall floor {F:.3g} would still give a "
               f"slope below {margin:g}{scale}" if (w[free] >= 0).all() else generic)
    else:
        said = (f"{ref} " + (f"below {t_lo:.3g} or " if t_lo > 0 else "")
                + f"at least {t_hi:.3g}")
        how = generic
    return (f"a seed is vacuous where {how}, i.e. {said}: a variant that learned nothing would "
            "land where one that learned it does", f"{how} ({said})")


def of_test(c: Claim, margin: float, pairs: list, arms: Arms, floors: Floors | None
            ) -> Vacuity | None:
    """`decide` for one test of a claim on a probe's test bits per answer, its cells' costs
    from the grid (`floors`); None for any other claim. Raises Unavailable where a cell's
    floor is not known."""
    t = target(c.metric)
    if t is None:
        return None

    def cost(cell: dict[str, Any]) -> NoRecall:
        got = floors(cell).get(t) if floors is not None else None
        if got is None:
            raise Unavailable(f"no no-recall floor of {t} for {label(cell)}: the findings "
                              "compute it from the grid's data")
        return got

    base = None if pairs[0][1] is None else [cost(b) for _, b in pairs]
    names = ([label(r) for r, _ in pairs], None if base is None else [label(b) for _, b in pairs])
    return decide(c, margin, arms, Costs(t, [cost(r) for r, _ in pairs], base, names))


def neutral(c: Claim, margin: float, values: np.ndarray, vac: Vacuity | None
            ) -> tuple[np.ndarray, np.ndarray | None]:
    """The per-seed values each direction's test reads, a vacuous seed on neither side: at the
    margin (against the claim, and against its contrary: a seed at the margin is not beyond
    it for a sign test and adds nothing to a sign-flip mean); for an equivalence's contrary
    ("beyond a margin"), at 0, inside it. The second is None where it is the first."""
    if vac is None or not vac.vacuous.any():
        return values, None
    claim = np.where(vac.vacuous, margin, values)
    return claim, (np.where(vac.vacuous, 0.0, values) if c.expect == "equivalent" else None)


def estimate(c: Claim, margin: float, values: np.ndarray, vac: Vacuity | None,
             alpha: float) -> Estimate:
    """The claim's test on its per-seed values (`stats.estimate` at `alpha`), each vacuous
    seed on neither side (`neutral`): an equivalence's contrary reads them inside its margin."""
    tested, contrary = neutral(c, margin, values, vac)
    est = stats.estimate(tested, c.expect, margin, exact=fixed(c), test=c.test,
                         alpha=alpha)
    if contrary is None:
        return est
    return replace(est, p_opposite=stats.estimate(contrary, c.expect, margin, test=c.test,
                                                  alpha=alpha).p_opposite)


def refused(c: Claim, costs: list[dict[str, NoRecall]]) -> str | None:
    """Why a claim cannot be judged on these cells' corpora: its metric a probe part whose
    no-recall floor is 0, so no bar can say whether it was learned (None: it can)."""
    t = target(c.metric)
    if t is None or not any(t in got and got[t].floor == 0 for got in costs):
        return None
    return (f"metric {c.metric}: the no-recall floor of {t} is 0 (a model without recall pays "
            "nothing there: repeated answers are copied), so nothing is left to learn without "
            "recall and no seed can tell learning from none; claim a target set whose floor is "
            "above 0 (the probe's answers, or its first-asked ones)")
