"""Reading runs: a sweep's runs from MLflow as the report sees them (`runs`), a result's
runs.csv read back and held against its grid (`perseed`), the files recorded beside it
(`records`: the plan each trial served, plan.json, and the code it imported, code.json; and
`measurement`, cost.csv), and the per-seed values a claim is about (`samples`). Below the
decision; imports nothing of the statistics, provenance or presentation (the table in
pyproject.toml)."""
