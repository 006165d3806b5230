"""The findings room: what a sweep's runs say. Claims as data and their paired statistics
(`claims`, `stats`), the paper tables as data (`layouts`), tables, figures and the report
(`report.render_sweep`), with the per-seed values a claim is about (`samples`), its exact tests
(`stats`), looks (`sequential`) and verdicts (`verdicts`). Reads runs through
`bench.tracking.reader` and a grid file's report spec (`spec`); never imports the one-run room
(`training`), the runner or the data and model rooms (the table in pyproject.toml).
"""
