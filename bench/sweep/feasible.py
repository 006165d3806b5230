"""What a grid can do where it will run, checked before Ray or MLflow start: a claim naming a
probe metric its corpus does not score, none of whose tests the data could decide (the setup
fixes the outcome: `bench.findings.bounds`), or with a look that can neither reject nor stop for
futility (its exact test's smallest p above its level) is refused, naming the claim; GPUs the
grid asks for and the machine or cluster lacks, naming resources.gpu."""

import os
from typing import Any

import pandas as pd
import torch

import variants
from bench.config import ConfigError
from bench.findings import sequential
from bench.findings.bounds import Spans, decided
from bench.findings.claims import EXACT, PROBE_METRIC, Claim, cells
from bench.findings.spec import Looks, Seeds, seed_list

from .grid import Grid
from .trials import Trial


def spans(t: Trial) -> Spans:
    """What fixes a trial's spans: its span limit, its ramp where its spans are learned, its
    softmax heads (as its layer describes itself)."""
    m = t.cfg.model
    layer = variants.build(m.variant, d_model=m.d_model, n_heads=m.n_heads, span=m.span,
                           **m.attn).describe()
    return Spans(m.span, layer["options"]["ramp"] if layer["learned_spans"] else None,
                 layer["h"])


def _trial(trials: list[Trial], cell: dict[str, Any]) -> Trial | None:
    """A trial whose grid values include the cell's (any seed)."""
    return next((t for t in trials if all(t.values.get(k) == v for k, v in cell.items())), None)


def check(claims: list[Claim], axes: dict[str, list[Any]], trials: list[Trial]) -> None:
    """Raise ConfigError naming the claim (see the module doc)."""
    for i, c in enumerate(claims):
        where = f"claims.{i} ({c.id})"
        if (probe := PROBE_METRIC.match(c.metric)) and any(
                t.probes is not None and probe[3] not in t.probes for t in trials):
            scored = sorted({p for t in trials for p in t.probes or []}) or ["none"]
            raise ConfigError(f"{where}: metric {c.metric!r}: the runs' corpus scores no probe "
                              f"{probe[3]!r} (it scores: {', '.join(scored)})")
        if c.type == "trend" or c.margin == "planted":
            continue
        why = []
        for _, rows, base in cells(c, axes):
            found = [_trial(trials, cell) for cell in (rows, base) if cell is not None]
            if None in found:  # a --set narrowed the sweep: the report says what is missing
                break
            why.append(decided(c, c.margin, *map(spans, found), *[None] * (base is None)))
        if why and all(why):
            raise ConfigError(f"{where}: {why[0]}; no test of the claim is left to the data")


def by_look(claims: list[Claim], axes: dict[str, list[Any]], seeds: Seeds) -> pd.DataFrame:
    """Per claim and look: its seeds n, the smallest p its test can reach there (and the
    smallest Holm-adjusted opposite p across its parts), its level, and what the look can do:
    reject, stop for futility only, or nothing."""
    plan = tuple(seeds.looks) if isinstance(seeds, Looks) else (len(seed_list(seeds)),)
    futility = seeds.futility if isinstance(seeds, Looks) else None
    rows = []
    for i, c in enumerate(claims):
        parts = len({label for label, *_ in cells(c, axes)})
        for k, look in enumerate(sequential.design(plan, c.metric in EXACT)):
            last = k == len(plan) - 1
            can = "reject" if look.can_reject else (
                "futility only" if not last and futility is not None else "nothing")
            rows.append({"claim": c.id, "index": i, "last": last,
                         "look": f"{k + 1} of {len(plan)}",
                         "n": look.n, "smallest p": look.floor,
                         "smallest opposite p": min(1.0, parts * look.floor),
                         "level": look.level, "can": can})
    return pd.DataFrame(rows)


def check_looks(table: pd.DataFrame) -> None:
    """Raise ConfigError for a claim's look that can do nothing (`by_look`)."""
    for _, r in table[table.get("can", pd.Series(dtype=str)) == "nothing"].iterrows():
        why = ("this is the last look, so the claim could never be reproduced: run more seeds "
               "there (an exact test reaches 2^-n with n seeds)" if r["last"] else
               "futility is null, so this look can neither reject nor stop: set "
               "seeds.futility or run more seeds at this look")
        raise ConfigError(f"claims.{r['index']} ({r['claim']}): look {r['look']} has {r['n']} "
                          f"seeds, whose smallest attainable p {r['smallest p']:.3g} exceeds "
                          f"its level {r['level']:.3g}; {why}")


def check_gpus(grid: Grid, address: str | None) -> None:
    """ConfigError where the grid asks for GPUs (resources.gpu > 0) that are not there: on this
    machine (no --address, no $RAY_ADDRESS) torch must see a CUDA device; on a cluster, Ray must
    list a GPU (asked of it by connecting, which starts nothing)."""
    gpu = grid.resources.gpu
    if not gpu:
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address is None:
        if not torch.cuda.is_available():
            raise ConfigError(f"resources.gpu={gpu:g}: this machine has no CUDA device and no "
                              "--address names a Ray cluster with GPUs; set resources.gpu to "
                              "null (a GPU per trial where there are GPUs) or 0")
        return
    import ray

    ray.init(address=address, logging_config=ray.LoggingConfig(log_level="WARNING"))
    try:
        have = ray.cluster_resources().get("GPU", 0)
    finally:
        ray.shutdown()
    if have < gpu:
        raise ConfigError(f"resources.gpu={gpu:g}: the Ray cluster at {address} has {have:g} "
                          "GPUs; set resources.gpu to null (a GPU per trial where there are "
                          "GPUs) or 0, or start its nodes with --num-gpus")
