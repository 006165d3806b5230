"""What a claim's rows cost against its baseline: a pure function of the interleaved measurement
a sweep makes after its trials (cost.csv, written by `bench.measure.cost`, one row per arm and
repetition) and, where an arm's spans are learned, of the runs' own FLOPs (runs.csv). It gives
the cost block findings.md ends with (`block`, between START and END: the same table the
sweep's page and the experiment's README show), the line per comparison `bench.run` closes
with (`lines`), and a cost claim's numbers (`part`, read by `verdicts`), by one rule per kind
(docs/claims.md, Cost claims):

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
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.config import ConfigError
from bench.experiment.claims import (
    COSTS,
    MEASURED,
    PER_SEED_COSTS,
    Claim,
    cells,
    expectation,
    fixed,
)

from . import stats
from .numbers import as_bool
from .samples import Unavailable, label, match, seed_col, values

FILE = "cost.csv"
START, END = "<!-- cost -->", "<!-- /cost -->"
COLUMNS = {  # cost.csv: column -> what it holds (numbers unless listed in TEXT)
    "rows": "the rows arm's grid values (JSON)", "baseline": "the baseline arm's (JSON)",
    "arm": "rows or baseline", "setting": "the arm's setting", "rep": "repetition, from 0",
    "order": "its place in the interleaved sequence", "steps": "steps timed per repetition",
    "step_s": "seconds per training step", "eval_s_per_token": "seconds per token read forward",
    "alone_step_s": "seconds per step timed alone, as the dry run's time table does",
    "flops_kept": COSTS["flops_kept"], "flops_computed": COSTS["flops_computed"],
    "params": COSTS["params"], "peak_mb": COSTS["peak_memory"] + " (MiB)",
    "learned": "whether the arm's spans are learned", "device": "the CPU or GPU",
    "kernels": "torch's CPU kernel level", "precision": "the step's precision",
    "threads": "torch threads", "torch": "torch's version"}
TEXT = ("rows", "baseline", "arm", "setting", "learned", "device", "kernels", "precision",
        "torch")
POSITIVE = ("step_s", "eval_s_per_token", "params", "peak_mb")  # never 0 for a real model
FROM_RUNS = {"flops_kept": "flops_mean", "flops_computed": "flops_max"}  # learned spans
SHOWN = {"step_time": "step time", "eval_time": "eval time/token",
         "flops_kept": "FLOPs kept (mask)", "flops_computed": "FLOPs computed (layer)",
         "params": "params", "peak_memory": "peak memory"}


def read(path: Path) -> pd.DataFrame | None:
    """cost.csv as `part` and `block` read it; None where there is none (not measured yet);
    ConfigError naming the file, line and column for one that cannot be the measurement."""
    if not path.is_file():
        return None
    try:
        df = pd.read_csv(path, dtype={c: str for c in TEXT})
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not a cost.csv ({err})") from None
    if lacking := [c for c in COLUMNS if c not in df]:
        raise ConfigError(f"{path}: no column {', '.join(lacking)} (cost.csv: "
                          "docs/claims.md, Cost claims)")
    if df.empty:
        raise ConfigError(f"{path}: a header alone: cost.csv holds a row per arm and repetition")
    for col in (c for c in COLUMNS if c not in TEXT):
        got = pd.to_numeric(df[col], errors="coerce")
        bad = (got.isna() | ~np.isfinite(got) | (got < 0)) & df[col].notna()
        bad |= (got <= 0) & (col in POSITIVE)
        if col in POSITIVE:
            bad |= df[col].isna()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"{path}: line {i + 2}, column {col}: {df[col].iloc[i]!r} is not "
                              f"{'a positive' if col in POSITIVE else 'a'} number ({COLUMNS[col]})")
        df[col] = got
    for (rows, base), pair in df.groupby(["rows", "baseline"], sort=False):
        reps = [sorted(pair[pair["arm"] == arm]["rep"]) for arm in ("rows", "baseline")]
        if not reps[0] or reps[0] != reps[1]:
            raise ConfigError(f"{path}: {rows} against {base}: the arms' repetitions differ "
                              f"({len(reps[0])} and {len(reps[1])}): interleaved, they pair")
    return df


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


def _arms(pair: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows arm's and the baseline arm's repetitions, in the order of their `rep`."""
    return tuple(pair[pair["arm"] == arm].sort_values("rep").reset_index(drop=True)
                 for arm in ("rows", "baseline"))


