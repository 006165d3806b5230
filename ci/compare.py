"""compare.md of a run of ci/gpu_grids.sh: each grid's verdicts beside the CPU's committed ones,
claim by claim, and first what keeps them from being GPU results or comparable (a rehearsal on
the CPU at a small size, MPS not used, a grid cut at its deadline or not run).

    python -m ci.compare WORK [--rehearsal] [--note TEXT] GRID ...   # the script, after each grid
"""

import argparse
import sys
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["verdict", "look", "effect", "p"]


def confirmation(name: str) -> Path | None:
    """The committed CPU result a run of grid `name` is compared with: the run folder under
    results/ whose grid.yaml is grid `name` and plans the seeds its grid file in ablations/
    plans now (for heads_grid, results/heads_grid/seeds600: looks of 4, 8, 12 from 600), with
    findings; None where there is none (a grid not shipped, or not yet run on its plan's
    seeds)."""
    plans = [g for g in map(yaml.safe_load, map(Path.read_text, (ROOT / "ablations").glob(
        "*.yaml"))) if g.get("name") == name]
    if not plans:
        return None
    seeds = plans[0].get("seeds")
    found = sorted(p.parent for p in (ROOT / "results").glob("**/grid.yaml")
                   if (p.parent / "findings.csv").exists()
                   and (copy := yaml.safe_load(p.read_text())).get("name") == name
                   and copy.get("seeds") == seeds)
    return found[0].relative_to(ROOT) if found else None


def grid_section(here: Path, name: str, ran: str) -> str:
    """One grid's section: its verdicts (`here`/findings.csv) beside the CPU's, and how many
    decisions are the same; or why there is nothing to compare."""
    cut = " (partial: cut at its deadline)" if (here / "partial.md").exists() else ""
    mine, cpu = here / "findings.csv", confirmation(name)
    if not mine.exists() or cpu is None:
        return (f"## {name}{cut}: no findings to compare ({ran}: {mine.exists()}, CPU: "
                f"{cpu is not None})\n")
    a = pd.read_csv(ROOT / cpu / "findings.csv").set_index("claim")[COLUMNS]
    b = pd.read_csv(mine).set_index("claim")[COLUMNS]
    both = a.add_suffix(" (CPU)").join(b.add_suffix(f" ({ran})"), how="outer")
    same = (both["verdict (CPU)"] == both[f"verdict ({ran})"]).sum()
    return (f"## {name}{cut}: {same} of {len(both)} decisions the same as `{cpu}`\n\n"
            f"{both.to_markdown(floatfmt='.4g')}\n")


def compare(work: Path, grids: list[str], rehearsal: bool, notes: list[str]) -> str:
    """compare.md for the grids run under `work`/results, the `notes` said first."""
    ran = "rehearsal" if rehearsal else "GPU"
    head = ["**A rehearsal on the CPU (REHEARSE=1) at a small size: no GPU result, and no "
            "verdict comparable with the CPU's.**"] if rehearsal else []
    head += [f"**Warning:** {n}" for n in notes]
    return "\n".join([*(h + "\n" for h in head),
                      *(grid_section(work / "results" / g, g, ran) for g in grids)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ci.compare", description=__doc__.split("\n")[0])
    p.add_argument("work", type=Path, help="the script's work folder (its results/ below)")
    p.add_argument("grids", nargs="*", help="the grids run, by name")
    p.add_argument("--rehearsal", action="store_true", help="the run was a CPU rehearsal")
    p.add_argument("--note", action="append", default=[], help="a warning said first")
    args = p.parse_args(argv)
    print(compare(args.work, args.grids, args.rehearsal, args.note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
