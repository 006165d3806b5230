"""The dry-run plan of a sweep: each trial's size and analytic cost, the claims its report will
compute; and the order that runs the most expensive trials first."""

import json

import pandas as pd

from bench.experiment.claims import describe
from bench.experiment.grid import Grid, plan_of, seed_list
from bench.experiment.option_tables import markdown, trial_options
from bench.findings.decision.evidence import evidence_of, seed_range
from bench.findings.statistics.sequential import REPS
from bench.model import create_model
from bench.model.cost import cost, executed_flops
from bench.provenance import cpu_name
from bench.sweep import estimate, sizing
from bench.trial import Trial

SCORE_PASSES = 16  # elementwise kernels over each attention score (band, mask, softmax, mixing)


def plan_table(trials: list[Trial]) -> pd.DataFrame:
    """One row per trial: its grid values, params, analytic #FLOPS per token at the widest
    window its layers can compute (`Attention.widest`: S where spans are learned, a mask's own
    window; what its runs record as `flops_full`), tokens, cost (tokens x FLOPs), the
    schedule's work estimate and the options it ignores."""
    models: dict[str, dict] = {}
    rows = []
    for t in trials:
        key = json.dumps([t.cfg.model.model_dump(mode="json"), t.vocab], sort_keys=True)
        if key not in models:
            model = create_model(t.cfg.model, t.vocab)
            scores = sum(b.attn.describe()["h"] * b.attn.window for b in model.blocks)
            models[key] = {**cost(model),
                           "work": executed_flops(model, "full") + SCORE_PASSES * scores}
        c, tr = models[key], t.cfg.train
        tokens = tr.steps * tr.batch_size * tr.block
        rows.append({"trial": t.hash[:10] + ("*" if t.provisional else ""), **t.values,
                     "seed": t.seed, "params": c["params"], "flops/token": c["flops_full"],
                     "tokens": tokens,
                     "cost": float(tokens * c["flops_full"]), "work": float(tokens * c["work"]),
                     "ignored": ", ".join(t.ignored) or "-"})
    return pd.DataFrame(rows)


def costliest_first(trials: list[Trial]) -> list[Trial]:
    """The trials by estimated work, the most expensive first, so parallel workers finish
    together (ties keep the grid's order). Work counts what a step executes (FLOPs) and what
    FLOPs do not: the elementwise passes over every head's attention scores, which make a
    layer of 32 narrow heads several times slower than one of 2 wide heads at equal FLOPs."""
    if not trials:
        return []
    costs = plan_table(trials)["work"].tolist()
    return [t for _, t in sorted(zip(costs, trials, strict=True), key=lambda p: -p[0])]


