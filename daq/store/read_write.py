"""SessionStore: a reader and a writer on one store file, for code that does both (the recorder, the
run life cycle, the demo, imports). Everything it does is :class:`SessionReader`'s or
:class:`SessionWriter`'s; code that only reads should take a :class:`SessionReader`.
"""

from __future__ import annotations

import os

from daq.bus.frames import Event, Frame
from daq.store.reader import SessionReader
from daq.store.store_file import STALE_AFTER_S
from daq.store.writer import FLUSH_INTERVAL_S, SessionWriter


class SessionStore(SessionReader):
    """An embedded session store in one SQLite file: every read of :class:`SessionReader` (it is one,
    so it goes wherever a reader does) plus the writes of a :class:`SessionWriter` sharing its
    connection, so reads see each commit at once.

    Opens (or creates, when ``create``) the store at ``path``; ``recover``: mark sessions whose
    writer is gone as ``incomplete`` on open.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        create: bool = True,
        recover: bool = True,
        flush_interval: float = FLUSH_INTERVAL_S,
    ):
        super().__init__(path, create=create, recover=recover)
        self.writer = SessionWriter(self._file, flush_interval=flush_interval)
        # the writer's own bound method: append runs for every block of a recording, one call less each
        self.append = self.writer.append  # type: ignore[method-assign]

    # ------------------------------------------------------------------ writing (SessionWriter)

    def create_session(
        self, kind: str, config: dict, devices: dict[str, dict] | None = None, session_id: str | None = None
    ) -> str:
        return self.writer.create_session(kind, config, devices, session_id)

    def append(self, session_id: str, msg: Frame | Event) -> None:
        self.writer.append(session_id, msg)

    def flush(self) -> None:
        self.writer.flush()

    def heartbeat(self) -> None:
        self.writer.heartbeat()

    def finish(self, session_id: str, status: str, reason: str | None = None) -> None:
        self.writer.finish(session_id, status, reason)

    def set_stats(self, session_id: str, stats: dict) -> None:
        self.writer.set_stats(session_id, stats)

    def recover(self, stale_after: float = STALE_AFTER_S) -> list[str]:
        return self._file.recover(stale_after)

    @property
    def flush_interval(self) -> float:
        return self.writer.flush_interval

    @flush_interval.setter
    def flush_interval(self, value: float) -> None:
        self.writer.flush_interval = value

    # the writer's state, for tests that look inside
    @property
    def _owned(self) -> set[str]:
        return self.writer._owned

    @property
    def _oldest(self) -> float | None:
        return self.writer._oldest

    # ------------------------------------------------------------------ life cycle

    def close(self) -> None:
        """Flush and close (sessions still running stay running: finish them first)."""
        self.writer.close()
