"""What the commands share: the list of them (`COMMANDS`: `python -m bench.<command>` runs the
module `bench/<command>.py`, which holds that command's argument parsing, exit codes and printing;
the rooms do the work), and the command-line arguments defined once: a command's description
(`about`), `--set` and `--preset` (train, run, speed, compare_outside_models), `--tracking-uri`
(run, report), what turns a grid file into its trials (`add_trial_args`), the argparse types that
check a value before anything runs, and how a measurement prints (`emit`)."""

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bench.config import PRESETS
from bench.provenance import ROOT

T = TypeVar("T")
# every command, `python -m bench.<name>`: the module bench/<name>.py
COMMANDS = ("run", "new", "pilot", "report", "grids", "verify", "train", "speed", "cost",
            "compare_outside_models", "compare_xtransformers", "flops", "options", "resultsdoc")
# the --help epilog of the commands that print verdicts: the words are defined once, in docs/
VERDICTS = ("Claims, their test order, looks, exact rules and the verdict words (reproduced, "
            "contradicted, inconclusive, not tested; offsets, detectable, seeds) are "
            "defined in docs/claims.md.")


def about(doc: str) -> str:
    """A command's --help description: its module docstring's first paragraph, whole (never cut
    at its first line, mid-sentence), on one line for argparse to wrap."""
    return " ".join(doc.split("\n\n")[0].split())


def add_set(p: argparse.ArgumentParser,
            help: str = "override one config key, e.g. train.steps=500 (repeatable)") -> None:
    """--set KEY=VALUE, repeatable, into args.sets (`bench.config.parse_sets` reads them)."""
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help=help)


def add_preset(p: argparse.ArgumentParser, default: str | None = "tiny",
               help: str = "model/train preset (bench.config.PRESETS)") -> None:
    """--preset, one of bench.config.PRESETS, into args.preset."""
    p.add_argument("--preset", default=default, choices=sorted(PRESETS), help=help)


def checked(convert: Callable[[str], T], expected: str,
            ok: Callable[[T], bool] = lambda _: True) -> Callable[[str], T]:
    """argparse type: `convert(text)`, refused as "'TEXT': expected `expected`" when it raises
    ValueError or the value is not `ok`."""
    def parse(text: str) -> T:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {expected}")
        return value
    return parse


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


positive = checked(int, "a positive int", lambda v: v >= 1)
int_list = checked(_ints, "comma-separated positive ints", lambda v: min(v) >= 1)  # 256,1024
fraction = checked(float, "a fraction of S in (0, 1]", lambda v: 0 < v <= 1)
seeds_arg = checked(_ints, "integers like 0,1,2")


def add_tracking_uri(p: argparse.ArgumentParser, store: str = "runs/mlflow.db") -> None:
    """--tracking-uri, the MLflow store (`bench.tracking.store.tracking_uri` resolves it: this,
    else $MLFLOW_TRACKING_URI, else the sqlite file `store`), into args.tracking_uri."""
    p.add_argument("--tracking-uri", help=f"MLflow tracking URI (default: $MLFLOW_TRACKING_URI, "
                   f"else sqlite:///{store})")


def add_trial_args(p: argparse.ArgumentParser) -> None:
    """--set, --preset, --data, --seeds and --seed-start: what turns a grid file into its trials
    (`bench.sweep.trials.Overrides`)."""
    add_set(p, "override a config key in every trial (pins a grid axis); repeatable")
    add_preset(p, None, "model/train preset; wins over the sizes the grid's base sets")
    p.add_argument("--data", help="registered dataset (data.name); drops the base's options "
                   "of another corpus")
    p.add_argument("--seeds", type=seeds_arg, help="comma-separated seeds, e.g. 0,1,2 (one "
                   "look; refused for a grid that declares seeds.looks)")
    p.add_argument("--seed-start", type=int, metavar="N", help="run the grid's seeds from N: "
                   "its looks on seeds N, N+1, ..., or its list of k seeds as N .. N+k-1 (a "
                   "replication on a disjoint seed range)")


def emit(out: dict, as_json: bool, show: Callable[[dict], None]) -> int:
    """Print a measurement's JSON-able result `out` as JSON, or as text through `show`; return 0,
    the command's exit status."""
    if as_json:
        print(json.dumps(out, indent=1))
    else:
        show(out)
    return 0


def generated(path: Path, text: str, check: bool, command: str) -> int:
    """A generated document (docs/grids.md, docs/options.md): with `check`, write nothing and
    return 1 where `path` is not `text` (naming `command` to regenerate it), else write it."""
    shown = path.relative_to(ROOT)
    if check:
        stale = not path.is_file() or path.read_text() != text
        print(f"{shown}: {f'stale: run {command}' if stale else 'current'}")
        return int(stale)
    path.write_text(text)
    print(f"wrote {shown}")
    return 0
