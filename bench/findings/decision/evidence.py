"""What a finding's evidence is: confirmatory, or exploratory (seeds its claims were designed
from, or a plan not committed before its trials: `prereg`), or unverified (runs that do not
record what the check needs), and the words its verdicts then take (docs/claims.md)."""

from typing import Any

import numpy as np
import pandas as pd

from bench.experiment.claims import num

EXPLORATORY = {"reproduced": "holds (exploratory)", "contradicted": "fails (exploratory)"}


def seed_range(seeds: list[Any]) -> str:
    """Seeds as people write them: 100-107, or 0, 2, 5."""
    if len(seeds) > 1 and np.array_equal(np.diff(seeds), np.ones(len(seeds) - 1)):
        return f"{num(seeds[0])}-{num(seeds[-1])}"
    return ", ".join(map(num, seeds))


def evidence_of(seeds: list[Any], design: list[int] | None) -> tuple[str, str]:
    """(confirmatory or exploratory, why): seeds that overlap the design seeds, or a grid that
    does not name them, make a finding exploratory."""
    if design is None:
        return "exploratory", "the grid does not name the seeds its claims were designed from"
    if overlap := sorted(set(seeds) & set(design)):
        return "exploratory", (f"seeds {seed_range(overlap)} are design data (design_seeds "
                               f"{seed_range(sorted(design))})")
    return "confirmatory", ""


def exploratory(table: pd.DataFrame, why: str) -> pd.DataFrame:
    """The findings `verdict_table` gave, made exploratory for a reason outside their seeds (a grid
    file not committed before its confirmation began: `prereg`): the words `holds
    (exploratory)` / `fails (exploratory)`, the evidence and the reason."""
    table = table.copy()
    decided = table["verdict"].isin(list(EXPLORATORY))
    table["verdict"] = table["verdict"].map(lambda v: EXPLORATORY.get(v, v))
    table.loc[decided | table["evidence"].notna(), "evidence"] = "exploratory"
    table.loc[decided, "reason"] = [
        "; ".join(filter(None, [r if isinstance(r, str) else "", why]))
        for r in table.loc[decided, "reason"]]
    return table


def unverified(table: pd.DataFrame, why: str) -> pd.DataFrame:
    """The findings `verdict_table` gave, whose pre-registration cannot be checked (`prereg`): every
    confirmatory row's evidence `unverified`, with the reason; the verdicts' words stand."""
    table = table.copy()
    mine = table["evidence"] == "confirmatory"
    table.loc[mine, "evidence"] = "unverified"
    table.loc[mine, "reason"] = ["; ".join(filter(None, [r if isinstance(r, str) else "", why]))
                                 for r in table.loc[mine, "reason"]]
    return table
