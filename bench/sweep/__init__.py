"""The sweep room: what a grid file may say (`grid`), the trials it expands to, built whole
with their identities (`trials`), what its claims can decide before anything runs
(`feasible`), the dry-run plan (`plan`) and running the trials with Ray Tune, each logged to
MLflow (`runner`). Imports the one-run room (it trains the trials), the tracking writer, and the
findings room's claim and report schemas (a grid declares both) and its report (rendered at the
end of a sweep): the table in pyproject.toml.
"""
