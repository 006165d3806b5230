"""What a claim's rows cost against its baseline: a pure function of the interleaved measurement
a sweep makes after its trials (cost.csv, written by `bench.measure.cost`, one row per arm and
repetition) and, where an arm's spans are learned, of the runs' own FLOPs (runs.csv). It gives a
cost claim's numbers (`part`, read by `verdicts`) and each cost's ratio (`ratio`, which the cost
table shows: `bench.findings.presentation.costs`), by one rule per kind (docs/claims.md, Cost
claims):

- a measured time (`claims.MEASURED`): the ratio rows / baseline of each repetition (the two
  arms' steps alternated in one process); the claim holds for this machine where every
  repetition's ratio is within the bound, and fails where none is;
- a cost the configuration fixes (parameters, peak memory, a fixed mask's FLOPs): one ratio,
  decided by construction;
- FLOPs where an arm's spans are learned: each seed's ratio (flops_mean: kept, flops_max:
  computed, of its runs), tested per seed like any claim.
Nothing here measures: `bench.report --runs` and `bench.verify` regenerate all of it from the
two files.
"""

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from bench.experiment.claims import MEASURED, PER_SEED_COSTS, Claim, fixed
from bench.findings.reading.measurement import FILE
from bench.findings.reading.samples import Unavailable, as_bool, label, match, values
from bench.findings.statistics import stats

FROM_RUNS = {"flops_kept": "flops_mean", "flops_computed": "flops_max"}  # learned spans


@dataclass(frozen=True)
class Ratio:
    """A cost of the rows over the baseline's: its median, range and count, and how it was
    decided (`basis`: measured, by construction, per seed); `values`, what the range is of."""

    median: float
    low: float
    high: float
    values: np.ndarray
    basis: str

    def shown(self) -> str:
        """'0.93x (0.91-0.95)', '0.25x', '0.80x (0.78-0.82, 8 seeds)'."""
        if self.basis == "by construction":
            return f"{self.median:.3g}x"
        seeds = f", {len(self.values)} seeds" if self.basis == "per seed" else ""
        return f"{self.median:.3g}x ({self.low:.3g}-{self.high:.3g}{seeds})"


def _ratio(values: np.ndarray, basis: str) -> Ratio:
    v = np.asarray(values, dtype=float)
    return Ratio(float(np.median(v)), float(v.min()), float(v.max()), v, basis)


