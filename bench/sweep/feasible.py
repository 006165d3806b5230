"""What a grid can do where it will run, checked before Ray or MLflow start: a claim naming a probe
metric its corpus does not score, or a probe part whose no-recall floor is 0 (nothing to learn
without recall: `bench.findings.decision.vacuity`), none of whose tests the data could decide (the
setup fixes the outcome: `bench.findings.statistics.bounds`), on a span statistic without the floor
it is measured above, or none of whose looks can reject (its exact test's rule at the last look is
empty) is refused, naming the claim; what each look can decide, the design's exact rates, the rule
that makes a seed of a claim on a probe vacuous and the claims that imply one another are printed;
GPUs the grid asks for and the machine or cluster lacks, naming resources.gpu."""

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from bench.config import ConfigError
from bench.experiment import floors
from bench.experiment.claims import PROBE_METRIC, SPAN_SHAPE, Claim, cells, fixed
from bench.experiment.floors import Floors
from bench.experiment.grid import Grid, Seeds, plan_of
from bench.experiment.open import load_grid
from bench.findings.decision import vacuity
from bench.findings.reading import samples
from bench.findings.statistics import sequential
from bench.findings.statistics.bounds import Spans, decided
from bench.findings.statistics.stats import ALPHA, min_seeds
from bench.provenance import RESULTS
from bench.trial import Trial

SPAN_AFFINE = ("flops_mean", "mean_span", "span_fraction")  # one quantity at a fixed size


def spans(t: Trial) -> Spans:
    """What fixes a trial's spans: its span limit, its ramp where its spans are learned, its
    softmax heads (its config's `layer`: typed from its parts, nothing built)."""
    m = t.cfg.model
    return Spans(m.span, m.layer.values()["ramp"] if m.layer.learned_spans else None,
                 m.layer.shape.h)


def _trial(trials: list[Trial], cell: dict[str, Any]) -> Trial | None:
    """A trial whose grid values include the cell's (any seed)."""
    return next((t for t in trials if all(t.values.get(k) == v for k, v in cell.items())), None)


def check(claims: list[Claim], axes: dict[str, list[Any]], trials: list[Trial]) -> None:
    """Raise ConfigError naming the claim (see the module doc)."""
    for i, c in enumerate(claims):
        where = f"claims.{i} ({c.id})"
        if c.metric in SPAN_SHAPE and c.floor is None:
            raise ConfigError(f"{where}: metric {c.metric} says which heads are long or short, "
                              "and every learned span is at least the ramp R: declare `floor: "
                              "R` (each head's span measured above R, what it learned) or "
                              "`floor: 0` (the raw span, which R can fix by construction)")
        if (probe := PROBE_METRIC.match(c.metric)) and any(
                t.probes is not None and probe[3] not in t.probes for t in trials):
            scored = sorted({p for t in trials for p in t.probes or []}) or ["none"]
            raise ConfigError(f"{where}: metric {c.metric!r}: the runs' corpus scores no probe "
                              f"{probe[3]!r} (it scores: {', '.join(scored)})")
        if c.type in ("trend", "cost") or c.margin == "planted":
            continue
        why = []
        for _, rows, base in cells(c, axes):
            found = [_trial(trials, cell) for cell in (rows, base) if cell is not None]
            if None in found:  # a --set narrowed the sweep: the report says what is missing
                break
            why.append(decided(c, c.margin, *map(spans, found), *[None] * (base is None)))
        if why and all(why):
            raise ConfigError(f"{where}: {why[0]}; no test of the claim is left to the data")


def check_floors(grid: Grid) -> Floors:
    """The grid's cells' probe costs without recall (`floors.of_grid`), after refusing, with a
    ConfigError naming it, a claim on a probe part whose no-recall floor is 0
    (`vacuity.refused`: nothing to learn without recall)."""
    costs = floors.of_grid(grid)
    for i, c in enumerate(grid.claims):
        found = [costs(cell) for _, *pair in cells(c, grid.grid) for cell in pair if cell]
        if why := vacuity.refused(c, found):
            raise ConfigError(f"claims.{i} ({c.id}): {why}")
    return costs


