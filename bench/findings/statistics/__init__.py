"""The statistics: numbers in, numbers out. The exact paired tests and their intervals (`stats`),
the looks and the family's error (`sequential`) and what a claim's metric can be by construction
(`bounds`). Imports numpy and scipy, and of bench the claims' schema alone: no pandas, no git,
no tables or figures (the table in pyproject.toml)."""
