"""The one-run room: train and evaluate one model from its config (`loop.train`), one step as
the paper takes it (`step`), scoring (`evaluate`), checkpoints, precision and memory. It returns
the run record `bench.record.RunResult` (`summary`). Imports the data and model rooms and the
ground floor; nothing of sweeps, tracking, findings or measurement (the table in
pyproject.toml).
"""
