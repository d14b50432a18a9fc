"""Room held back on the store's disk while a run records, given up when the run ends.

A full disk stops the recorder mid-run; what the run must still write after that - the plan's outcome
(safe or not) and the session's end - needs a few pages of its own. SQLite cannot reserve them, and with
32 KiB pages one small commit appends more to the WAL than a nearly full disk may have. So a run holds a
ballast file next to the store (allocated up front, ``posix_fallocate``) and deletes it before it writes its
outcome: whatever the recorder left, that much room is there.

A run killed before its clean-up leaves its ballast behind; the next run on the store deletes the files of
processes that no longer exist.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from daq.store.store_file import pid_alive

log = logging.getLogger(__name__)

RESERVE_BYTES = 512 * 1024  # the outcome and the session's end: a handful of 32 KiB pages, with a margin
_SUFFIX = ".reserve-"


class DiskReserve:
    """``hold()`` at the start of a run, ``release()`` before the writes that must not fail."""

    def __init__(self, store_path: Path, size: int = RESERVE_BYTES):
        self.path = store_path.with_name(f"{store_path.name}{_SUFFIX}{os.getpid()}")
        self.size = size

    def hold(self) -> bool:
        """Allocate the ballast (after removing the ballast of dead runs); False when the disk has no room
        for it - the run goes on, it only lacks the margin."""
        _remove_stale(self.path.parent, self.path.name.split(_SUFFIX)[0])
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            log.warning("no room held for the session's end on %s: %s", self.path.parent, exc)
            return False
        try:
            _allocate(fd, self.size)
            return True
        except OSError as exc:
            log.warning("no room held for the session's end on %s: %s", self.path.parent, exc)
            self.release()
            return False
        finally:
            os.close(fd)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


def _allocate(fd: int, size: int) -> None:
    """Blocks really taken on the disk (a sparse file would give nothing back)."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (95, 22):  # EOPNOTSUPP / EINVAL: a file system without fallocate
            raise
        block = b"\0" * 65536
        for _ in range(0, size, len(block)):
            os.write(fd, block)
        os.fsync(fd)


def _remove_stale(folder: Path, store_name: str) -> None:
    for path in folder.glob(f"{store_name}{_SUFFIX}*"):
        try:
            pid = int(path.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if pid != os.getpid() and not pid_alive(pid):
            with contextlib.suppress(OSError):
                path.unlink()