def _cells(pair: pd.DataFrame) -> tuple[dict, dict]:
    return json.loads(pair["rows"].iloc[0]), json.loads(pair["baseline"].iloc[0])


def learned(runs: pd.DataFrame, cell: dict) -> bool:
    """Whether the cell's runs learn their spans (their layer said so; cost.csv too)."""
    sub = runs[match(runs, cell)] if "layer.learned_spans" in runs else runs.iloc[:0]
    return bool(len(sub)) and as_bool(sub["layer.learned_spans"].iloc[0])


def ratio(metric: str, pair: pd.DataFrame, runs: pd.DataFrame, seeds: list[Any]) -> Ratio:
    """One cost of a comparison (`pair`: its rows of cost.csv) by its rule (module doc);
    Unavailable where it cannot be computed."""
    rows, base = _arms(pair)
    if metric in MEASURED:
        col = "step_s" if metric == "step_time" else "eval_s_per_token"
        return _ratio(rows[col] / base[col], "measured")
    if metric in PER_SEED_COSTS and any(as_bool(a["learned"].iloc[0]) for a in (rows, base)):
        return _per_seed(metric, _cells(pair), runs, seeds)
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
        r, b = _cells(pair)
        if all(r.get(k) == v for k, v in rows.items()) and all(
                b.get(k) == v for k, v in base.items()):
            return pair
    raise Unavailable(f"{FILE} measured no comparison of {label(rows)} against {label(base)}")


def machine(cost: pd.DataFrame) -> str:
    """Where and how the measurement ran, in words."""
    first = cost.iloc[0]
    steps, reps, threads = int(cost["steps"].median()), cost["rep"].nunique(), int(
        first["threads"])
    return (f"{first['device']}, {first['kernels']} kernels, {first['precision']}, "
            f"{threads} torch thread{'' if threads == 1 else 's'} (torch {first['torch']}); "
            "the two arms' training steps and forward readings alternated in one process, "
            f"{reps} repetitions of {steps} step{'' if steps == 1 else 's'} each, the order "
            "reversed every repetition")


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