def vacuity_rules(claims: list[Claim], axes: dict[str, list[Any]], costs: Floors) -> list[str]:
    """Per claim on a probe's test bits per answer (per part where they differ), the rule that
    makes one of its seeds vacuous, with its numbers (`vacuity.words`: what the findings decide
    by)."""
    out = []
    for c in claims:
        if (t := vacuity.target(c.metric)) is None or c.margin == "planted":
            continue
        tests: dict[str, list] = {}
        for label, rows, base in cells(c, axes):
            tests.setdefault(label, []).append((rows, base))
        said: dict[str, list[str]] = {}
        for label, pairs in tests.items():
            rows = [costs(r).get(t) for r, _ in pairs]
            base = None if pairs[0][1] is None else [costs(b).get(t) for _, b in pairs]
            if None in rows + (base or []):
                continue
            names = ([samples.label(r) for r, _ in pairs],
                     None if base is None else [samples.label(b) for _, b in pairs])
            x = np.array([float(r[c.along]) for r, _ in pairs]) if c.along else None
            rule, _ = vacuity.words(c, float(c.margin), x, vacuity.Costs(t, rows, base, names))
            said.setdefault(rule, []).append(label)
        out += [c.id + (f" [{'; '.join(parts)}]" if len(said) > 1 else "") + f": {rule}"
                for rule, parts in said.items()]
    return out


def seedless(c: Claim, trials: list[Trial]) -> bool:
    """A cost claim these trials decide without seeds: a measured time or a configured cost, or
    FLOPs where no arm's spans are learned (by construction: the share of alpha it keeps as a
    per-seed claim goes unspent, `sequential.family`)."""
    if c.type != "cost":
        return False
    arms = [c.rows, {**c.rows, **(c.baseline or {})}]
    return fixed(c) or not any(t.cfg.model.layer.learned_spans for t in trials
                               if any(all(t.values.get(k) == v for k, v in cell.items())
                                      for cell in arms))


def by_construction(rates: pd.DataFrame, claims: list[Claim], trials: list[Trial]
                    ) -> pd.DataFrame:
    """`rates` with each `seedless` claim's row saying so in place of a per-seed test's rates."""
    out = rates.copy()
    for i, c in enumerate(claims):
        if seedless(c, trials) and not fixed(c):
            out.loc[i] = {"claim": c.id, "test": "none: by construction (no arm's spans "
                                                 "are learned)"}
    return out


def _parts(c: Claim, axes: dict[str, list[Any]]) -> int:
    """How many tests (parts) a claim has: one per value of its at_each keys."""
    return len({label for label, *_ in cells(c, axes)})


def family(claims: list[Claim], axes: dict[str, list[Any]], seeds: Seeds
           ) -> tuple[list[sequential.Contrary], list[sequential.Budget]]:
    """Each claim's contrary and its share of the family's alpha (`sequential.family`)."""
    plan, _ = plan_of(seeds)
    contraries = [sequential.Contrary(c.test, fixed(c), _parts(c, axes),
                                      c.expect == "equivalent") for c in claims]
    return contraries, sequential.family(contraries, plan)


def by_look(claims: list[Claim], axes: dict[str, list[Any]], seeds: Seeds) -> pd.DataFrame:
    """Per claim and look: its seeds n, its exact rule each way (the claim's at its share of
    the family's alpha, the contrary's at its share over its parts), their levels, the error
    spent by then, and what the look can do: reject, stop for futility only, or nothing."""
    plan, futility = plan_of(seeds)
    contraries, budgets = family(claims, axes, seeds)
    rows = []
    for i, (c, o, b) in enumerate(zip(claims, contraries, budgets, strict=True)):
        mine = sequential.design(plan, c.test, o.exact, b.claim)
        theirs = sequential.opposite_boundaries(plan, c.test, o.exact, o.parts, b.contrary,
                                                o.equivalent)
        for k, (look, opp) in enumerate(zip(mine, theirs, strict=True)):
            last = k == len(plan) - 1
            can = "reject" if look.can_reject or opp.can_reject else (
                "futility only" if not last and futility is not None else "nothing")
            rows.append({"claim": c.id, "index": i, "look": f"{k + 1} of {len(plan)}",
                         "n": look.n, "alpha": b.claim, "reproduced if": look.rule,
                         "level": look.level, "error by then": look.error,
                         "contrary alpha": b.contrary, "contradicted if": opp.rule,
                         "opposite level": opp.level, "can": can})
    return pd.DataFrame(rows)


