"""A rig's lock: one person keeps everyone else's runs off the rig while they work in the cell.

As bluesky-queueserver's queue lock: whoever locks it names themselves (the caller's token or lab key, never
a claim) and says why (a note); while it holds, runs queued by anyone else are refused (HTTP 423 naming
who, since when and the note) and runs others queued before it stay queued (the runner does not start
them). The holder unlocks; an admin may break anyone's lock, and that is recorded.

The lock lives in ``serve-lock.json`` next to the run queue (mode 0600, replaced atomically), so a restart
of ``hil serve`` keeps it; every lock, unlock and break is appended to ``serve-audit.jsonl`` beside it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from daq.errors import ConfigError
from daq.serve.auth import write_atomically
from daq.serve.problems import RequestError

LOCK_FILE = "serve-lock.json"
AUDIT_FILE = "serve-audit.jsonl"
NOTE_LIMIT = 500  # characters of a note, at most


class Locked(RequestError):
    """The rig is locked by someone else (HTTP 423 Locked)."""

    status = 423


@dataclass(frozen=True)
class Lock:
    """Who holds the rig, since when (unix time, s) and why."""

    by: str
    at: float
    note: str

    def as_dict(self) -> dict:
        iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at))
        return {"locked": True, **asdict(self), "at_iso": iso}

    def words(self) -> str:
        """``alice since 2026-11-28T17:40:00Z: "in the cell"``."""
        return f"{self.by} since {self.as_dict()['at_iso']}" + (f': "{self.note}"' if self.note else "")


UNLOCKED = {"locked": False, "by": None, "at": None, "at_iso": None, "note": None}


class RigLock:
    """The lock file of a store folder; every change is on disk before the method returns."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self.audit_path = self.folder / AUDIT_FILE
        self._mutex = threading.Lock()
        self.held: Lock | None = self._read()

    def _read(self) -> Lock | None:
        if not self.path.exists():
            return None
        try:
            data = json.loads(self.path.read_text())
            return Lock(str(data["by"]), float(data["at"]), str(data.get("note") or ""))
        except (OSError, ValueError, KeyError, TypeError):
            raise ConfigError(f"rig lock {self.path} is unreadable: move it away to unlock the rig") from None

    def state(self) -> dict:
        held = self.held
        return held.as_dict() if held else dict(UNLOCKED)

    def may_queue(self, who: str | None) -> bool:
        """True when ``who``'s runs may go on the rig now (nobody else holds it)."""
        held = self.held
        return held is None or held.by == who

    def check_queue(self, who: str | None) -> None:
        """Locked (423) when the rig is held by someone other than ``who``."""
        held = self.held
        if held is not None and held.by != who:
            raise Locked(f"the rig is locked by {held.words()}; runs of others are refused until "
                         f"{held.by} unlocks it (or an admin breaks the lock)")

    def lock(self, who: str, note: str) -> Lock:
        """Take the rig for ``who`` (their own lock: the note is updated); Locked when another holds it."""
        note = " ".join(note.split())[:NOTE_LIMIT]
        with self._mutex:
            held = self.held
            if held is not None and held.by != who:
                raise Locked(f"the rig is already locked by {held.words()}")
            new = Lock(who, held.at if held else time.time(), note)
            write_atomically(self.path, json.dumps(asdict(new)) + "\n")
            self.held = new
            self._record("lock" if held is None else "note", who, new)
            return new

    def unlock(self, who: str, admin: bool) -> Lock | None:
        """Release the rig: its holder, or an admin (a break, recorded); Locked for anyone else. The lock
        that was released (None when the rig was not locked)."""
        with self._mutex:
            held = self.held
            if held is None:
                return None
            if held.by != who and not admin:
                raise Locked(f"the rig is locked by {held.words()}: only {held.by} or an admin may unlock it")
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self.held = None
            self._record("unlock" if held.by == who else "break", who, held)
            return held

    def _record(self, action: str, who: str, lock: Lock) -> None:
        entry = {"time": time.time(), "action": action, "by": who, "lock": asdict(lock)}
        fd = os.open(self.audit_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def audit(self) -> list[dict]:
        """Every recorded lock, unlock and break, oldest first."""
        if not self.audit_path.exists():
            return []
        return [json.loads(line) for line in self.audit_path.read_text().splitlines() if line.strip()]
