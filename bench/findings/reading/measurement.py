"""The interleaved measurement a sweep makes after its trials, read back: cost.csv (written by
`bench.measure.cost`, one row per arm and repetition; docs/claims.md, Cost claims), checked
column by column before any verdict reads it (`read`)."""

from pathlib import Path

import numpy as np
import pandas as pd

from bench.config import ConfigError
from bench.experiment.claims import COSTS

FILE = "cost.csv"
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


def read(path: Path) -> pd.DataFrame | None:
    """cost.csv as the cost claims and the cost table read it; None where there is none (not
    measured yet); ConfigError naming the file, line and column for one that cannot be the
    measurement."""
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
