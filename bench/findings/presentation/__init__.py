"""What the findings show: the paper-style tables (`tables`), the figures (`figures`), the cost
block (`costs`), findings.md whole (`page`), the sweep's MLflow page (`runpage`), the report
(`render.render_sweep`) and the experiments' READMEs (`folders`). The top layer: nothing below
it imports it (the table in pyproject.toml)."""
