"""Talking heads against x-transformers (the measurement room, `bench.measure.xtransformers`):
attnbench's talking-heads layer and x-transformers' Attention with talking heads, forward and
backward on the same causal block, the weights copied across and the outputs checked to agree
before anything is timed, side by side on the CPU, with ours' extra work (the position term, the
banding, the padding) timed on its own. x-transformers is an optional extra:
pip install -e '.[anchors]' -c constraints.txt.

python -m bench.compare_xtransformers [--batch 8] [--tokens 256] [--dim 128] [--heads 8]
    [--repeats 30] [--threads 1] [--dtype fp32] [--json]
"""

import argparse
import sys

import torch

from bench.cli import about, emit, positive
from bench.measure.xtransformers import Shape, THLayerError, import_xformers, measure, show
from bench.training import precision
from bench.training.memory import keep_heap


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare_xtransformers",
                                description=about(__doc__))
    p.add_argument("--batch", type=positive, default=8, help="B, blocks per step")
    p.add_argument("--tokens", type=positive, default=256,
                   help="M, tokens per block; ours' span S = M (the whole causal block)")
    p.add_argument("--dim", type=positive, default=128, help="D, model width")
    p.add_argument("--heads", type=positive, default=8, help="heads, each of D / heads")
    p.add_argument("--repeats", type=positive, default=30, help="interleaved rounds (median)")
    p.add_argument("--threads", type=positive, default=1, help="torch threads")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: every forward in bf16 autocast (the agreement is checked in fp32)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    if args.dim % args.heads:
        p.error(f"--dim {args.dim} is not a multiple of --heads {args.heads}")
    bf16 = args.dtype == "bf16"
    if bf16 and (why := precision.bf16_unsupported(torch.device("cpu"))):
        p.error(f"--dtype bf16: {why}")
    try:  # every argument checked before the optional import
        xt = import_xformers()
    except THLayerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    keep_heap()
    try:
        out = measure(xt, Shape(args.batch, args.tokens, args.dim, args.heads), args.repeats,
                      bf16)
    except THLayerError as err:  # the layers disagree: nothing timed
        print(f"error: {err}", file=sys.stderr)
        return 1
    return emit(out, args.json, show)



if __name__ == "__main__":
    raise SystemExit(main())