def rates(claims: list[Claim], axes: dict[str, list[Any]], seeds: Seeds,
          power_at: tuple[float, ...] = (0.8, 0.9)) -> pd.DataFrame:
    """Per claim: its worst-case errors over the region where it holds or fails (a claim of
    several parts: one part at its boundary, the rest decided; exact for the sign test, a
    bound for sign-flip), its power (`sequential.operating`, parts independent; q is the
    chance that a seed lands on the claimed side) to reproduce at each q of `power_at` with every
    part true, and to contradict at q = 0.1 with one part false (alone at its level), and the
    looks that can never change a decision."""
    plan, futility = plan_of(seeds)
    contraries, budgets = family(claims, axes, seeds)
    rows = []
    for c, o, b in zip(claims, contraries, budgets, strict=True):
        if o.exact:
            rows.append({"claim": c.id, "test": "none: decided from the cost measurement" if
                         c.type == "cost" else "none: a value fixed by the config"})
            continue
        one = sequential.Contrary(o.test, parts=1, equivalent=o.equivalent)
        alone = sequential.Budget(b.claim, b.contrary / o.parts)
        at = {q: sequential.operating(plan, o, q, futility, b) for q in (0.5, *power_at)}
        rows.append({"claim": c.id, "test": c.test,
                     "worst error: reproduced": sequential.design(plan, c.test, False,
                                                                  b.claim)[-1].error,
                     "worst error: contradicted": sequential.opposite_boundaries(
                         plan, c.test, False, o.parts, b.contrary, o.equivalent)[-1].error
                     * o.parts,
                     **{f"power q {q:g}": at[q].ends["reproduced"] for q in power_at},
                     "contradicts at q 0.1, one part false": sequential.operating(
                         plan, one, 0.1, futility, alone).ends["contradicted"],
                     "looks that never decide": ", ".join(
                         str(k + 1) for k, share in enumerate(at[0.5].decided) if share == 0)
                     or "-"})
    return pd.DataFrame(rows)


def worst_line(claims: list[Claim], axes: dict[str, list[Any]], seeds: Seeds,
               q: float = 0.9) -> str:
    """The family's chance of any wrong verdict at its worst over every dependence between the
    claims, in both readings of "wrong" (`sequential.worst`), and the chance that every claim
    comes out reproduced when each seed lands on its claim's side with chance q
    (`sequential.p_all_reproduced`), in words."""
    plan, futility = plan_of(seeds)
    contraries, budgets = family(claims, axes, seeds)
    bound = sequential.worst(budgets, contraries, plan)
    every = sequential.p_all_reproduced(plan, contraries, budgets, [q] * len(claims), futility)
    return (f"the family's chance of any wrong verdict, at its worst over every dependence "
            f"between the claims: at most {bound.defined:.4g} (a false claim reproduced or a "
            f"true one contradicted) and {bound.directional:.4g} (contradicted read as the "
            f"opposite effect, so a claim at its null boundary decided either way is wrong); "
            f"alpha {ALPHA:g}\nthe chance that every claim comes out reproduced, each seed on "
            f"its claim's side with chance q = {q:g} (values +-1, claims independent, exact "
            f"over count paths): {every:.3g}")


def uncontradictable(claims: list[Claim], axes: dict[str, list[Any]], seeds: Seeds
                     ) -> list[str]:
    """The claims whose contrary gets no alpha (`sequential.family`: it would leave the claim
    unable to reject with these seeds), in words: they can be reproduced or inconclusive,
    never contradicted."""
    _, budgets = family(claims, axes, seeds)
    plan, _ = plan_of(seeds)
    return [f"claims.{i} ({c.id}): cannot come out contradicted with {plan[-1]} seeds: any "
            f"alpha for its contrary would leave the claim itself unable to reject"
            for i, (c, b) in enumerate(zip(claims, budgets, strict=True))
            if b.contrary == 0 and not fixed(c)]


def implied(claims: list[Claim]) -> list[str]:
    """Pairs of claims on one quantity of rows they share (their pinned values agree): #FLOPS =
    a + b x the mean span exactly at a fixed size (SPEC), and span_fraction = mean_span / S, so
    where both compare with the fixed window a verdict on one is a verdict on the other,
    counted twice in the sequence."""
    said = []
    for i, a in enumerate(claims):
        for b in claims[i + 1:]:
            shared = set(a.rows) & set(b.rows)
            if {a.metric, b.metric} <= set(SPAN_AFFINE) and a.metric != b.metric and all(
                    a.rows[k] == b.rows[k] for k in shared):
                said.append(f"claims {a.id} and {b.id} read one quantity of the rows they share "
                            f"({a.metric} and {b.metric}: #FLOPS = a + b x mean span exactly "
                            "at a fixed size, span_fraction = mean_span / S): one implies the "
                            "other where both compare with the fixed window S")
    return said


def check_looks(table: pd.DataFrame) -> None:
    """Raise ConfigError for a claim none of whose looks can reject (`by_look`), naming the
    smallest number of seeds that could."""
    if table.empty:
        return
    for (i, cid), looks in table.groupby(["index", "claim"], sort=False):
        if (looks["level"] > 0).any():
            continue
        n = looks["n"].iloc[-1]
        raise ConfigError(f"claims.{i} ({cid}): no look can reject: with at most {n} seeds "
                          f"no p of its exact test is within its level (reproduced if: "
                          f"{looks['reproduced if'].iloc[-1]}); the smallest number of seeds "
                          f"that could is {min_seeds(ALPHA)} (2^-n <= {ALPHA:g})")


