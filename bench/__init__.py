"""attnbench: a benchmark and ablation harness for attention variants.

The commands, each the module it is run as (`python -m bench.run` is bench/run.py: argument
parsing, exit codes and printing; the arguments they share and the list of them are
`bench.cli`'s): `run` a sweep, `report` a sweep, `verify` a committed result, `grids` the table
of every grid, `options` every option, `train` one model, `new` a sized grid for one question,
`pilot` whether each arm learns, `resultsdoc` docs/results.md's verdict tables, and the `speed`,
`compare_outside_models` (nanoGPT and the adaptive-span reference), `compare_xtransformers`
(x-transformers' talking heads) and `flops` measurements.

The rooms, each a package; which may import which is one table, `[tool.importlinter]` in
pyproject.toml, which `lint-imports` checks (tests/test_rooms.py):
- `experiment`: a grid file's one schema, how it is opened, claims as data, the grids' table;
- `data`: corpora, registered like variants, and batching;
- `model`: the transformer body built from its config, paired init, FLOPs;
- `training`: one run: the loop, its step, evaluation, checkpoints;
- `sweep`: a grid file's trials, run by Ray Tune;
- `tracking`: MLflow's schema, its writer and its reader;
- `findings`: verdicts, statistics, tables, figures, the report;
- `measure`: speed, memory and FLOPs, side by side.
The ground floor every room shares: `config`, the run's schema; `record`, the run record
(`RunResult`); `metrics`, the names a run's metrics and marks go by, which a grid's schema, the
findings and MLflow's writer and reader share; `provenance`, where a run came from (the
checkout's ROOT, code version, device). Above them, `plugins` loads a user's variants and
corpora, and `trial` is one trial (`Trial`), built whole by the sweep and handed as it is to
its Ray worker and the MLflow writer.
The attention layers themselves are the top-level package `variants`; below it and the data
room, `declare` holds how an option is declared (`option`), which both use.
"""
