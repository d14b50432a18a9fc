"""Which store a file is, checked on open before anything is written: its format, its tables' columns, and
whether this process may write it.

* a store of a *newer* format than this code knows is refused in one line and never written;
* an *older* one is migrated explicitly, one step per format (:data:`MIGRATIONS`), saying so in the log -
  or, when it cannot be written, refused in one line that says how to migrate it;
* a table that lacks a column this code reads (renamed, dropped: a damaged or foreign file) is refused in
  one line naming the table and the columns, instead of a sqlite3 error at the first query;
* a file or folder this process cannot write (an archive on read-only media, a chmod'ed copy, another
  user's store) is opened read-only: every read works, a write fails with a clear store error.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import urllib.parse
from collections.abc import Callable
from functools import cache
from pathlib import Path

from daq.store import schema
from daq.store.errors import StoreError

log = logging.getLogger(__name__)

#: format -> the step that brings a store of that format to the next one (in one transaction).
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: schema.migrate_to_format_2}
CURRENT = int(schema.STORE_FORMAT)


class StoreFormatError(StoreError):
    """The file is not a store this code may read or write as it is (newer, older and read-only, or
    lacking columns); nothing was written to it."""


def may_write(path: Path) -> bool:
    """True when this process may write the store file and create its journal files beside it."""
    if not path.exists():
        return True
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)


def open_store_db(path: Path, create: bool) -> tuple[sqlite3.Connection, bool]:
    """A checked connection to the store at ``path`` and whether it is read-only (see the module)."""
    if create or may_write(path):
        db = schema.connect(path)
        try:
            _bring_up_to_date(db, path)
        except BaseException:
            db.close()
            raise
        return db, False
    db = _connect_read_only(path)
    try:
        found = stored_format(db)
        if found is None:
            raise StoreFormatError(f"{path} is not a session store (no format mark) and is read-only here")
        _refuse_newer(path, found)
        if found < CURRENT:
            raise StoreFormatError(
                f"{path} is a session store of format {found}, older than this hil-lab's {CURRENT}, and "
                f"read-only here: copy it to a writable folder and open it there once to migrate it")
        check_columns(db, path)
    except BaseException:
        db.close()
        raise
    return db, True


def stored_format(db: sqlite3.Connection) -> int | None:
    """The format mark of the store (None: a new, empty file); a mark that is not a whole number counts as
    newer than any this code knows."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'").fetchone() is None:
        return None
    row = db.execute("SELECT value FROM meta WHERE key='format'").fetchone()
    if row is None:
        return None
    text = str(row[0]).strip()
    return int(text) if text.isdigit() else 10**9


def _refuse_newer(path: Path, found: int) -> None:
    if found > CURRENT:
        shown = "unknown" if found == 10**9 else str(found)
        raise StoreFormatError(
            f"{path} is a session store of format {shown}, newer than this hil-lab's {CURRENT}: open it with "
            f"the hil-lab that wrote it (nothing was written to it)")


def _bring_up_to_date(db: sqlite3.Connection, path: Path) -> None:
    found = stored_format(db)
    if found is not None:
        _refuse_newer(path, found)
        if found < CURRENT:
            log.warning("migrating the session store %s from format %d to %d", path, found, CURRENT)
            for step in range(found, CURRENT):
                MIGRATIONS[step](db)
    schema.prepare(db)
    check_columns(db, path)


@cache
def _expected_columns() -> dict[str, frozenset[str]]:
    """Table -> the columns of the current format (from the schema itself, in memory)."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.executescript(schema.SCHEMA)
        tables = [r[0] for r in mem.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: frozenset(r[1] for r in mem.execute(f"PRAGMA table_info({t})")) for t in tables}
    finally:
        mem.close()


def check_columns(db: sqlite3.Connection, path: Path) -> None:
    """Refuse a store whose tables lack columns this code reads (one line naming them)."""
    for table, expected in _expected_columns().items():
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        missing = sorted(expected - have)
        if missing:
            what = f"table {table} has no column {', '.join(missing)}" if have else f"has no table {table}"
            raise StoreFormatError(f"{path} {what}: not a session store this hil-lab can read (renamed or "
                                   f"damaged?)")


def second_connection(path: Path, read_only: bool) -> sqlite3.Connection:
    """Another connection to a store already opened and checked (a streamed read in a thread of its own)."""
    if read_only:
        return _connect_read_only(path)
    return sqlite3.connect(path, timeout=10.0, check_same_thread=False)


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection; ``immutable`` when SQLite cannot even make its shared-memory file beside a
    WAL store (a read-only folder): nobody can change such a store under us."""
    uri = "file:" + urllib.parse.quote(str(path.resolve()))
    last: sqlite3.Error | None = None
    for mode in ("mode=ro", "mode=ro&immutable=1"):
        db = sqlite3.connect(f"{uri}?{mode}", uri=True, isolation_level=None, check_same_thread=False,
                             timeout=10.0)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.Error as exc:
            db.close()
            last = exc
    raise StoreError(f"cannot read the session store {path}: {last}")
