"""The findings room: what a sweep's runs say, in layers, each importing only the ones below it
(the table in pyproject.toml):

- `statistics`: the exact paired tests, the looks and the family's error, what a claim's metric
  can be by construction (numpy and scipy; of bench, the claims' schema alone);
- `reading`: a sweep's runs from MLflow, a result's runs.csv and the files beside it (the plan
  each trial served, the code it imported, the cost measurement), the per-seed values a claim
  is about;
- `decision`: each claim's verdict, look by look, in one fixed sequence per grid, with its words,
  its evidence, its vacuous seeds and its costs;
- `provenance`: the plan registered when a sweep starts, checked against git (`prereg`), the
  verdicts labelled by it (`judge`), a committed result checked again as a reviewer would
  (`verify`);
- `presentation`: tables, figures, the cost block, findings.md whole (`page`), the sweep's
  MLflow page, the report (`render.render_sweep`) and the experiments' READMEs.

The modules that can move a verdict are the registered analysis (`provenance.plan.ANALYSIS`).
Reads runs through `bench.tracking.reader`, naming what a run measures and the tags it reads
from `bench.metrics`, not MLflow's schema (`bench.tracking.names`); never imports the one-run
room (`training`), the runner or the data and model rooms.
"""
