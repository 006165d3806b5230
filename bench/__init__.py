"""attnbench: a benchmark and ablation harness for attention variants.

The commands (`python -m bench.<command>`; argument parsing and exit codes only): `train` one
model, `run` a sweep, `report` a sweep, `speed`, `anchors` and `flops` measurements.

The rooms, each a package whose docstring says what it may import:
- `data`: corpora, registered like variants, and batching;
- `model`: the transformer body built from its config, paired init, FLOPs;
- `training`: one run: the loop, its step, evaluation, checkpoints;
- `sweep`: a grid file's trials, run by Ray Tune;
- `tracking`: MLflow's schema, its writer and its reader;
- `findings`: claims, statistics, tables, figures, the report;
- `measure`: speed, memory and FLOPs, side by side.
The ground floor every room shares: `config`, the run's schema; `record`, the run record
(`RunResult`); `provenance`, where a run came from (the checkout's ROOT, code version, device).
`plugins` loads a user's variants and corpora.
The attention layers themselves are the top-level package `variants`.
"""
