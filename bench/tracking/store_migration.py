"""Migrating a store's records to today's names, once: the runs logged under a renamed variant or
policy (`variants.renames.RENAMED`) get the trial hash and the params they would have today.

MLflow's API cannot change a param, so this rewrites an sqlite store's tables in one transaction:
the trial-hash tag of each run tagged with an earlier hash, and every param naming a renamed
variant or policy. It changes nothing else and deletes nothing; run again, it finds nothing to do.
"""

import sqlite3
from pathlib import Path

from variants.renames import RENAMED

from .names import HASH, ROLE
from .reader import StoreError

NAMED = {"model.variant": "model.variant", "layer.span_policy": "span_policy",
         "layer.mixing": "mixing", "model.attn.span_policy": "span_policy",
         "model.attn.mixing": "mixing"}  # a param -> what it names


def _db(uri: str) -> sqlite3.Connection:
    """The store's database; StoreError (exit 2) for a store that is not an sqlite file of
    attnbench runs."""
    if not uri.startswith("sqlite:///"):
        raise StoreError(f"{uri}: retag rewrites params, which only an sqlite store's file "
                         "allows (MLflow's API cannot change one); run it where the server's "
                         "sqlite file is", 2)
    path = Path(uri.removeprefix("sqlite:///"))
    if not path.is_file():
        raise StoreError(f"no MLflow store at {path}", 2)
    db = sqlite3.connect(path)
    try:
        found = db.execute("SELECT COUNT(*) FROM tags WHERE key = ?", (ROLE,)).fetchone()[0]
    except sqlite3.DatabaseError as err:
        db.close()
        raise StoreError(f"{path} is not an MLflow store ({err})", 2) from None
    if not found:
        db.close()
        raise StoreError(f"{path} is not an attnbench store: no run carries {ROLE}", 2)
    return db


def retag(uri: str, hashes: dict[str, str]) -> dict[str, int]:
    """Rewrite the store at `uri`: trial-hash tags in `hashes` (old -> new), params naming a
    renamed variant or policy; returns how many of each changed."""
    db = _db(uri)
    try:
        with db:  # one transaction: all of it, or nothing
            tags = sum(db.execute("UPDATE tags SET value = ? WHERE key = ? AND value = ?",
                                  (new, HASH, old)).rowcount for old, new in hashes.items())
            params = sum(db.execute("UPDATE params SET value = ? WHERE key = ? AND value = ?",
                                    (now, key, old)).rowcount
                         for key, kind in NAMED.items()
                         for (named, old), now in RENAMED.items() if named == kind)
    finally:
        db.close()
    return {"trial hashes": tags, "params": params}
