"""Speed benchmark (the measurement room, `bench.measure.throughput`): training and inference
tokens/s, activation memory, FLOPs and MFU per variant, each also as a ratio against `fixed` at
the same span limit, measured side by side in one run.

python -m bench.speed [--spans 256,1024,4096] [--heads 4,8,16] [--repeats 5] [--amp] [--json]
"""

import argparse
import json
import sys

import torch

from bench import plugins
from bench.cli import about, add_preset, add_set, fraction, int_list
from bench.config import ConfigError, merge, parse_sets
from bench.measure.throughput import cases, log_mlflow, run
from bench.training.memory import keep_heap


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speed", description=about(__doc__))
    add_preset(p)
    add_set(p)
    p.add_argument("--spans", type=int_list, default="256,1024,4096",
                   help="span limits S for fixed/adaptive")
    p.add_argument("--heads", type=int_list, default="4,8,16",
                   help="head counts for the mixing variants")
    p.add_argument("--variants", default="talking-heads",
                   help="variants compared at the first S for every head count; a composition "
                        "is NAME:KEY=VALUE[:KEY=VALUE], e.g. adaptive:mixing=both")
    learned = p.add_mutually_exclusive_group()
    learned.add_argument("--span-frac", type=fraction, default=0.1,
                         help="learned spans (adaptive, dynamic) set to z + R = frac * S")
    learned.add_argument("--learned-span", type=int_list, metavar="KEYS",
                         help="learned spans set to z + R = KEYS at every S (flat in S)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--amp", action="store_true",
                   help="also time every case in bf16 autocast (train.amp), side by side; "
                        "without native bf16 on the device, says why and times fp32 only")
    p.add_argument("--compile", action="store_true",
                   help="also time each model under torch.compile (column compile_x)")
    p.add_argument("--graphs", action="store_true",
                   help="also time each step captured as CUDA graphs (train.compile=graphs; "
                   "column graphs_x); without CUDA, says why and times eager only")
    p.add_argument("--mlflow", action="store_true",
                   help="log the table to MLflow (experiment 'speed'; $MLFLOW_TRACKING_URI)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats: expected a positive int (got {args.repeats})")
    keys = args.learned_span[0] if args.learned_span else None
    if args.learned_span and (len(args.learned_span) > 1 or keys > min(args.spans)):
        p.error(f"--learned-span: expected one int <= every span limit {args.spans}")
    try:  # every case resolved and validated before anything is timed
        plugins.load()
        tree = parse_sets(args.sets)
        configs = {c: c.config(tree, args.preset) for c in
                   cases(args.spans, args.heads, args.variants.split(","), args.span_frac, keys)}
        graphs = captured(configs, tree, args.preset) if args.graphs else {}
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    keep_heap()
    df = run(configs, args.repeats, args.compile, args.amp, graphs)
    cfg = next(iter(configs.values()))
    if args.mlflow:
        log_mlflow(df, vars(args))
    if args.json:
        print(json.dumps({**df.attrs, "threads":
                          torch.get_num_threads(), "rows": df.to_dict("records")}, indent=1))
    else:
        bf16 = df.attrs["bf16_matmul_gflops"]
        print(f"float32 matmul peak: {df.attrs['matmul_gflops']:.0f} GFLOP/s"
              + (f", bfloat16 {bf16:.0f}" if bf16 else "") + " on "
              f"{torch.get_num_threads()} threads; block {cfg.train.block}, batch "
              f"{cfg.train.batch_size}, D {cfg.model.d_model}, {cfg.model.n_layers} layers")
        print(df.to_markdown(index=False, floatfmt=".3g"))
    return 0


def captured(configs: dict, tree: dict, preset: str | None) -> dict:
    """The cases whose step can be captured (their configs with train.compile=graphs); the
    others are named on stderr with the reason. ConfigError where none can."""
    out, refused = {}, {}
    for case in configs:
        try:
            out[case] = case.config(merge(tree, {"train": {"compile": "graphs"}}), preset)
        except ConfigError as err:
            refused[case.label] = err
    if not out:
        raise ConfigError(f"--graphs: {next(iter(refused.values()))}")
    for label, err in refused.items():
        print(f"--graphs: {label} is timed eagerly only: {err}", file=sys.stderr)
    return out



if __name__ == "__main__":
    raise SystemExit(main())
