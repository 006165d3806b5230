"""Claims as data: the findings a grid file declares, and their check against the grid before
anything runs; `bench.findings.decision.verdicts` computes them from the finished runs (never by
hand).

A claim names its rows by grid-key values, optionally a baseline (the same rows with some
values changed), the metric and what is expected of it:

- type `compare` (default): per seed, the metric of `rows` minus that of `baseline` (or the
  metric itself without a baseline); one test per value of each `at_each` key.
- type `trend`: per seed, the least-squares slope of that value against the `along` key
  (per doubling with `scale: log2`, the default; per unit with `linear`); the seeds' slopes
  are the sample, so the test is paired by seed just like a difference.
- type `cost`: what the rows cost against the baseline, as a ratio rows / baseline of one of
  `COSTS` (`margin`: the bound on that ratio, e.g. 0.8 for "at least 20% fewer FLOPs per
  token"), read from the interleaved measurement the sweep makes after its trials (cost.csv,
  `bench.findings.decision.costs`). A measured time is decided from its repetitions, a cost the
  configuration fixes by construction (`fixed`: neither spends alpha), and FLOPs, which learned
  spans make data-dependent, per seed like any claim where an arm's spans are learned.

`expect: less` / `greater` tests the claim's summary < margin / > margin one-sided (margin 0 by
default); `expect: equivalent` is TOST: within +-margin. `margin: planted` is the farthest
distance the corpus planted (a claim about planted structure: inconclusive on real text).
`test` picks what the claim is about and its exact test (`bench.findings.statistics.stats`): `sign`
(default), the median (the typical seed), valid for every claim; `sign-flip`, an effect (its
statistic the mean), valid only where the null is symmetric: a difference from a baseline, or
a slope (of differences, or of one row along evenly spaced values), against margin 0.
`log_offset: c` analyses log(metric + c) per run (natural log), for a metric whose seeds spread
over orders of magnitude (bits per answer near a floor of 0): a difference is then a log ratio,
and the margin is in log units. `floor` says what a span statistic that calls heads long or
short is measured above (SPAN_SHAPE: `R`, the ramp every learned span has at least, or 0).

A claim never reads the split that chose its run's checkpoint: training keeps the checkpoint
with the best dev bpc, so claims score the test split (final_test_bpc, test_probe_bpc.<probe>,
gap_to_floor) and a dev-split metric is refused.
"""

import re
from collections.abc import Callable, Iterator
from itertools import product
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, TypeAdapter, ValidationError, field_validator, model_validator

from bench.config import Strict
from bench.metrics import FINAL_RENAMED, FINAL_SAME

STATISTIC: dict[str, str] = {"sign-flip": "mean", "sign": "median"}  # what `effect` is, per test

MIN_SEEDS = 3  # paired seeds a test needs before its verdict counts
# the report reads a final_<name> summary back under <name> (FINAL_RENAMED)
FINAL = ("final_dev_bpc", "final_test_bpc", *FINAL_SAME, *FINAL_RENAMED)
EXACT = ("params", "params_non_embedding", "flops_full")  # fixed by the config: no seed noise
# type cost: what a ratio rows / baseline of the interleaved measurement (cost.csv) is about
COSTS = {
    "step_time": "training step time, measured interleaved (median over repetitions)",
    "eval_time": "evaluation time per token, measured interleaved (median over repetitions)",
    "flops_kept": "#FLOPS per token at the distances each head's mask keeps",
    "flops_computed": "#FLOPS per token at the window the layer computes (what it executes)",
    "params": "parameters",
    "peak_memory": "a training step's tensors at their peak: weights, gradients, optimizer "
                   "state and the activations saved for backward",
}
MEASURED = ("step_time", "eval_time")  # decided from the repetitions' spread, for this machine
PER_SEED_COSTS = ("flops_kept", "flops_computed")  # learned spans: per seed, from runs.csv
# a probe's metrics on its own target symbols (`rest`: every other symbol): probe_bpc.<probe>
# (dev split), test_probe_bpc.<probe> (test split), probe_floor.<probe> (the lowest reachable),
# probe_gap.<probe> / test_probe_gap.<probe> (bpc minus floor)
PROBE_METRIC = re.compile(r"^(test_)?probe_(bpc|floor|gap)\.([A-Za-z0-9_]+)$")
# scored on the dev split, which chose the checkpoint: metric -> what to claim instead
SELECTED = {"final_dev_bpc": "final_test_bpc", "probe_bpc": "test_probe_bpc",
            "probe_gap": "test_probe_gap"}