def print_plan(trials: list[Trial], grid: Grid, levels: pd.DataFrame | None = None,
               rates: pd.DataFrame | None = None) -> None:
    """The trial table and cost (hashes marked provisional where the corpus is not there yet),
    the layer options the trials run with, then the claims the sweep's report will compute,
    each look's exact rules (`feasible.by_look`), the design's exact rates (`feasible.rates`),
    and whether the seeds are confirmatory."""
    df = plan_table(trials).drop(columns="work")
    if (df["ignored"] == "-").all():
        df = df.drop(columns="ignored")
    print(df.to_markdown(index=False, floatfmt=".3g", intfmt=","))
    print(f"\n{len(df)} trials, {df.tokens.sum():,} training tokens; estimated cost "
          f"(trials x tokens x analytic FLOPs/token at each policy's widest window): "
          f"{df.cost.sum():.3g} "
          "multiply-adds forward (about 3x that with the backward pass)")
    if any(t.provisional for t in trials):
        print("trial hashes marked * are provisional: their corpus is not downloaded yet, and "
              "the run identifies it by its bytes")
    if trials:
        print("\nThe layer options the trials run with, by variant (defaults included; -: the "
              "variant does not take it), as the classes that declare them type and explain "
              "them (python -m bench.options):\n")
        print(markdown(trial_options([t.cfg for t in trials])))
    if grid.claims:
        print(f"\n{len(grid.claims)} claims, computed by the report from the finished runs:\n")
        print(describe(grid.claims).to_markdown(index=False))
    if grid.claims and levels is not None:
        print("\nEach claim's looks: its exact rule each way (seeds on the claimed side, or the "
              "p its test must reach), the level it stands for, and the error spent by then:\n")
        print(levels.drop(columns=["index"]).to_markdown(index=False, floatfmt=".3g"))
    if grid.claims and rates is not None:
        print("\nEach claim's worst-case errors (one part at its boundary) and power (q: the "
              "chance a seed lands on the claimed side; parts independent; sign-flip: normal "
              f"per-seed values, {REPS} draws of the exact test: Monte Carlo standard error "
              f"at most {0.5 / REPS ** 0.5:.3f} per rate):\n")
        print(rates.to_markdown(index=False, floatfmt=".3g"))
    if grid.claims:
        seeds = seed_list(grid.seeds)
        evidence, why = evidence_of(seeds, grid.design_seeds)
        if grid.status == "pilot":
            evidence, why = "exploratory", f"registered as a pilot grid of {grid.of}"
        print(f"\nseeds {seed_range(seeds)}: {evidence}" + (f" ({why})" if why else (
            " if the grid file, as it is, is committed before the first trial starts and every "
            "trial runs from a commit that holds it, with no other change (the findings check "
            "it; `python -m bench.verify`)")))


def print_time(grid: Grid, first: list[Trial], later: set[str], slots: int | None,
               rates: pd.DataFrame | None, power_at: tuple[float, ...]
               ) -> dict[str, estimate.Speed]:
    """The wall time here (`estimate`): each setting's measured step and trial, each look's
    and the whole grid's at worst (every later look run); then, for each claim under
    `sizing.TARGET` power at a q of `power_at`, the looks that reach it and their time.
    Returns each setting's speed ({}: not timed)."""
    if slots is None or not first:
        print("\ntime: not estimated (a cluster's CPUs are not known before it starts)")
        return {}
    speeds = estimate.speeds(first)
    seconds = {t.setting: estimate.trial_seconds(t, speeds[t.setting]) for t in first}
    looks, futility = plan_of(grid.seeds)
    each = estimate.look_seconds(seconds, later, looks, slots)
    unread = "" if all(estimate.read_tokens(t) is not None for t in first) else \
        " (readings not counted: the corpus is not built yet)"
    print(f"\nTime here ({cpu_name()}, {slots} trials at once), from each setting's training "
          f"step and reading timed on this machine{unread}:\n")
    print(pd.DataFrame([{"setting": s, "step ms": 1e3 * speeds[s].step_s, "steps":
                         next(t.cfg.train.steps for t in first if t.setting == s),
                         "trial min": v / 60} for s, v in seconds.items()]
                       ).to_markdown(index=False, floatfmt=".3g"))
    print("\n" + "; ".join(f"look {k + 1}: {m / 60:.1f} min" for k, m in enumerate(each))
          + (f"; the whole grid at most {sum(each) / 60:.1f} min (every look run)"
             if len(each) > 1 else ""))
    if rates is None or not grid.claims:
        return speeds
    rows = sizing.needed(grid.claims, grid.grid, looks, futility, rates, power_at)
    if not rows:
        return speeds
    for r in rows:
        r["whole grid min"] = None if r["looks"] is None else sum(estimate.look_seconds(
            seconds, later, r["looks"], slots)) / 60
        r["looks"] = "none up to 64 seeds" if r["looks"] is None else str(list(r["looks"]))
    print(f"\nClaims under power {sizing.TARGET:g}: the grid's looks stretched (same proportions, "
          "the family's alpha shared again) until each reaches it, and their time here:\n")
    print(pd.DataFrame(rows).rename(columns={"now": "power now", "looks": f"looks for "
                                             f"{sizing.TARGET:g}"}
                       ).to_markdown(index=False, floatfmt=".3g"))
    return speeds
