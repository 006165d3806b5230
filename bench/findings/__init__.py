"""The findings room: what a sweep's runs say. A sweep's runs as the report sees them (`runs`),
the per-seed values a claim (`bench.experiment.claims`) is about (`samples`), its exact tests
(`stats`), looks (`sequential`) and verdicts (`verdicts`), pre-registration (`prereg`), tables,
figures and the report (`report.render_sweep`), and a committed result checked again
(`verify`). Reads runs through `bench.tracking.reader`, naming what a run measures and the tags
it reads from `bench.metrics`, not MLflow's schema (`bench.tracking.names`; `samples` alone
keeps its import from there, its bytes being part of every registered plan: `prereg.ANALYSIS`);
never imports the one-run room (`training`), the runner or the data and model rooms (the table
in pyproject.toml).
"""
