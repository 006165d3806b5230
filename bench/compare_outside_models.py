"""attnbench against outside models, the anchors (the measurement room,
`bench.measure.outside_models`): attnbench's `fixed` and `adaptive` models against nanoGPT and the
adaptive-span reference, trained side by side in one process on the same enwik8-prefix batches, in
fp32 and (--amp) bf16 autocast; tokens/s and executed FLOP rates compared within each precision,
bf16 over fp32, and MFU against the speed targets.

python -m bench.compare_outside_models --nanogpt DIR --reference DIR [--steps 100] [--rounds 2]
    [--amp] [--json]
"""

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from bench import data
from bench.cli import about, add_set, emit, positive
from bench.config import ConfigError
from bench.measure.outside_models import (
    DATA,
    AnchorError,
    Timing,
    configs,
    import_file,
    measure,
    show,
)
from bench.training.memory import keep_heap


def checkout(files: tuple[str, ...], what: str) -> Callable[[str], Path]:
    """argparse type: a directory holding `files`, `what` names the checkout expected."""
    def check(text: str) -> Path:
        folder = Path(text).expanduser().resolve()
        if not folder.is_dir():
            raise argparse.ArgumentTypeError(f"{folder}: no such directory (expected {what})")
        for file in files:
            if not (folder / file).is_file():
                raise argparse.ArgumentTypeError(f"{folder}: has no {file} (expected {what})")
        return folder
    return check


def existing_file(text: str) -> Path:
    """argparse type: the enwik8 prefix, a byte file."""
    file = Path(text).expanduser().resolve()
    if not file.is_file():
        raise argparse.ArgumentTypeError(f"{file}: enwik8 prefix not found (pass --data PATH)")
    return file


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare_outside_models",
                                description=about(__doc__))
    p.add_argument("--nanogpt", required=True, metavar="DIR",
                   type=checkout(("model.py",), "a nanoGPT checkout holding model.py"))
    p.add_argument("--reference", required=True, metavar="DIR",
                   type=checkout(("models.py", "adagrad_with_grad_clip.py"),
                                 "an adaptive-span checkout holding models.py and "
                                 "adagrad_with_grad_clip.py"))
    p.add_argument("--data", type=existing_file, default=str(DATA), metavar="PATH",
                   help=f"the enwik8 prefix (default {DATA})")
    p.add_argument("--steps", type=positive, default=100, help="timed steps per round")
    p.add_argument("--rounds", type=positive, default=2, help="interleaved rounds (median)")
    add_set(p, "override the tiny preset (sizes the anchors too), e.g. train.batch_size=8")
    p.add_argument("--amp", action="store_true",
                   help="every system in bf16 autocast too, beside fp32 in the same rounds "
                   "(rows suffixed ' bf16', compared bf16 with bf16; MFU against the bf16 "
                   "matmul peak); without native bf16, says why and times fp32 only")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    try:  # everything checked and loaded before anything is timed
        cfgs = configs(args.data, args.sets)
        corpus = cfgs["fixed"].corpus()
        nanogpt = import_file(args.nanogpt / "model.py", "anchor_nanogpt_model",
                              ("GPT", "GPTConfig"))
        reference = (import_file(args.reference / "models.py", "anchor_reference_models",
                                 ("TransformerSeq",)),
                     import_file(args.reference / "adagrad_with_grad_clip.py",
                                 "anchor_reference_adagrad", ("AdagradWithGradClip",)))
    except (ConfigError, data.DataError, AnchorError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    keep_heap()
    out = measure(cfgs, corpus, nanogpt, reference, Timing(args.steps, args.rounds, args.amp))
    return emit(out, args.json, show)



if __name__ == "__main__":
    raise SystemExit(main())