def arms(pair: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows arm's and the baseline arm's repetitions, in the order of their `rep`."""
    return tuple(pair[pair["arm"] == arm].sort_values("rep").reset_index(drop=True)
                 for arm in ("rows", "baseline"))


def cells(pair: pd.DataFrame) -> tuple[dict, dict]:
    return json.loads(pair["rows"].iloc[0]), json.loads(pair["baseline"].iloc[0])


def learned(runs: pd.DataFrame, cell: dict) -> bool:
    """Whether the cell's runs learn their spans (their layer said so; cost.csv too)."""
    sub = runs[match(runs, cell)] if "layer.learned_spans" in runs else runs.iloc[:0]
    return bool(len(sub)) and as_bool(sub["layer.learned_spans"].iloc[0])


def ratio(metric: str, pair: pd.DataFrame, runs: pd.DataFrame, seeds: list[Any]) -> Ratio:
    """One cost of a comparison (`pair`: its rows of cost.csv) by its rule (module doc);
    Unavailable where it cannot be computed."""
    rows, base = arms(pair)
    if metric in MEASURED:
        col = "step_s" if metric == "step_time" else "eval_s_per_token"
        return _ratio(rows[col] / base[col], "measured")
    if metric in PER_SEED_COSTS and any(as_bool(a["learned"].iloc[0]) for a in (rows, base)):
        return _per_seed(metric, cells(pair), runs, seeds)
    col = {"peak_memory": "peak_mb"}.get(metric, metric)
    return _ratio(np.array([rows[col].iloc[0] / base[col].iloc[0]]), "by construction")


def _per_seed(metric: str, cells: tuple[dict, dict], runs: pd.DataFrame, seeds: list[Any]
              ) -> Ratio:
    """Learned spans' FLOPs: each seed's ratio of the runs' own (FROM_RUNS)."""
    per = [values(runs, pd.DataFrame(), cell, FROM_RUNS[metric], seeds) for cell in cells]
    return _ratio((per[0] / per[1]).to_numpy(), "per seed")


def comparison(cost: pd.DataFrame, rows: dict, base: dict) -> pd.DataFrame:
    """The measured comparison whose arms hold the cells' values; Unavailable where none does."""
    for _, pair in cost.groupby(["rows", "baseline"], sort=False):
        r, b = cells(pair)
        if all(r.get(k) == v for k, v in rows.items()) and all(
                b.get(k) == v for k, v in base.items()):
            return pair
    raise Unavailable(f"{FILE} measured no comparison of {label(rows)} against {label(base)}")


def part(c: Claim, cells: tuple[dict, dict], cost: pd.DataFrame | None, runs: pd.DataFrame,
         seeds: list[Any], alpha: float = stats.ALPHA) -> dict:
    """A cost claim's part at these seeds: effect (the median ratio), its range or interval,
    p both ways (0 or 1 where measured or by construction: no alpha spent) and the reason in
    words; Unavailable where the measurement is not there (learned spans' FLOPs need only the
    runs)."""
    if c.metric in PER_SEED_COSTS and any(learned(runs, cell) for cell in cells):
        r = _per_seed(c.metric, cells, runs, seeds)
    elif cost is None:
        raise Unavailable(f"{FILE}: not measured (a sweep measures it after its trials; "
                          "python -m bench.cost FOLDER measures a finished one)")
    else:
        r = ratio(c.metric, comparison(cost, *cells), runs, seeds)
    margin, side = float(c.margin), "<" if c.expect == "less" else ">"
    if r.basis == "per seed":
        est = stats.estimate(r.values, c.expect, margin, test="sign", alpha=alpha)
        return {"effect": est.effect, "ci_low": est.ci_low, "ci_high": est.ci_high,
                "p": est.p, "p_opposite": est.p_opposite, "n": est.n, "sd": est.sd,
                "share": est.share, "test": "sign, per seed",
                "reason": f"per seed: learned spans ({FROM_RUNS[c.metric]} of the runs)"}
    every = bool(np.all(stats.holds(r.values, c.expect, margin)))
    none = not np.any(stats.holds(r.values, c.expect, margin)) and not np.any(r.values == margin)
    if r.basis == "measured":
        why = (f"measured interleaved on {cost['device'].iloc[0]} "
               f"({cost['precision'].iloc[0]}): {r.shown()} over {len(r.values)} "
               f"repetitions, {'every' if every else 'no' if none else 'not every'} "
               f"repetition's ratio {side} {margin:g}: for this machine")
    else:
        why = (f"decided by construction: {r.shown()}, fixed by the configuration (no alpha "
               "spent)")
    measured = r.basis == "measured"
    return {"effect": r.median, "ci_low": r.low, "ci_high": r.high, "p": 0.0 if every else 1.0,
            "p_opposite": 0.0 if none else 1.0, "n": len(r.values), "sd": 0.0,
            "share": float(np.mean(stats.holds(r.values, c.expect, margin))), "reason": why,
            "settled": True, "test": r.basis,
            "about": "every repetition's ratio" if measured else "the configured ratio",
            "null": "a repetition's ratio on the bound or beyond" if measured else
                    "the ratio on the bound or beyond",
            "rule": f"{'every' if measured else 'the'} ratio {side} {margin:g}"}


def reads_measurement(c: Claim, runs: pd.DataFrame) -> bool:
    """Whether a claim is decided from cost.csv alone, needing no seeds: a cost claim other
    than FLOPs of an arm whose spans are learned (those are per seed)."""
    if c.type != "cost":
        return False
    return fixed(c) or not any(learned(runs, cell)
                               for cell in (c.rows, {**c.rows, **(c.baseline or {})}))