def _tested(c: Claim) -> Claim:
    """What a claim tests: the claim without its words."""
    return c.model_copy(update={"text": ""})


def check_restated(grid: Grid, results: Path = RESULTS) -> None:
    """ConfigError for a claim that reuses the id of a claim confirmation seeds have run with
    another test (its words aside: `text` may be reworded to say what the test rejects): a
    committed result of the same grid name (its grid.yaml beside a findings.csv with a
    confirmatory or unverified row) names that id. A restated claim needs a new id; restating
    after design runs (exploratory findings) is how claims are written."""
    mine = {c.id: (i, c) for i, c in enumerate(grid.claims)}
    for path in sorted(results.rglob("grid.yaml")):
        found = path.with_name("findings.csv")
        if not found.is_file() or (committed := load_grid(path)).name != grid.name:
            continue
        ran = set(pd.read_csv(found).get("evidence", pd.Series(dtype=str)))
        if not ran & {"confirmatory", "unverified"}:  # confirmation seeds ran
            continue
        for old in committed.claims:
            if old.id in mine and _tested(mine[old.id][1]) != _tested(old):
                raise ConfigError(f"claims.{mine[old.id][0]} ({old.id}): a claim with this id, "
                                  f"tested otherwise, has run on confirmation seeds "
                                  f"({path.parent.relative_to(results.parent)}); a restated "
                                  "claim needs a new id, in a new grid file")


def check_gpus(grid: Grid, address: str | None) -> float:
    """The GPUs trials can use: this machine's CUDA devices, or those of the Ray cluster at
    `address` (--address, else $RAY_ADDRESS, as the command resolved it), asked of Ray by
    connecting, which starts nothing; ConfigError where the grid asks for more
    (resources.gpu) than there are."""
    gpu = grid.resources.gpu
    if address is None:
        have = float(torch.cuda.device_count())
        where = "this machine has no CUDA device and no --address names a Ray cluster with GPUs"
    else:
        if not gpu and gpu is not None:
            return 0.0
        import ray

        ray.init(address=address, logging_config=ray.LoggingConfig(log_level="WARNING"))
        try:
            have = float(ray.cluster_resources().get("GPU", 0))
        finally:
            ray.shutdown()
        where = (f"the Ray cluster at {address} has {have:g} GPUs (start its nodes with "
                 "--num-gpus)")
    if gpu and have < max(gpu, 1):
        raise ConfigError(f"resources.gpu={gpu:g}: {where}; set resources.gpu to null (trials "
                          "packed on the GPUs there are, none without) or 0")
    return have


def slots(cpu: float, share: float, gpus: float, cpus: int | None) -> int | None:
    """How many trials Ray runs at once: as many as its CPUs hold at `cpu` each
    (resources.cpu; `cpus`: this machine's, None for a cluster's, not known before it starts)
    and, where trials get a `share` of one of the `gpus` GPUs, as many as those shares fill,
    whichever is fewer; None where neither is known here."""
    by_cpu = None if cpus is None else int(cpus // cpu)
    if not share:
        return by_cpu
    by_gpu = int(gpus / share + 1e-9)
    return by_gpu if by_cpu is None else min(by_gpu, by_cpu)


def at_once(cpu: float, share: float, gpus: float, cpus: int | None) -> str:
    """How many trials run at once and why (`slots`), in words."""
    by_cpu = None if cpus is None else int(cpus // cpu)
    cpu_text = "the cluster's CPUs" if cpus is None else f"{cpus} CPUs here"
    n = slots(cpu, share, gpus, cpus)
    if not share:
        return f"at once: {n or 'as many'} trials ({cpu_text}, resources.cpu={cpu:g} each; no GPU)"
    by_gpu = int(gpus / share + 1e-9)
    which = "the GPUs" if by_cpu is None or by_gpu <= by_cpu else "the CPUs"
    return (f"at once: {n} trials ({gpus:g} GPUs at {share:g} of one each: {by_gpu}; "
            f"{cpu_text} at resources.cpu={cpu:g} each: {'as many' if by_cpu is None else by_cpu}; "
            f"{which} limit it)")


def eager_graphs(trials: list[Trial], share: float) -> str | None:
    """Where trials set train.compile=graphs and get no GPU (`share` 0), that their step runs
    eagerly (`bench.training.cuda_graphs`: the same run to the last digit), else None."""
    if share or not any(t.cfg.train.compile == "graphs" for t in trials):
        return None
    return ("train.compile=graphs: no CUDA for the trials here, so each runs its step eagerly "
            "(the same run, to the last digit); on a CUDA GPU the step is captured as one graph")