DERIVED = {  # metric: what it is; computed per run by `derive`
    "gap_to_floor": "final_test_bpc - floor_bpc: bits above the corpus's lowest reachable bpc",
    "span_fraction": "mean_span / model.span: the learned span as a share of the limit S",
    "max_head_span": "the longest head's span (chars), from result.json's head_spans",
    "head_span_spread": "longest head span / median head span, from head_spans",
    "long_head_fraction": "share of heads whose span is at least half the longest head's",
    "layer_span_ratio": "the first layer's mean head span / the last layer's, from head_spans",
    "covering_head_fraction": "share of heads whose span reaches the farthest planted distance "
                              "(dataset.planted), from head_spans",
}
METRICS = (*FINAL, *DERIVED)
HEAD_SPAN_METRICS = ("max_head_span", "head_span_spread", "long_head_fraction",
                     "layer_span_ratio", "covering_head_fraction")
# span statistics that say "long" or "short": a claim on one names the floor its spans are
# measured above (`floor`), since every learned span is at least the ramp R; with `floor: R`
# they read each head's span above R (z = span - R)
SPAN_SHAPE = ("head_span_spread", "long_head_fraction", "layer_span_ratio")


class Claim(Strict):
    """One finding a grid tests; see the module doc for the statistics."""

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    text: str
    type: Literal["compare", "trend", "cost"] = "compare"
    rows: dict[str, Any] = Field(min_length=1)  # grid key -> value: the rows the claim is about
    baseline: dict[str, Any] | None = None  # values that turn `rows` into the baseline rows
    at_each: list[str] = []  # grid keys: one test per value; the claim must hold at every one
    along: str | None = None  # trend: the grid key on the x axis
    scale: Literal["log2", "linear"] = "log2"  # trend: slope per doubling, or per unit
    metric: str
    expect: Literal["less", "greater", "equivalent"]
    margin: float | Literal["planted"] = 0.0  # less / greater: the bound the mean is tested
    # against; equivalent: +-margin; planted: the corpus's farthest planted distance
    test: Literal["sign", "sign-flip"] = "sign"  # median or mean (bench.findings.statistics.stats)
    log_offset: float | None = Field(None, gt=0)  # analyse log(metric + log_offset)
    # SPAN_SHAPE metrics: each head's span measured above the ramp R (its floor: what the span
    # learned, z), or from 0 (the raw span, which R can fix by construction)
    floor: Literal["R", 0] | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _named(cls, data: Any, handler: Callable) -> "Claim":
        """Errors inside a claim name it by its id."""
        cid = data.get("id", "?") if isinstance(data, dict) else "?"
        try:
            claim = handler(data)
            claim._consistent()
        except ValidationError as err:
            raise ValueError(f"claim {cid!r}: " + "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'claim'}: {e['msg']}" for e in err.errors())
            ) from None
        except ValueError as err:
            raise ValueError(f"claim {cid!r}: {err}") from None
        return claim

    @field_validator("test", mode="before")
    @classmethod
    def _exact(cls, v: Any) -> Any:
        if v == "t":
            raise ValueError("test t is not offered: a t-test's level does not hold for skewed "
                             "per-seed values at a few seeds; use sign (the median, exact, for "
                             "every claim, counts included) or sign-flip (the mean, exact, for a "
                             "difference or slope against margin 0)")
        return v

    @field_validator("at_each", mode="before")
    @classmethod
    def _listed(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    def _consistent(self) -> None:
        """Cross-field rules; raises ValueError."""
        if (self.type == "trend") != (self.along is not None):
            raise ValueError("`along` (the grid key on the x axis) is required by type trend "
                             "and only allowed there")
        if self.type == "cost":
            self._cost()
        if self.expect == "equivalent" and (self.margin == "planted" or self.margin <= 0):
            raise ValueError("expect: equivalent needs margin > 0 (the equivalence bound)")
        if self.test == "sign-flip" and (self.margin != 0 or self.expect == "equivalent"):
            raise ValueError(f"test sign-flip with margin {self.margin}: its null (rows and "
                             "baseline exchangeable, values symmetric about 0) holds only for a "
                             "difference against margin 0; a margin, non-inferiority or "
                             "equivalence claim needs test: sign (the median)")
        if self.test == "sign-flip" and self.baseline is None and self.type == "compare":
            raise ValueError("test sign-flip without a baseline: a value against a margin has no "
                             "symmetric null; use test: sign (the median), or give a baseline")
        if self.floor is not None and self.metric not in SPAN_SHAPE:
            raise ValueError(f"floor is for the span statistics {', '.join(SPAN_SHAPE)}, not "
                             f"{self.metric}")
        if self.baseline is not None and all(self.rows.get(k) == v
                                             for k, v in self.baseline.items()):
            raise ValueError("baseline selects the same rows as `rows`")

    def _cost(self) -> None:
        """A cost claim's rules: a ratio of COSTS against a baseline, by a margin > 0."""
        if self.metric not in COSTS:
            raise ValueError(f"type cost: metric {self.metric!r} is not a cost; costs: "
                             f"{', '.join(COSTS)}")
        if self.baseline is None or self.expect == "equivalent" or self.margin == "planted" \
                or not self.margin > 0:
            raise ValueError("type cost: needs a baseline, expect less or greater and a margin "
                             "> 0, the bound on the ratio rows / baseline (0.8: at least 20% "
                             "less)")
        if self.test != "sign" or self.log_offset is not None:
            raise ValueError("type cost: a ratio is decided by its own rule (docs/claims.md, "
                             "Cost claims): no test or log_offset")


CLAIMS = TypeAdapter(list[Claim])


def parse(raw: Any) -> list[Claim]:
    """A grid file's `claims:` list, validated (raises pydantic's ValidationError)."""
    return CLAIMS.validate_python(raw or [])


def num(v: object) -> str:
    """A grid value as written: 3.0 -> '3', anything else as str."""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


# ---- checking a claim against its grid (the grid schema calls this)

def cells(claim: Claim, axes: dict[str, list[Any]]) -> Iterator[tuple[str, dict, dict | None]]:
    """(test label, rows cell, baseline cell) per at_each (and along) combination; a cell holds
    the claim's value of every key it pins."""
    free = [*claim.at_each, *([claim.along] if claim.along else [])]
    for combo in product(*(axes[k] for k in free)):
        at = dict(zip(free, combo, strict=True))
        rows = {**claim.rows, **at}
        base = None if claim.baseline is None else {**rows, **claim.baseline}
        label = ", ".join(f"{k.rsplit('.', 1)[-1]}={num(v)}" for k, v in at.items()
                          if k != claim.along)
        yield label, rows, base


def check(claims: list[Claim], axes: dict[str, list[Any]],
          excluded: Callable[[dict[str, Any]], bool]) -> None:
    """Raise ValueError naming the claim when it uses a key, value or metric the grid does not
    have, leaves a varied grid key unpinned, or needs a trial the grid excludes."""
    seen: set[str] = set()
    for i, c in enumerate(claims):
        where = f"claims.{i} ({c.id})"
        if c.id in seen:
            raise ValueError(f"{where}: duplicate claim id")
        seen.add(c.id)
        if c.type != "cost" and c.metric not in METRICS and not PROBE_METRIC.match(c.metric):
            raise ValueError(f"{where}: unknown metric {c.metric!r}; known: {', '.join(METRICS)}"
                             ", and a probe's test_probe_bpc.<probe>, probe_floor.<probe>, "
                             "test_probe_gap.<probe>")
        if instead := selected(c.metric):
            raise ValueError(f"{where}: metric {c.metric} is scored on the dev split, which "
                             f"chose each run's checkpoint (its best dev bpc): claim {instead}")
        named = {"rows": list(c.rows), "baseline": list(c.baseline or {}),
                 "at_each": c.at_each, "along": [c.along] if c.along else []}
        for field, keys in named.items():
            for key in keys:
                if key not in axes:
                    raise ValueError(f"{where}: {field}: {key!r} is not a grid key; grid keys: "
                                     f"{', '.join(axes)}")
        for field, values in (("rows", c.rows), ("baseline", c.baseline or {})):
            for key, value in values.items():
                if value not in axes[key]:
                    raise ValueError(f"{where}: {field}: {key}={value!r} is not in the grid "
                                     f"({key}: {axes[key]})")
        free = [*c.at_each, *named["along"]]
        if clash := (set(free) & (set(c.rows) | set(c.baseline or {}))) or (
                len(free) != len(set(free))):
            raise ValueError(f"{where}: {sorted(clash) or free} named twice (at_each / along "
                             "keys take every value, rows and baseline pin one)")
        if loose := [k for k, v in axes.items() if len(v) > 1 and k not in c.rows
                     and k not in free]:
            raise ValueError(f"{where}: the grid varies {', '.join(loose)}: pin it in `rows` "
                             "or test at each value (`at_each`)")
        if c.along and (len(axes[c.along]) < 2 or c.scale == "log2" and not all(
                isinstance(v, int | float) and v > 0 for v in axes[c.along])):
            raise ValueError(f"{where}: along: {c.along} needs at least 2 values, positive "
                             "numbers for scale log2")
        if c.along and c.test == "sign-flip" and c.baseline is None and not _even(
                axes[c.along], c.scale):
            raise ValueError(f"{where}: sign-flip on the trend of one row needs {c.along} "
                             f"evenly spaced on its {c.scale} scale (then reversing the values "
                             "negates the slope, which makes it symmetric under the null); "
                             "use test: sign (the median), or give a baseline")
        for _, *pair in cells(c, axes):
            for cell in filter(None, pair):
                full = {k: cell.get(k, v[0]) for k, v in axes.items()}
                if excluded(full):
                    raise ValueError(f"{where}: needs the trial {full}, which the grid's "
                                     "`exclude` drops")


def fixed(c: Claim) -> bool:
    """Whether a claim's values cannot vary by seed, so that it is decided without spending
    alpha: a metric the config fixes (EXACT), or a cost read from the measurement (a time, by its
    repetitions; parameters and memory, by construction). FLOPs keep a per-seed claim's share
    of alpha, since learned spans make them data-dependent; a fixed mask's are decided by
    construction all the same, spending none of it."""
    return c.metric not in PER_SEED_COSTS if c.type == "cost" else c.metric in EXACT


def _even(values: list[Any], scale: str) -> bool:
    """Whether a trend's x values are evenly spaced on its scale (log2: per doubling)."""
    x = np.sort(np.asarray(values, dtype=float))
    x = np.log2(x) if scale == "log2" else x
    return bool(np.allclose(np.diff(x), x[1] - x[0]))


def selected(metric: str) -> str | None:
    """The test-split metric to claim instead of a dev-split one (None: not a dev score)."""
    head, _, probe = metric.partition(".")
    if head not in SELECTED:
        return None
    return SELECTED[head] + (f".{probe}" if probe else "")


def expectation(c: Claim) -> str:
    """What a claim's test rejects for it, in words: "an effect against none (exchangeable):
    mean difference < 0, one-sided", "median slope within ±0.01 (two one-sided tests)"."""
    if c.type == "cost":
        side = "<" if c.expect == "less" else ">"
        return f"ratio of {c.metric} {side} {c.margin:g} (rows / baseline)"
    what = STATISTIC[c.test] + " " + ("slope" if c.type == "trend" else
                                  "difference" if c.baseline else "value")
    what += f" of log(y + {c.log_offset:g})" if c.log_offset else ""
    margin = c.margin if c.margin == "planted" else f"{c.margin:g}"
    if c.expect == "equivalent":
        return f"{what} within ±{margin} (two one-sided tests)"
    said = f"{what} {'<' if c.expect == 'less' else '>'} {margin}, one-sided"
    return f"an effect against none (exchangeable), {said}" if c.test == "sign-flip" else said


def describe(claims: list[Claim]) -> pd.DataFrame:
    """One row per claim: its id, the rows it compares, metric, expectation and text."""
    def cell(values: dict) -> str:
        return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in values.items())

    out = []
    for c in claims:
        rows = cell(c.rows) + (f" vs {cell(c.baseline)}" if c.baseline else "")
        rows += "".join(f" at each {k.rsplit('.', 1)[-1]}" for k in c.at_each)
        rows += f" along {c.along.rsplit('.', 1)[-1]} ({c.scale})" if c.along else ""
        out.append({"claim": c.id, "rows": rows, "metric": c.metric, "expect": expectation(c),
                    "text": c.text})
    return pd.DataFrame(out)
