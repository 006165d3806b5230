"""The tests' time limits: hang guards, never what a test checks.

A test whose subprocess or wait runs past HANG fails because something hangs, not because the
machine is slow: 900 s is several times the slowest single command a test runs (a cut sweep of
2-8 trials of 60 steps, the docs' worked sweep in a fresh clone, lint-imports over the tree:
1-4 min each on a 2-core AVX2 EPYC beside the other pytest worker's sweeps), and well inside CI's
90 minutes should one hang. No test asserts that anything finished before a moment: a test that
needs a sweep cut while trials are open holds them (tests/plugins/hold.py).
"""

HANG = 900  # seconds
