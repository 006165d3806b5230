"""Where a result comes from: the plan a sweep's trials serve, registered when it starts (`plan`),
the pre-registration check against git (`prereg`, through its one door `git`), whether the
trials ran one version of the code that trains (`trained`), the verdicts labelled by both
(`judge`), a committed result checked again as a reviewer would (`verify`, with the registered
code where today's differs) and the results that share its trials (`shared`). Above the
decision; knows no page (the table in pyproject.toml)."""
