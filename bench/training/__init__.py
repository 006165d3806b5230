"""The one-run room: train and evaluate one model from its config (`loop.train`), one step as
the paper takes it (`step`), scoring (`evaluate`), checkpoints, precision, memory, and what a
run records (`record.RunResult`, `provenance`). Imports the data and model rooms and the run
schema; nothing of sweeps, tracking, findings or measurement.
"""
