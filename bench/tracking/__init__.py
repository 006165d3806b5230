"""The tracking room: MLflow's schema for attnbench (`names`), the store (`store`), the writer
the runner's trials use (`writer`) and the reader the report uses (`reader`). The reader imports
MLflow, pandas and the names of what a run measures (`bench.metrics`) only; the writer also
reads the run record (`bench.record`), the trial as the sweep built it (`bench.trial`) and
`bench.provenance` (the table in pyproject.toml).
"""
