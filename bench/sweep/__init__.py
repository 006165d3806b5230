"""The sweep room: the trials a grid file (`bench.experiment.grid`) expands to, each built whole
with its identity (`trials`) as the one `bench.trial.Trial`, what its claims can decide before
anything runs (`feasible`), GPU packing (`gpus`), the dry-run plan (`plan`) and running the
trials with Ray Tune (`runner`, `workers`), each handed to its worker as it is and logged to
MLflow. Imports the one-run room (it trains the trials), the tracking writer, and the findings
room's looks and report (rendered at the end of a sweep): the table in pyproject.toml.
"""
