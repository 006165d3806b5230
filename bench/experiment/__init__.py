"""The experiment room: what a grid file says, the one schema of an experiment (`grid.Grid`:
its status, its trials' base, axes and seeds, its looks, its claims and its report), opened one
way (`open.open_grid`: read, plugins imported, overrides applied) and carried whole through the
sweep, its looks and its report; every grid in one generated table (`catalogue`); claims as data
(`claims`), what each setting pays on its probes without recall, in closed form (`floors`),
and the table layouts and figures a report may name (`layouts`). Imports the run's schema
(`bench.config`), the plugins, the corpora's options (for --data), the probes' closed forms
and the names of what a run measures (`bench.metrics`), nothing of tracking or of the rooms
that run or read runs (the table in pyproject.toml).
"""
