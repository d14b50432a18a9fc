"""The writing side of a session store: create a session, append its frames and events in batches,
finish it.

Writes are buffered by :meth:`SessionWriter.append` and committed by :meth:`SessionWriter.flush`,
which happens automatically once the oldest buffered message is ``flush_interval`` old (0.25 s);
the recorder also flushes when idle, so committed data is never more than 0.5 s behind. Every
commit refreshes the heartbeat of the sessions this writer owns (see :mod:`daq.store.store_file`).
"""

from __future__ import annotations

import math
import operator
import os
import sqlite3
import time
import uuid
from typing import Self

import numpy as np

from daq import json_codec
from daq.bus.frames import (
    IMMUTABLE_BUFFERS,
    SUPPORTED_DTYPES,
    Event,
    Frame,
    FrameError,
    frame_header,
    frame_payload,
)
from daq.store.errors import StoreError, UnknownSession
from daq.store.payload import frame_span
from daq.store.records import FINAL_STATUSES
from daq.store.schema import FRAME_COLS
from daq.store.store_file import StoreFile
from daq.version import software_version

#: Default time after which buffered messages are committed, s.
FLUSH_INTERVAL_S = 0.25
#: Buffered payload size that forces a commit, bytes.
FLUSH_BYTES = 32 * 1024 * 1024
#: Largest sequence number SQLite's INTEGER holds (exclusive).
_SEQ_LIMIT = 2**63
_INF = math.inf
#: Little-endian (or byte-wide) dtypes of the bus: their ``tobytes`` is the stored payload as is.
_NATIVE_DTYPES = frozenset(SUPPORTED_DTYPES.values())


