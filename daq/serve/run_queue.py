"""The run queue of ``hil serve``, kept in a JSON file next to the session store so that a restart loses no
queued run.

The file (``<store folder>/serve-queue.json``) holds ``queued`` (runs waiting, in order), ``current`` (the
run being executed, or null) and ``finished`` (the last :data:`KEEP_FINISHED` outcomes). Every change is
written whole to a temporary file in the same folder, flushed to disk and renamed over the old one, so a
crash leaves the old or the new queue, never half of one. A second server on the same store is refused
(an exclusive lock on ``serve-queue.lock``).

When a server starts and finds a ``current`` run, that run was in progress when the last server died: it
goes to ``finished`` as ``interrupted``; its session (if it got one) is marked ``incomplete`` by the store's
own recovery of sessions whose writer is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from daq import json_codec
from daq.errors import ConfigError

QUEUE_FILE = "serve-queue.json"
LOCK_FILE = "serve-queue.lock"
KEEP_FINISHED = 50


@dataclass
class RunEntry:
    """One run asked for through the API."""

    id: str
    config: str                       # the config's file name in the server's configs folder
    by: str                           # the token's name: who asked
    queued_at: float
    started_at: float | None = None
    ended_at: float | None = None
    session: str | None = None        # the session it recorded, once it exists
    status: str = "queued"  # queued | running | complete | aborted | incomplete | failed | interrupted
    reason: str | None = None
    safe: bool | None = None
    result: dict | None = None        # RunResult.to_dict() of the lifecycle (what `hil run --json` says)
    kind: str | None = None
    sim_speed: float | None = None    # a simulated rig's clock speed asked for (None: the config's)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunEntry:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class RunQueue:
    """The queue file of a store folder; every method writes the file before it returns."""

    folder: Path
    queued: list[RunEntry] = field(default_factory=list)
    current: RunEntry | None = None
    finished: list[RunEntry] = field(default_factory=list)
    _lock_fd: int | None = None

    def __post_init__(self) -> None:
        self._mutex = threading.Lock()

    @property
    def path(self) -> Path:
        return self.folder / QUEUE_FILE

    @classmethod
    def open(cls, folder: Path) -> RunQueue:
        """Lock and read the queue of ``folder``; a run left ``current`` by a dead server is finished as
        ``interrupted``."""
        folder.mkdir(parents=True, exist_ok=True)
        q = cls(folder)
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise ConfigError(f"another hil serve uses the store in {folder} (lock {folder / LOCK_FILE})") \
                from None
        q._lock_fd = fd
        if q.path.exists():
            try:
                data = json_codec.loads(q.path.read_text())
            except (OSError, ValueError) as exc:
                q.close()
                raise ConfigError(f"run queue {q.path} is unreadable ({exc}); move it away to start afresh") \
                    from None
            q.queued = [RunEntry.from_dict(d) for d in data.get("queued", [])]
            q.finished = [RunEntry.from_dict(d) for d in data.get("finished", [])]
            cur = data.get("current")
            if cur:
                entry = RunEntry.from_dict(cur)
                entry.status = "interrupted"
                entry.reason = "hil serve stopped while this run was in progress"
                entry.ended_at = entry.ended_at or time.time()
                q.finished.insert(0, entry)
        q.save()
        return q

    def close(self) -> None:
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
            self._lock_fd = None

    def save(self) -> None:
        data = {"version": 1, "queued": [e.to_dict() for e in self.queued],
                "current": self.current.to_dict() if self.current else None,
                "finished": [e.to_dict() for e in self.finished[:KEEP_FINISHED]]}
        tmp = self.folder / f".{QUEUE_FILE}.{uuid.uuid4().hex[:8]}.part"
        try:
            with open(tmp, "w") as f:
                f.write(json_codec.dumps(data, indent=2, default=str))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    # ------------------------------------------------------------------------------- changes

    def add(self, config: str, by: str, sim_speed: float | None = None) -> RunEntry:
        with self._mutex:
            entry = RunEntry(uuid.uuid4().hex[:12], config, by, time.time(), sim_speed=sim_speed)
            self.queued.append(entry)
            self.save()
            return entry

    def remove(self, run_id: str) -> RunEntry | None:
        with self._mutex:
            for e in self.queued:
                if e.id == run_id:
                    self.queued.remove(e)
                    self.save()
                    return e
            return None

    def take(self, may_start: Callable[[RunEntry], bool] = lambda entry: True) -> RunEntry | None:
        """The next queued run that ``may_start`` (a locked rig starts its holder's runs only), now
        ``current``."""
        with self._mutex:
            entry = next((e for e in self.queued if may_start(e)), None) if self.current is None else None
            if entry is None:
                return None
            self.queued.remove(entry)
            entry.status, entry.started_at = "running", time.time()
            self.current = entry
            self.save()
            return entry

    def update(self, **changes: Any) -> None:
        with self._mutex:
            if self.current is not None:
                for k, v in changes.items():
                    setattr(self.current, k, v)
                self.save()

    def finish(self, status: str, reason: str | None, result: dict | None = None,
               safe: bool | None = None) -> RunEntry | None:
        with self._mutex:
            entry = self.current
            if entry is None:
                return None
            entry.status, entry.reason, entry.result, entry.safe = status, reason, result, safe
            entry.ended_at = time.time()
            self.finished.insert(0, entry)
            del self.finished[KEEP_FINISHED:]
            self.current = None
            self.save()
            return entry

    def find(self, run_id: str) -> tuple[str, RunEntry] | None:
        """(where, entry) for a run id (or its session id): where is queued, current or finished."""
        with self._mutex:
            if self.current is not None and run_id in (self.current.id, self.current.session):
                return "current", self.current
            for where, entries in (("queued", self.queued), ("finished", self.finished)):
                for e in entries:
                    if run_id in (e.id, e.session):
                        return where, e
            return None

    def snapshot(self) -> dict:
        with self._mutex:
            return {"queued": [e.to_dict() for e in self.queued],
                    "current": self.current.to_dict() if self.current else None,
                    "finished": [e.to_dict() for e in self.finished[:20]]}