def table(cost: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """A row per comparison: its arms, each cost's ratio as `Ratio.shown` says it (where a
    cost cannot be computed, why), each arm's step in ms, and the dry run's method (each arm
    timed alone) beside the interleaved step ratio."""
    col = seed_col(runs)
    seeds = sorted(set(runs[col])) if col else []
    out = []
    for _, pair in cost.groupby(["rows", "baseline"], sort=False):
        rows, base = _arms(pair)
        row = {"rows": label(_cells(pair)[0]), "baseline": label(_cells(pair)[1])}
        for metric, head in SHOWN.items():
            try:
                row[head] = ratio(metric, pair, runs, seeds).shown()
            except Unavailable as err:
                row[head] = f"- ({err})"
        row["step ms (rows, baseline)"] = (f"{1e3 * rows['step_s'].median():.3g}, "
                                           f"{1e3 * base['step_s'].median():.3g}")
        row["dry run's method"] = _alone(ratio("step_time", pair, runs, seeds), rows, base)
        out.append(row)
    return pd.DataFrame(out)


def _alone(step: Ratio, rows: pd.DataFrame, base: pd.DataFrame) -> str:
    """The step ratio of the arms each timed alone (as the dry run's time table times them),
    and whether it lies within the interleaved range."""
    alone = rows["alone_step_s"].iloc[0] / base["alone_step_s"].iloc[0]
    if not np.isfinite(alone):
        return "-"
    inside = step.low <= alone <= step.high
    return f"{alone:.3g}x ({'within' if inside else 'outside'} the interleaved range)"


NOTE = (
    "Ratios are rows / baseline (below 1: the rows cost less). Step time and eval time/token: "
    "the median of the per-repetition ratios and their range, the arms alternated step by step "
    "on this machine, alone (never the trials' own tokens/s, which ran beside each other): "
    "they hold for this machine. FLOPs kept: #FLOPS per token (attention and feed-forward, "
    "docs/variants.md) at the distances each head's mask keeps; computed: at the window the "
    "layer computes, what it executes (a dilated mask keeps half and computes all). Learned "
    "spans: the runs' own flops_mean and flops_max, per seed (their median and range); "
    "times and memory of a learned span are taken at its initial window, the full span S: "
    "an upper bound. Peak memory: a training step's tensors at their peak (weights, gradients, "
    "optimizer state, the activations saved for backward), not the process's RSS. The dry "
    "run's method: each arm timed alone, one after the other (`bench.sweep.estimate`): "
    "outside the interleaved range, the machine's load changed between the two, which "
    "interleaving cancels; the claims read the interleaved ratios.")


def markdown(cost: pd.DataFrame, runs: pd.DataFrame) -> str:
    """The cost table as Markdown (`table`), under the line that says where it was measured."""
    md = table(cost, runs).map(lambda v: v.replace("|", "\\|")).to_markdown(
        index=False, disable_numparse=True)
    return f"Measured after the trials, alone on the machine: {machine(cost)}.\n\n{md}"


def block(cost: pd.DataFrame | None, runs: pd.DataFrame) -> str:
    """findings.md's cost block, between START and END ('' without a measurement)."""
    if cost is None:
        return ""
    return "\n".join([START, "## Cost, rows against their baseline", "", markdown(cost, runs),
                      "", NOTE, END])


def lines(cost: pd.DataFrame | None, runs: pd.DataFrame) -> list[str]:
    """A line per comparison: 'window vs fixed: step time 0.93x (0.91-0.95, interleaved, CPU),
    FLOPs kept 0.25x, computed 0.31x, params 1x, peak memory 0.97x'."""
    if cost is None:
        return []
    out = []
    for t in table(cost, runs).to_dict("records"):
        step = t[SHOWN["step_time"]].replace(")", f", interleaved, {cost['device'].iloc[0]})",
                                             1)
        out.append(f"{t['rows']} vs {t['baseline']}: step time {step}, FLOPs kept "
                   f"{t[SHOWN['flops_kept']]}, computed {t[SHOWN['flops_computed']]}, params "
                   f"{t['params']}, peak memory {t['peak memory']}")
    return out


def foresee(claims: list[Claim], axes: dict[str, list[Any]], cost: pd.DataFrame) -> list[str]:
    """What each cost claim would be on this machine, from a measurement made now (the dry
    run's, before any trial): a line per part, with the rule's numbers and, for a step-time
    claim, whether the arms each timed alone (the time table's method) agree with its bound."""
    out = []
    for c in (c for c in claims if c.type == "cost"):
        for name, rows, base in cells(c, axes):
            head = f"cost claim {c.id}" + (f" [{name}]" if name else "") + f" ({expectation(c)})"
            try:
                pair = comparison(cost, rows, base)
                arms = _arms(pair)
                if c.metric in PER_SEED_COSTS and any(as_bool(a["learned"].iloc[0])
                                                      for a in arms):
                    out.append(f"{head}: per seed, from the runs (an arm's spans are learned)")
                    continue
                got = part(c, (rows, base), cost, pd.DataFrame(), [])
            except Unavailable as err:
                out.append(f"{head}: {err}")
                continue
            word = "reproduced" if got["p"] == 0 else (
                "contradicted" if got["p_opposite"] == 0 else "inconclusive")
            alone = arms[0]["alone_step_s"].iloc[0] / arms[1]["alone_step_s"].iloc[0]
            said = "" if c.metric != "step_time" or not np.isfinite(alone) else (
                f"; each arm timed alone (the time table): {alone:.3g}x, "
                f"{'within' if stats.holds(alone, c.expect, float(c.margin)) else 'beyond'} "
                "the bound")
            out.append(f"{head}: here {word}: {got['reason']}{said}")
    return out


def closing(folder: Path) -> list[str]:
    """`lines` of a run's folder (its cost.csv and runs.csv): what `bench.run` closes with; []
    where either is missing."""
    if not (folder / "runs.csv").is_file():
        return []
    return lines(read(folder / FILE), pd.read_csv(folder / "runs.csv"))


def without_block(text: str) -> str:
    """A findings.md's text without its cost block (what the table checks compare)."""
    head, _, rest = text.partition(START)
    return head + rest.partition(END)[2] if rest else text