class SessionWriter:
    """Write sessions into the store at ``source`` (a path, or a :class:`StoreFile` shared with a
    reader). ``create``: create the store when there is none; ``recover``: mark sessions whose
    writer is gone as ``incomplete`` on open."""

    def __init__(
        self,
        source: str | os.PathLike | StoreFile,
        *,
        create: bool = True,
        recover: bool = True,
        flush_interval: float = FLUSH_INTERVAL_S,
    ):
        self._file = StoreFile.of(source, create=create, recover=recover)
        self.path = self._file.path
        self.flush_interval = flush_interval
        self._db = self._file.db
        self._lock = self._file.lock
        self._host = self._file.host
        self._pid = self._file.pid
        self._owned = self._file.owned  # shared with the file: its recovery leaves them alone
        self._frames: list[tuple] = []
        self._events: list[tuple] = []
        self._buffered_bytes = 0
        self._oldest: float | None = None
        self._ord: dict[str, int] = {}
        self._layout: dict[tuple[str, str], tuple] = {}  # (session, stream) -> stream row
        # (session, stream) -> (channels, units, dtype, width, tail, key) of its last fully validated frame
        # (see _append_steady)
        self._steady: dict[tuple[str, str], tuple] = {}
        self._pending_streams: list[tuple] = []
        self._pending_counts: dict[tuple[str, str], list] = {}
        self._pending_nonmono: set[tuple[str, str]] = set()
        # (session, stream) -> [next sample index, t_max of the last non-empty frame, monotonic]
        self._tails: dict[tuple[str, str], list] = {}
        self._last_heartbeat = 0.0

    # ------------------------------------------------------------------ sessions

    def create_session(
        self, kind: str, config: dict, devices: dict[str, dict] | None = None, session_id: str | None = None
    ) -> str:
        """Start a new ``running`` session owned by this process; returns its id."""
        if not isinstance(kind, str) or not kind:
            raise StoreError("session kind must be a non-empty string")
        sid = session_id or uuid.uuid4().hex[:12]
        now = time.time()
        try:
            config_json = json_codec.dumps(config, default=str)
            devices_json = json_codec.dumps(devices or {}, default=str)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"config/devices are not JSON-serialisable: {exc}") from None
        with self._lock:
            try:
                self._db.execute(
                    "INSERT INTO sessions (id, kind, status, started, config, software_version, devices, "
                    "writer_host, writer_pid, heartbeat) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                    (
                        sid,
                        kind,
                        now,
                        config_json,
                        software_version(),
                        devices_json,
                        self._host,
                        self._pid,
                        now,
                    ),
                )
            except sqlite3.IntegrityError:
                raise StoreError(f"session {sid} already exists") from None
        self._owned.add(sid)
        self._ord[sid] = 0
        return sid

    def finish(self, session_id: str, status: str, reason: str | None = None) -> None:
        """Flush and close a session with a final status (complete, aborted or incomplete)."""
        if status not in FINAL_STATUSES:
            raise StoreError(f"final status must be one of {', '.join(FINAL_STATUSES)}, got {status!r}")
        self.flush()
        with self._lock:
            cur = self._db.execute(
                "UPDATE sessions SET status=?, reason=?, ended=?, heartbeat=? WHERE id=?",
                (status, reason, time.time(), time.time(), session_id),
            )
        if cur.rowcount == 0:
            raise UnknownSession(f"unknown session {session_id!r}")
        self._owned.discard(session_id)

    def set_stats(self, session_id: str, stats: dict) -> None:
        """Attach recorder statistics (received, gaps, malformed ...) to a session."""
        with self._lock:
            self._db.execute("UPDATE sessions SET stats=? WHERE id=?", (json_codec.dumps(stats), session_id))

    # ------------------------------------------------------------------ writing

    def append(self, session_id: str, msg: Frame | Event) -> None:
        """Buffer one message of a running session (validated now, committed by flush)."""
        if type(msg) is Frame and session_id in self._owned:
            steady = self._steady.get((session_id, msg.stream))
            if steady is not None and self._append_steady(session_id, msg, steady):
                return
        if session_id not in self._owned:
            self._require_running(session_id)
        if session_id not in self._ord:
            self._ord[session_id] = self._max_ord(session_id) + 1
        ordinal = self._ord[session_id]
        if isinstance(msg, Frame):
            # first frame of a stream, a new layout, timestamps or anything odd: validated in full
            try:
                h = frame_header(msg)
                payload = bytes(frame_payload(msg))
            except (FrameError, TypeError, ValueError) as exc:
                raise StoreError(f"refusing frame of stream {msg.stream!r}: {exc}") from None
            ts = np.asarray(msg.timestamps, dtype=np.float64) if h["timestamps"] else None
            _check_numbers(f"frame of stream {msg.stream!r}", msg.seq, {"t0": h["t0"], "dt": h["dt"]}, ts)
            self._check_layout(session_id, h)
            stream, t0, dt, n = h["stream"], h["t0"], h["dt"], h["shape"][0]
            t_min, t_max, inside = frame_span(t0, dt, n, ts)
            key = (session_id, stream)
            tail = self._tails.get(key)
            if tail is None:
                tail = self._tails[key] = self._stream_tail(session_id, stream)
            if n and tail[2] and not (inside and t_min >= tail[1]):
                tail[2] = False
                self._pending_nonmono.add(key)
            self._frames.append(
                (
                    session_id,
                    ordinal,
                    stream,
                    h["seq"],
                    t0,
                    dt,
                    n,
                    int(h["timestamps"]),
                    int(msg.replay),
                    payload,
                    tail[0],
                    t_min,
                    t_max,
                )
            )
            tail[0] += n
            if n:
                tail[1] = t_max
            self._buffered_bytes += len(payload)
            t_lo, t_hi = (t0, t0) if t_min is None else (t_min, t_max)
            self._note_stream(key, n, t_lo, t_hi)
            if ts is None and msg.data.dtype in _NATIVE_DTYPES and type(stream) is str:
                self._steady[key] = (h["channels"], h["units"], msg.data.dtype, len(h["channels"]), tail, key)
        elif isinstance(msg, Event):
            if (
                not isinstance(msg.stream, str)
                or not msg.stream
                or not isinstance(msg.kind, str)
                or not msg.kind
            ):
                raise StoreError("event needs a non-empty stream and kind")
            _check_numbers(f"event {msg.kind!r} of stream {msg.stream!r}", msg.seq, {"t": msg.t}, None)
            try:
                body = json_codec.dumps(msg.body, default=json_codec.numpy_default)
            except (TypeError, ValueError) as exc:
                raise StoreError(f"event body is not JSON-serialisable: {exc}") from None
            self._check_layout(session_id, {"type": "event", "stream": msg.stream})
            self._events.append(
                (session_id, ordinal, msg.stream, msg.kind, int(msg.seq), float(msg.t), int(msg.replay), body)
            )
            self._note_stream((session_id, msg.stream), 0, float(msg.t), float(msg.t))
        else:
            raise StoreError(f"cannot store {type(msg).__name__}; expected Frame or Event")
        self._buffered(session_id, ordinal)

    def _buffered(self, session_id: str, ordinal: int) -> None:
        """A message is in the buffer: advance the session's ordinal, flush when the batch is due."""
        self._ord[session_id] = ordinal + 1
        now = time.monotonic()
        if self._oldest is None:
            self._oldest = now
        if now - self._oldest >= self.flush_interval or self._buffered_bytes >= FLUSH_BYTES:
            self.flush()

    def _append_steady(self, session_id: str, msg: Frame, steady: tuple) -> bool:
        """Buffer a frame of a stream whose layout (channels, units, dtype) equals the one its last frame
        had in full validation: the layout is compared, not validated again, and the per-frame fields
        (seq, t0, dt, shape) are checked here, in one pass without building a header. False, with
        nothing changed: the frame needs the full path (new layout, explicit timestamps, a field that
        would be refused - the full path says why).

        The hot path of small blocks (a press sensor's 7 readings every 0.3 s): each check is one
        comparison and the clock is read once."""
        channels, units, dtype, width, tail, key = steady
        data, seq, t0, dt, sid = msg.data, msg.seq, msg.t0, msg.dt, msg.session_id
        if msg.timestamps is not None or type(data) is not np.ndarray:
            return False
        shape = data.shape
        if (
            len(shape) != 2
            or shape[1] != width
            or (data.dtype is not dtype and data.dtype != dtype)
            or type(seq) is not int
            or not 0 <= seq < _SEQ_LIMIT
            or not isinstance(dt, float)
            or not 0.0 < dt < _INF  # also refuses NaN
            or (sid is not None and not (type(sid) is str and sid.isascii()))
            or (msg.channels is not channels and msg.channels != channels)
            or (msg.units is not units and msg.units != units)
        ):
            return False
        if type(t0) is not float:
            try:
                t0 = float(t0)
            except (TypeError, ValueError, OverflowError):
                return False
        if not -_INF < t0 < _INF:
            return False
        if type(dt) is not float:
            dt = float(dt)
        n = shape[0]
        flags = data.flags
        payload: bytes | np.ndarray
        if flags.writeable or type(data.base) not in IMMUTABLE_BUFFERS or not flags.c_contiguous:
            payload = data.tobytes()  # a copy: the caller may reuse its array after append
        else:  # a read-only view of memory nobody changes (a frame from the bus): kept, bound at the commit
            payload = data
        t_min: float | None
        t_max: float | None
        if n:
            t_min = t_lo = t0
            t_max = t_hi = t0 + (n - 1) * dt  # the arithmetic of frame_span and of the reads' time axis
            if tail[2] and t0 < tail[1]:
                tail[2] = False
                self._pending_nonmono.add(key)
        else:
            t_min = t_max = None
            t_lo = t_hi = t0
        ordinal = self._ord[session_id]
        s0 = tail[0]
        self._frames.append(
            (session_id, ordinal, msg.stream, seq, t0, dt, n, 0, int(msg.replay), payload, s0, t_min, t_max)
        )
        tail[0] = s0 + n
        if n:
            tail[1] = t_hi
        self._note_stream(key, n, t_lo, t_hi)
        buffered = self._buffered_bytes = self._buffered_bytes + data.nbytes
        self._ord[session_id] = ordinal + 1
        now = time.monotonic()
        oldest = self._oldest
        if oldest is None:
            self._oldest = oldest = now
        if now - oldest >= self.flush_interval or buffered >= FLUSH_BYTES:
            self.flush()
        return True

    def _require_running(self, session_id: str) -> None:
        with self._lock:
            row = self._db.execute("SELECT status FROM sessions WHERE id=?", (session_id,)).fetchone()
        if row is None:
            raise UnknownSession(f"unknown session {session_id!r}")
        if row[0] != "running":
            raise StoreError(f"session {session_id} is {row[0]}; cannot append to it")

    def _stream_tail(self, session_id: str, stream: str) -> list:
        """[next sample index, t_max of the last non-empty frame, monotonic] of a stored stream."""
        with self._lock:
            row = self._db.execute(
                "SELECT s0 + n, t_max FROM frames WHERE session_id=? AND stream=? AND n > 0 "
                "ORDER BY s0 DESC LIMIT 1",
                (session_id, stream),
            ).fetchone()
            mono = self._db.execute(
                "SELECT monotonic FROM streams WHERE session_id=? AND stream=?", (session_id, stream)
            ).fetchone()
        if row is None:
            return [0, -math.inf, True if mono is None else bool(mono[0])]
        return [row[0], row[1], True if mono is None else bool(mono[0])]

    def _max_ord(self, session_id: str) -> int:
        with self._lock:
            a = self._db.execute("SELECT MAX(ord) FROM frames WHERE session_id=?", (session_id,)).fetchone()[
                0
            ]
            b = self._db.execute("SELECT MAX(ord) FROM events WHERE session_id=?", (session_id,)).fetchone()[
                0
            ]
        return max(-1 if a is None else a, -1 if b is None else b)

    def _check_layout(self, session_id: str, h: dict) -> None:
        """A stream keeps one type, channel list, unit list and dtype for the whole session."""
        key = (session_id, h["stream"])
        channels, units = json_codec.dumps(h.get("channels")), json_codec.dumps(h.get("units"))
        layout = (h["type"], channels, units, h.get("dtype"))
        known = self._layout.get(key)
        if known is None:
            with self._lock:
                row = self._db.execute(
                    "SELECT type, channels, units, dtype FROM streams WHERE session_id=? AND stream=?", key
                ).fetchone()
            if row is None:
                self._layout[key] = layout
                self._pending_streams.append(
                    (session_id, h["stream"], h["type"], layout[1], layout[2], layout[3], h.get("dt"))
                )
                return
            known = self._layout[key] = tuple(row)
        if known != layout:
            raise StoreError(
                f"stream {h['stream']!r} changed its layout mid-session "
                f"(was {known[0]} {known[1]} {known[2]} {known[3]}, now {layout[0]} {layout[1]} "
                f"{layout[2]} {layout[3]})"
            )

    def _note_stream(self, key: tuple[str, str], n: int, t_first: float, t_last: float) -> None:
        """Count a buffered message of stream ``key`` (session, stream) for the next commit's stream row."""
        counts = self._pending_counts.get(key)
        if counts is None:
            self._pending_counts[key] = [1, n, t_first, t_last]
            return
        counts[0] += 1
        counts[1] += n
        if t_first < counts[2]:
            counts[2] = t_first
        if t_last > counts[3]:
            counts[3] = t_last

    def flush(self) -> None:
        """Commit everything buffered in one transaction and refresh the writer heartbeat."""
        now = time.time()
        heartbeat_due = self._owned and now - self._last_heartbeat >= 0.1
        pending = self._frames or self._events or self._pending_streams or self._pending_nonmono
        if not (pending or heartbeat_due):
            return
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                if self._pending_streams:
                    self._db.executemany(
                        "INSERT OR IGNORE INTO streams "
                        "(session_id, stream, type, channels, units, dtype, dt) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        self._pending_streams,
                    )
                if self._frames:
                    self._db.executemany(
                        f"INSERT INTO frames ({FRAME_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        self._frames,
                    )
                if self._events:
                    self._db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self._events)
                for (sid, stream), (nm, ns, tf, tl) in self._pending_counts.items():
                    self._db.execute(
                        "UPDATE streams SET n_messages=n_messages+?, n_samples=n_samples+?, "
                        "t_first=MIN(COALESCE(t_first, ?), ?), t_last=MAX(COALESCE(t_last, ?), ?) "
                        "WHERE session_id=? AND stream=?",
                        (nm, ns, tf, tf, tl, tl, sid, stream),
                    )
                if self._pending_nonmono:
                    self._db.executemany(
                        "UPDATE streams SET monotonic=0 WHERE session_id=? AND stream=?",
                        sorted(self._pending_nonmono),
                    )
                if self._owned:
                    self._db.executemany(
                        "UPDATE sessions SET heartbeat=? WHERE id=? AND status='running'",
                        [(now, sid) for sid in self._owned],
                    )
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        self._last_heartbeat = now
        self._frames = []
        self._events = []
        self._pending_streams = []
        self._pending_counts = {}
        self._pending_nonmono = set()
        self._buffered_bytes = 0
        self._oldest = None

    def heartbeat(self) -> None:
        """Commit pending data, or at least refresh the heartbeat of owned running sessions."""
        self.flush()

    # ------------------------------------------------------------------ life cycle

    def close(self) -> None:
        """Flush and close (sessions still running stay running: finish them first)."""
        try:
            self.flush()
        finally:
            self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_numbers(what: str, seq, times: dict[str, float | None], ts: np.ndarray | None) -> None:
    """Refuse what SQLite cannot hold or what would break time indexing: a sequence number outside
    [0, 2**63) or a non-finite time, so a bad message is refused alone and never breaks a commit."""
    try:
        q = operator.index(seq)
    except TypeError:
        raise StoreError(f"refusing {what}: seq must be an integer, got {seq!r}") from None
    if not 0 <= q < _SEQ_LIMIT:
        raise StoreError(f"refusing {what}: seq {q} is outside [0, 2**63)")
    for name, value in times.items():
        if value is None:
            continue
        try:
            ok = math.isfinite(float(value))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise StoreError(f"refusing {what}: {name} must be a finite number, got {value!r}")
    if ts is not None and ts.size and not np.isfinite(ts).all():
        raise StoreError(f"refusing {what}: timestamps must be finite (found NaN or inf)")
