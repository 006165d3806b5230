"""What a claim's rows cost against its baseline, shown: the cost block findings.md ends with
(`block`, between START and END: the same table the sweep's page and the experiment's README
show), the line per comparison `bench.run` closes with (`lines`) and what each cost claim would
be on this machine from the dry run's measurement (`foresee`); every ratio by its rule
(`bench.findings.decision.costs`), from cost.csv and runs.csv alone."""

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.experiment.claims import PER_SEED_COSTS, Claim, cells, expectation
from bench.findings.decision.costs import Ratio, arms, comparison, part, ratio
from bench.findings.decision.costs import cells as arm_cells
from bench.findings.reading.measurement import FILE, read
from bench.findings.reading.samples import Unavailable, as_bool, label, match, seed_col
from bench.findings.statistics import stats

START, END = "<!-- cost -->", "<!-- /cost -->"
SHOWN = {"step_time": "step time", "eval_time": "eval time/token",
         "flops_kept": "FLOPs kept (mask)", "flops_computed": "FLOPs computed (layer)",
         "params": "params", "peak_memory": "peak memory"}


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


def table(cost: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """A row per comparison: its arms, each cost's ratio as `Ratio.shown` says it (where a
    cost cannot be computed, why; a per-seed cost over the seeds both arms ran: a sweep's
    looks may stop one claim's cells before another's), each arm's step in ms, and the dry
    run's method (each arm timed alone) beside the interleaved step ratio."""
    col = seed_col(runs)
    out = []
    for _, pair in cost.groupby(["rows", "baseline"], sort=False):
        rows, base = arms(pair)
        seeds = sorted(set.intersection(*(set(runs.loc[match(runs, c), col])
                                          for c in arm_cells(pair)))) if col else []
        row = {"rows": label(arm_cells(pair)[0]), "baseline": label(arm_cells(pair)[1])}
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
                both = arms(pair)
                if c.metric in PER_SEED_COSTS and any(as_bool(a["learned"].iloc[0])
                                                      for a in both):
                    out.append(f"{head}: per seed, from the runs (an arm's spans are learned)")
                    continue
                got = part(c, (rows, base), cost, pd.DataFrame(), [])
            except Unavailable as err:
                out.append(f"{head}: {err}")
                continue
            word = "reproduced" if got["p"] == 0 else (
                "contradicted" if got["p_opposite"] == 0 else "inconclusive")
            alone = both[0]["alone_step_s"].iloc[0] / both[1]["alone_step_s"].iloc[0]
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
