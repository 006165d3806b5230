"""The experiment room: what a grid file says, the one schema of an experiment (`grid.Grid`:
its trials' base, axes and seeds, its looks, its claims and its report), parsed once and carried
whole through the sweep, its looks and its report; claims as data (`claims`) and the table
layouts and figures a report may name (`layouts`). Imports the run's schema (`bench.config`)
and the tracking names, nothing of the rooms that run or read runs (the table in
pyproject.toml).
"""
