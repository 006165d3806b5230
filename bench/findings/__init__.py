"""The findings room: what a sweep's runs say. A sweep's runs as the report sees them (`runs`),
a result's per-seed values read back and held against its grid (`perseed`), the values a claim
(`bench.experiment.claims`) is about (`samples`), which of its seeds on a probe are vacuous
(`vacuity`), its exact tests (`stats`), looks (`sequential`) and verdicts (`verdicts`, their
words: `said`), what a claim's rows cost against its baseline (`costs`, from the interleaved
measurement), pre-registration (`prereg`) and the two together (`judge`), tables, figures,
findings.md whole (`page`) and the report (`render.render_sweep`), and a committed result
checked again (`verify`), its findings.md regenerated whole (`page.regenerate`). The modules
that can move a verdict are the registered analysis (`prereg.ANALYSIS`). Reads runs through
`bench.tracking.reader`, naming what a run measures and the tags it reads from
`bench.metrics`, not MLflow's schema (`bench.tracking.names`); never imports the one-run room
(`training`), the runner or the data and model rooms (the table in pyproject.toml).
"""
