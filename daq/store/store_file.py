"""One open session store file: its connection and lock, who this process is, and crash recovery.

Readers and writers of the same file in one process share a :class:`StoreFile` (one connection, so
a reader sees every commit of the writer at once).

Crash detection: a writer stamps its session with host, pid and a heartbeat that every commit
refreshes (and the recorder refreshes at least every 0.5 s even without data). Opening a store
marks a ``running`` session ``incomplete`` when its writer is certainly gone: the writer ran on
this host and its pid no longer exists (or is a zombie), or its heartbeat is older than
``STALE_AFTER_S`` (covers other hosts, pid reuse and hung writers). Everything committed before
the crash stays readable: SQLite's WAL guarantees that a committed transaction survives SIGKILL.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from pathlib import Path

from daq.store.errors import StoreError
from daq.store.store_format import open_store_db, second_connection

#: A running session whose heartbeat is older than this is considered abandoned, s.
STALE_AFTER_S = 30.0


class StoreFile:
    """The store at ``path``, opened (or created, when ``create``) and brought to the current format.

    ``recover``: mark sessions whose writer is gone as ``incomplete`` on open.
    """

    def __init__(self, path: str | os.PathLike, *, create: bool, recover: bool):
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise StoreError(f"no session store at {self.path}")
        if create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory for {self.path}: {exc.strerror}") from None
        self.lock = threading.RLock()
        try:
            #: opened read-only (a file or folder this process cannot write): reads work, writes fail
            self.db, self.read_only = open_store_db(self.path, create)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a usable session store: {exc}") from None
        self.host = socket.gethostname()
        self.pid = os.getpid()
        #: Sessions this process writes through this file (recovery leaves them alone).
        self.owned: set[str] = set()
        #: Sessions found abandoned that could not be marked (a full disk, a read-only file): id ->
        #: reason. Readers show them as ``incomplete`` all the same; the next open with room marks them.
        self.unmarked: dict[str, str] = {}
        if recover:
            self.recover()

    @classmethod
    def of(cls, source: str | os.PathLike | StoreFile, *, create: bool, recover: bool) -> StoreFile:
        """``source`` itself when it is an open file (shared), else the file at that path, opened."""
        return source if isinstance(source, StoreFile) else cls(source, create=create, recover=recover)

    def recover(self, stale_after: float = STALE_AFTER_S) -> list[str]:
        """Mark ``running`` sessions whose writer is gone as ``incomplete``; returns their ids."""
        now = time.time()
        gone = []
        with self.lock:
            rows = self.db.execute(
                "SELECT id, writer_host, writer_pid, heartbeat FROM sessions WHERE status='running'"
            ).fetchall()
            for sid, host, pid, heartbeat in rows:
                if sid in self.owned:
                    continue
                if host == self.host and pid is not None and not pid_alive(pid):
                    gone.append((sid, f"writer process {pid} on {host} is gone"))
                elif heartbeat is None or now - heartbeat > stale_after:
                    gone.append(
                        (sid, f"no heartbeat from writer {host}:{pid} for {now - (heartbeat or 0):.0f} s")
                    )
            try:
                if gone and self.read_only:
                    raise sqlite3.OperationalError("the store is read-only here")
                for sid, reason in gone:
                    self.db.execute(
                        "UPDATE sessions SET status='incomplete', reason=?, "
                        "ended=COALESCE(ended, heartbeat) WHERE id=? AND status='running'",
                        (reason, sid),
                    )
                    self.unmarked.pop(sid, None)
            except sqlite3.OperationalError as exc:  # disk full, read-only file or folder, locked
                if self.db.in_transaction:
                    self.db.rollback()
                for sid, reason in gone:
                    self.unmarked[sid] = f"{reason} (not recorded in the store: {exc})"
        return [sid for sid, _ in gone]

    def second_connection(self) -> sqlite3.Connection:
        """A connection of its own for a long streamed read (its own snapshot, any thread), read-only
        when the store is."""
        return second_connection(self.path, self.read_only)

    def close(self) -> None:
        with self.lock:
            self.db.close()


def pid_alive(pid: int) -> bool:
    """False only when no process ``pid`` exists or it is a zombie (Linux /proc aware); True when it runs,
    belongs to another user, or the OS cannot tell (the callers' actions on a dead pid - marking a session
    incomplete, deleting a run's announcement - must not happen on a guess). The one liveness check of the
    store's crash recovery, its disk reserve and the run announcements."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: someone else's process, alive; anything else: we cannot tell
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        state = stat[stat.rindex(b")") + 2 :][:1]
        return state not in (b"Z", b"X")
    except (OSError, ValueError):
        return True
