"""Each claim's verdict, decided from the per-seed values: one part's numbers at one look
(`parts`; a cost claim's from the measurement, `costs`; vacuous seeds on a probe, `vacuity`),
the fixed sequence over the claims and looks that builds the findings table (`verdicts`), the
verdicts' words (`said`) and their evidence (`evidence`). Reads values through `reading`, tests
them with `statistics`; no git, no MLflow, no pages (the table in pyproject.toml)."""
