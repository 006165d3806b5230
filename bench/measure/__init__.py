"""The measurement room: what a variant costs, measured side by side in one process: speed and
memory of the trainer's own step (`throughput`, for `python -m bench.speed`), a grid's claims'
rows against their baselines, interleaved after its trials (`cost`, cost.csv, for `bench.run`
and `bench.cost`), against outside implementations (`outside_models`, for
`bench.compare_outside_models`; `xtransformers`, for `bench.compare_xtransformers`), and counted
against analytic FLOPs (`flop_count`, for `bench.flops`). Imports the model and one-run rooms
and the tracking writer (a speed table logged to MLflow); nothing of sweeps or findings (the
table in pyproject.toml).
"""
