"""A claim's verdict in words, beside its numbers (`verdicts`): why a part is short of its
claim's verdict, and a claim's parts counted. `d` is the claim's `verdicts.Design` at its look."""

from typing import Any

from bench.findings.statistics import sequential

NOT_TESTED = "not tested"


def notes(t: dict, state: str, d: Any, parts: int) -> list[str]:
    """Why a part is short of its claim's verdict, in words."""
    note = []
    if t["p"] <= d.look.level and parts > 1 and state != "reproduced":
        note.append("shown at this value alone; the claim needs every value")
    if not d.look.can_reject:
        note.append(f"with {d.look.n} seeds no attainable p of its test is within this look's "
                    "level" + ("" if d.last else ": it could only stop for futility"))
    if state == "futile":
        note.append(f"stopped for futility at look {d.where}: neither direction's p below "
                    f"{d.futility:g}")
    return note


def tally(parts: list[dict], d: Any) -> str:
    """A claim's parts counted: shown at the level, contradicted, decided by construction."""
    counted = [t for t in parts if t.get("usable")]
    shown = sum(t["p"] <= d.look.level * (1 + sequential.SLACK) for t in counted)
    against = sum(t["p_opposite"] <= d.against.level * (1 + sequential.SLACK) for t in counted)
    skipped = [t["claim"].split("[", 1)[-1].rstrip("]") for t in parts
               if t.get("verdict") == NOT_TESTED]
    return (f"{shown} of {len(counted)} parts shown at the level" +
            (f", {against} contradicted" if against else "") +
            (f"; not tested at {'; '.join(skipped)}: decided by construction" if skipped else ""))
