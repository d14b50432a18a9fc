"""One push of a session at a time from a store: two pushes of one session (the background push after a run
and a `hil lab push` by hand) would create the same nodes and write the same blocks at once, and the loser
would see Tiled's 409 or a copy that is still being written. The first takes an exclusive ``flock`` on a
small file beside the store (released by the kernel however the push ends, SIGKILL included); the other
does not wait behind it and says so in one line - unless it is the run's own background push, which
waits (bounded) so that an analysis recorded while a live forwarder hands the session over goes too."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from daq.lab.names import Refused, check_session_id


def lock_path(store_path: str | os.PathLike, sid: str) -> Path:
    """``<store folder>/.<store file>.lab-push/<session id>.lock`` (ids are checked: a plain file name)."""
    store = Path(store_path)
    return store.parent / f".{store.name}.lab-push" / f"{check_session_id(sid)}.lock"


@contextmanager
def pushing(store_path: str | os.PathLike, sid: str, wait: float = 0.0) -> Iterator[None]:
    """Hold the push of ``sid`` from this store; Refused when another push of it holds it for longer than
    ``wait`` s (0: not at all)."""
    path = lock_path(store_path, sid)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Refused(f"another push of {sid} is in progress; this one leaves it to that one"
                                  + (f" (waited {wait:.0f} s)" if wait else "")) from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)  # closing releases the lock
