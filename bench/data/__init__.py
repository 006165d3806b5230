"""The data room: corpora, registered like variants, and batching.

A corpus is built by name (`build(name, **options)`, options declared by its options class)
and describes itself: its splits, identity, floors and probes where it knows them (`Corpus`).
Built in: enwik8, text8, file (`text.py`) and the generated corpus (`synthetic.py`) with its
probes (`probes/`, one a module); a plugin adds one with `register(name, options, build)`.
Imports: numpy and torch, nothing of variants, and of bench only `bench.declare.option`, the
one way an option is declared, which variants use too (the table in pyproject.toml).
"""

from . import synthetic as _synthetic  # noqa: F401  (registers synthetic)
from . import text as _text  # noqa: F401  (registers enwik8, text8, file)
from .batches import eval_batches, train_batches
from .corpus import SPLITS, Corpus, DataError, split_sizes
from .registry import build, check_name, fitted, names, options, register, vocab_size

__all__ = ["SPLITS", "Corpus", "DataError", "build", "check_name", "eval_batches", "fitted",
           "names", "options", "register", "split_sizes", "train_batches", "vocab_size"]
