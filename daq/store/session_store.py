"""Session store: one embedded SQLite file (WAL mode), no server to run.

Layout (one row per *block* of samples, never one row per sample):

* ``sessions``  id, kind, status, times, config snapshot, software version, device identities,
  writer identity (host, pid) and a heartbeat;
* ``streams``   per session and stream: channels, units, dtype, sample period, counts;
* ``frames``    the raw little-endian payload of every frame plus its header fields;
* ``events``    events with their JSON body.

A global ordinal ``ord`` (per session) keeps frames and events in arrival order for replay.

Index for window reads (store format 2): every frame row carries ``s0``, the index of its first
sample in the stream (cumulative count), and ``t_min``/``t_max``, the times of its earliest and
latest sample. Two SQL indexes on (session, stream, s0) and (session, stream, t_min, s0) turn a
sample range or a time window into a few index seeks, so reading one second of a long session
never scans it. A stream is *monotonic* when its sample times never go back (within and across
frames, the normal case); its time windows are contiguous sample ranges. Other streams are read
by filtering the frames whose [t_min, t_max] overlaps the window. Stores written in format 1 are
migrated (columns added and filled) the first time this code opens them.

Writes are buffered by :meth:`SessionStore.append` and committed by :meth:`SessionStore.flush`,
which happens automatically once the oldest buffered message is ``flush_interval`` old (0.25 s);
the recorder also flushes when idle, so committed data is never more than 0.5 s behind.

Crash detection: a writer stamps its session with host, pid and a heartbeat that every commit
refreshes (and the recorder refreshes at least every 0.5 s even without data). Opening a store
marks a ``running`` session ``incomplete`` when its writer is certainly gone: the writer ran on
this host and its pid no longer exists (or is a zombie), or its heartbeat is older than
``STALE_AFTER_S`` (covers other hosts, pid reuse and hung writers). Everything committed before
the crash stays readable: SQLite's WAL guarantees that a committed transaction survives SIGKILL.
"""

from __future__ import annotations

import json
import math
import operator
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from daq.bus.frames import SUPPORTED_DTYPES, Event, Frame, FrameError, frame_header, frame_payload
from daq.version import software_version

STATUSES = ("running", "complete", "aborted", "incomplete")
FINAL_STATUSES = ("complete", "aborted", "incomplete")
#: A running session whose heartbeat is older than this is considered abandoned, s.
STALE_AFTER_S = 30.0
#: Default time after which buffered messages are committed, s.
FLUSH_INTERVAL_S = 0.25
#: Buffered payload size that forces a commit, bytes.
FLUSH_BYTES = 32 * 1024 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    started REAL NOT NULL,
    ended REAL,
    config TEXT NOT NULL,
    software_version TEXT NOT NULL,
    devices TEXT NOT NULL,
    writer_host TEXT,
    writer_pid INTEGER,
    heartbeat REAL,
    stats TEXT
);
CREATE TABLE IF NOT EXISTS streams (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    stream TEXT NOT NULL,
    type TEXT NOT NULL,
    channels TEXT,
    units TEXT,
    dtype TEXT,
    dt REAL,
    n_messages INTEGER NOT NULL DEFAULT 0,
    n_samples INTEGER NOT NULL DEFAULT 0,
    t_first REAL,
    t_last REAL,
    monotonic INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (session_id, stream)
);
CREATE TABLE IF NOT EXISTS frames (
    session_id TEXT NOT NULL,
    ord INTEGER NOT NULL,
    stream TEXT NOT NULL,
    seq INTEGER NOT NULL,
    t0 REAL NOT NULL,
    dt REAL,
    n INTEGER NOT NULL,
    has_ts INTEGER NOT NULL,
    replay INTEGER NOT NULL,
    payload BLOB NOT NULL,
    s0 INTEGER,
    t_min REAL,
    t_max REAL
);
CREATE INDEX IF NOT EXISTS frames_by_stream ON frames (session_id, stream, ord);
CREATE INDEX IF NOT EXISTS frames_by_ord ON frames (session_id, ord);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL,
    ord INTEGER NOT NULL,
    stream TEXT NOT NULL,
    kind TEXT NOT NULL,
    seq INTEGER NOT NULL,
    t REAL NOT NULL,
    replay INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_ord ON events (session_id, ord);
"""
_INDEXES = """
CREATE INDEX IF NOT EXISTS frames_by_s0 ON frames (session_id, stream, s0);
CREATE INDEX IF NOT EXISTS frames_by_t ON frames (session_id, stream, t_min, s0);
"""
_STORE_FORMAT = "2"
_FRAME_COLS = "session_id, ord, stream, seq, t0, dt, n, has_ts, replay, payload, s0, t_min, t_max"
#: Largest sequence number SQLite's INTEGER holds (exclusive).
_SEQ_LIMIT = 2**63
#: Default number of samples per chunk of :meth:`SessionStore.iter_stream`.
CHUNK_SAMPLES = 1 << 15


#: Session key that selects the newest session.
LATEST = "latest"


class StoreError(Exception):
    """A problem with the store or a request to it (one clear message)."""


class UnknownSession(StoreError, KeyError):
    """No session (or no unique session) matches the given id or prefix."""

    def __str__(self) -> str:  # KeyError would add quotes
        return str(self.args[0]) if self.args else "unknown session"


@dataclass
class StreamInfo:
    """Metadata of one stream of a session."""

    name: str
    type: str  # "frame" or "event"
    channels: list[str]
    units: list[str]
    dtype: str | None
    dt: float | None  # nominal sample period, s (None: explicit timestamps or events)
    n_messages: int
    n_samples: int
    t_first: float | None
    t_last: float | None
    monotonic: bool = True  # sample times never go back (time windows are sample ranges)
    timing: StreamTiming | None = None  # filled by SessionStore.stream_timing (hil show)

    @property
    def rate(self) -> float | None:
        """Sample rate, Hz (from dt, or estimated from the time span)."""
        if self.dt:
            return 1.0 / self.dt
        if self.type == "frame" and self.n_samples > 1 and self.t_last and self.t_first is not None:
            span = self.t_last - self.t_first
            return (self.n_samples - 1) / span if span > 0 else None
        return None


@dataclass
class StreamTiming:
    """The real sample spacing of a frame stream, from the sample times of its first frames.

    A press sensor stream comes in bursts (a block of readings 0.5 ms apart, then nothing while the
    force is corrected), so its mean rate says little; ``spacing_s`` is the median spacing inside
    frames, ``frame_period_s`` the median time between frame starts.
    """

    spacing_s: float | None
    samples_per_frame: int
    frame_period_s: float | None
    mean_rate_hz: float | None
    frames_sampled: int

    @property
    def rate_hz(self) -> float | None:
        return 1.0 / self.spacing_s if self.spacing_s else None

    @property
    def bursty(self) -> bool:
        """True when frames are separated by gaps much longer than their own duration."""
        if not (self.spacing_s and self.frame_period_s) or self.samples_per_frame < 1:
            return False
        return self.frame_period_s > 1.5 * self.samples_per_frame * self.spacing_s

    def describe(self) -> str:
        if not self.rate_hz:
            return "irregular"
        if self.bursty:
            mean = f" (mean {_num(self.mean_rate_hz)} Hz)" if self.mean_rate_hz else ""
            return (
                f"bursts of {self.samples_per_frame} at {_num(self.rate_hz)} Hz "
                f"every {_num(self.frame_period_s)} s{mean}"
            )
        return f"{_num(self.rate_hz)} Hz"


@dataclass
class SessionInfo:
    """One session: identity, status, times, config snapshot, versions, devices, streams."""

    id: str
    kind: str
    status: str
    reason: str | None
    started: float
    ended: float | None
    config: dict
    software_version: str
    devices: dict
    streams: dict[str, StreamInfo] = field(default_factory=dict)
    writer_host: str | None = None
    writer_pid: int | None = None
    heartbeat: float | None = None
    stats: dict | None = None


@dataclass
class StreamData:
    """All samples of one stream: ``t`` (n,) s, ``data`` (n, n_channels)."""

    stream: str
    t: np.ndarray
    data: np.ndarray
    channels: list[str]
    units: list[str]
    start: int = 0  # index of the first sample in the stream (contiguous reads)
    index: np.ndarray | None = None  # sample indices, when the samples are not a contiguous range

    def __len__(self) -> int:
        return int(self.t.shape[0])

    def sample_index(self) -> np.ndarray:
        """Index of every sample in its stream (frames concatenated in arrival order)."""
        if self.index is not None:
            return self.index
        return np.arange(self.start, self.start + len(self), dtype=np.int64)

    def column(self, channel: str) -> np.ndarray:
        try:
            return self.data[:, self.channels.index(channel)]
        except ValueError:
            raise KeyError(
                f"stream {self.stream!r} has no channel {channel!r} (has {self.channels})"
            ) from None

    def unit(self, channel: str) -> str:
        return self.units[self.channels.index(channel)]


def _pid_alive(pid: int) -> bool:
    """True if a process with this pid exists and is not a zombie (Linux /proc aware)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        state = stat[stat.rindex(b")") + 2 :][:1]
        return state not in (b"Z", b"X")
    except (OSError, ValueError):
        return True


class SessionStore:
    """An embedded session store in one SQLite file (see the module docstring)."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        create: bool = True,
        recover: bool = True,
        flush_interval: float = FLUSH_INTERVAL_S,
    ):
        """Open (or create, when ``create``) the store at ``path``.

        ``recover``: mark sessions whose writer is gone as ``incomplete`` on open.
        """
        self.path = Path(path)
        self.flush_interval = flush_interval
        if not create and not self.path.is_file():
            raise StoreError(f"no session store at {self.path}")
        if create:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory for {self.path}: {exc.strerror}") from None
        self._lock = threading.RLock()
        try:
            self._db = self._connect()
            with self._lock:
                self._db.executescript(_SCHEMA)
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('format', ?)", (_STORE_FORMAT,))
                if not self._has_index_columns():
                    self._migrate_to_format_2()
                self._db.executescript(_INDEXES)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a usable session store: {exc}") from None
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._frames: list[tuple] = []
        self._events: list[tuple] = []
        self._buffered_bytes = 0
        self._oldest: float | None = None
        self._ord: dict[str, int] = {}
        self._layout: dict[tuple[str, str], tuple] = {}  # (session, stream) -> stream row
        self._pending_streams: list[tuple] = []
        self._pending_counts: dict[tuple[str, str], list] = {}
        self._pending_nonmono: set[tuple[str, str]] = set()
        # (session, stream) -> [next sample index, t_max of the last non-empty frame, monotonic]
        self._tails: dict[tuple[str, str], list] = {}
        self._owned: set[str] = set()
        self._last_heartbeat = 0.0
        if recover:
            self.recover()

    def _has_index_columns(self) -> bool:
        return "s0" in {row[1] for row in self._db.execute("PRAGMA table_info(frames)")}

    def _migrate_to_format_2(self) -> None:
        """Add and fill the frame index columns (s0, t_min, t_max) and the monotonic flag of a
        store written in format 1; one transaction, payloads read only for timestamped frames."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if not self._has_index_columns():  # another process may have migrated meanwhile
                for ddl in (
                    "ALTER TABLE frames ADD COLUMN s0 INTEGER",
                    "ALTER TABLE frames ADD COLUMN t_min REAL",
                    "ALTER TABLE frames ADD COLUMN t_max REAL",
                    "ALTER TABLE streams ADD COLUMN monotonic INTEGER NOT NULL DEFAULT 1",
                ):
                    self._db.execute(ddl)
                streams = self._db.execute(
                    "SELECT session_id, stream, channels, dtype FROM streams WHERE type='frame'"
                ).fetchall()
                for sid, stream, channels, dtype in streams:
                    row_bytes = len(json.loads(channels or "[]")) * SUPPORTED_DTYPES[dtype].itemsize
                    cur = self._db.execute(
                        "SELECT rowid, t0, dt, n, has_ts, CASE WHEN has_ts THEN substr(payload, n * ? + 1) "
                        "END FROM frames WHERE session_id=? AND stream=? ORDER BY ord",
                        (row_bytes, sid, stream),
                    )
                    s0, prev, mono, updates = 0, -math.inf, True, []
                    for rowid, t0, dt, n, has_ts, tail in cur:
                        ts = np.frombuffer(tail, dtype="<f8", count=n) if has_ts else None
                        t_min, t_max, inside = _frame_span(t0, dt, n, ts)
                        updates.append((s0, t_min, t_max, rowid))
                        s0 += n
                        if n:
                            mono = mono and inside and t_min >= prev
                            prev = t_max
                    self._db.executemany("UPDATE frames SET s0=?, t_min=?, t_max=? WHERE rowid=?", updates)
                    if not mono:
                        self._db.execute(
                            "UPDATE streams SET monotonic=0 WHERE session_id=? AND stream=?", (sid, stream)
                        )
                self._db.execute("UPDATE meta SET value=? WHERE key='format'", (_STORE_FORMAT,))
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10.0)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=10000")
        return db

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
            config_json = json.dumps(config, default=str)
            devices_json = json.dumps(devices or {}, default=str)
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
            self._db.execute("UPDATE sessions SET stats=? WHERE id=?", (json.dumps(stats), session_id))

    def recover(self, stale_after: float = STALE_AFTER_S) -> list[str]:
        """Mark ``running`` sessions whose writer is gone as ``incomplete``; returns their ids."""
        now = time.time()
        gone = []
        with self._lock:
            rows = self._db.execute(
                "SELECT id, writer_host, writer_pid, heartbeat FROM sessions WHERE status='running'"
            ).fetchall()
            for sid, host, pid, heartbeat in rows:
                if sid in self._owned:
                    continue
                if host == self._host and pid is not None and not _pid_alive(pid):
                    gone.append((sid, f"writer process {pid} on {host} is gone"))
                elif heartbeat is None or now - heartbeat > stale_after:
                    gone.append(
                        (sid, f"no heartbeat from writer {host}:{pid} for {now - (heartbeat or 0):.0f} s")
                    )
            for sid, reason in gone:
                self._db.execute(
                    "UPDATE sessions SET status='incomplete', reason=?, "
                    "ended=COALESCE(ended, heartbeat) WHERE id=? AND status='running'",
                    (reason, sid),
                )
        return [sid for sid, _ in gone]

    def list_sessions(self) -> list[SessionInfo]:
        """All sessions, oldest first."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_SESSION_COLS} FROM sessions ORDER BY started, id").fetchall()
            return [self._session_from_row(r) for r in rows]

    def get_session(self, session_id_or_unique_prefix: str) -> SessionInfo:
        """The session with this id, the only one whose id starts with the given prefix, or the newest
        one for ``"latest"``."""
        key = str(session_id_or_unique_prefix)
        with self._lock:
            row = self._db.execute(f"SELECT {_SESSION_COLS} FROM sessions WHERE id=?", (key,)).fetchone()
            if row is None and key == LATEST:
                row = self._db.execute(
                    f"SELECT {_SESSION_COLS} FROM sessions ORDER BY started DESC LIMIT 1"
                ).fetchone()
            if row is None and key:
                like = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                rows = self._db.execute(
                    f"SELECT {_SESSION_COLS} FROM sessions WHERE id LIKE ? ESCAPE '\\' LIMIT 3", (like,)
                ).fetchall()
                if len(rows) > 1:
                    raise UnknownSession(
                        f"session prefix {key!r} is ambiguous ({', '.join(r[0] for r in rows)}...)"
                    )
                row = rows[0] if rows else None
            if row is None:
                raise UnknownSession(f"unknown session {key!r} in {self.path}")
            return self._session_from_row(row)

    def _session_from_row(self, row: tuple) -> SessionInfo:
        (sid, kind, status, reason, started, ended, config, version, devices, host, pid, hb, stats) = row
        streams = {}
        for srow in self._db.execute(
            "SELECT stream, type, channels, units, dtype, dt, n_messages, n_samples, t_first, t_last, "
            "monotonic FROM streams WHERE session_id=? ORDER BY stream",
            (sid,),
        ):
            name, typ, ch, un, dtype, dt, nm, ns, tf, tl, mono = srow
            streams[name] = StreamInfo(
                name,
                typ,
                json.loads(ch or "null") or [],
                json.loads(un or "null") or [],
                dtype,
                dt,
                nm,
                ns,
                tf,
                tl,
                bool(mono),
            )
        return SessionInfo(
            id=sid,
            kind=kind,
            status=status,
            reason=reason,
            started=started,
            ended=ended,
            config=json.loads(config),
            software_version=version,
            devices=json.loads(devices),
            streams=streams,
            writer_host=host,
            writer_pid=pid,
            heartbeat=hb,
            stats=json.loads(stats) if stats else None,
        )

    # ------------------------------------------------------------------ writing

    def append(self, session_id: str, msg: Frame | Event) -> None:
        """Buffer one message of a running session (validated now, committed by flush)."""
        if session_id not in self._owned:
            self._require_running(session_id)
        if session_id not in self._ord:
            self._ord[session_id] = self._max_ord(session_id) + 1
        ordinal = self._ord[session_id]
        if isinstance(msg, Frame):
            try:
                h = frame_header(msg)
                payload = bytes(frame_payload(msg))
            except (FrameError, TypeError, ValueError) as exc:
                raise StoreError(f"refusing frame of stream {msg.stream!r}: {exc}") from None
            n = h["shape"][0]
            ts = np.asarray(msg.timestamps, dtype=np.float64) if h["timestamps"] else None
            _check_numbers(f"frame of stream {msg.stream!r}", msg.seq, {"t0": h["t0"], "dt": h["dt"]}, ts)
            t_min, t_max, inside = _frame_span(h["t0"], h["dt"], n, ts)
            self._check_layout(session_id, h)
            key = (session_id, h["stream"])
            tail = self._tails.get(key)
            if tail is None:
                tail = self._tails[key] = self._stream_tail(session_id, h["stream"])
            if n and tail[2] and not (inside and t_min >= tail[1]):
                tail[2] = False
                self._pending_nonmono.add(key)
            self._frames.append(
                (
                    session_id,
                    ordinal,
                    h["stream"],
                    h["seq"],
                    h["t0"],
                    h["dt"],
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
            t_lo, t_hi = (h["t0"], h["t0"]) if t_min is None else (t_min, t_max)
            self._note_stream(session_id, h["stream"], n, t_lo, t_hi)
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
                body = json.dumps(msg.body, allow_nan=True, default=_json_default)
            except (TypeError, ValueError) as exc:
                raise StoreError(f"event body is not JSON-serialisable: {exc}") from None
            self._check_layout(session_id, {"type": "event", "stream": msg.stream})
            self._events.append(
                (session_id, ordinal, msg.stream, msg.kind, int(msg.seq), float(msg.t), int(msg.replay), body)
            )
            self._note_stream(session_id, msg.stream, 0, float(msg.t), float(msg.t))
        else:
            raise StoreError(f"cannot store {type(msg).__name__}; expected Frame or Event")
        self._ord[session_id] = ordinal + 1
        now = time.monotonic()
        if self._oldest is None:
            self._oldest = now
        if now - self._oldest >= self.flush_interval or self._buffered_bytes >= FLUSH_BYTES:
            self.flush()

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
        layout = (h["type"], json.dumps(h.get("channels")), json.dumps(h.get("units")), h.get("dtype"))
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

    def _note_stream(self, session_id: str, stream: str, n: int, t_first: float, t_last: float) -> None:
        counts = self._pending_counts.setdefault((session_id, stream), [0, 0, t_first, t_last])
        counts[0] += 1
        counts[1] += n
        counts[2] = min(counts[2], t_first)
        counts[3] = max(counts[3], t_last)

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
                        f"INSERT INTO frames ({_FRAME_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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

    # ------------------------------------------------------------------ reading

    def _frame_stream(self, session_id: str, stream: str) -> tuple[str, StreamInfo]:
        info = self.get_session(session_id)
        si = info.streams.get(stream)
        if si is None or si.type != "frame":
            names = [s for s, x in info.streams.items() if x.type == "frame"]
            raise StoreError(f"session {info.id} has no frame stream {stream!r} (frame streams: {names})")
        return info.id, si

    def read_stream(self, session_id: str, stream: str) -> StreamData:
        """All committed samples of a frame stream, concatenated in arrival order (the whole range
        of :meth:`read_range`; use :meth:`iter_stream` or a window read for long streams)."""
        return self.read_range(session_id, stream)

    def read_range(self, session_id: str, stream: str, start: int = 0, stop: int | None = None) -> StreamData:
        """Samples ``start <= k < stop`` of a frame stream (k counts samples in arrival order);
        found through the frame index, so the cost depends on the range, not on the session."""
        sid, si = self._frame_stream(session_id, stream)
        with self._lock:
            start, stop = self._clip_range(self._db, sid, stream, start, stop)
            return self._read_range(self._db, sid, si, start, stop)

    def read_window(
        self, session_id: str, stream: str, t_start: float | None = None, t_stop: float | None = None
    ) -> StreamData:
        """Samples with ``t_start <= t < t_stop`` (s, the stream's own time base) in arrival order."""
        sid, si = self._frame_stream(session_id, stream)
        with self._lock:
            if si.monotonic:
                start, stop = self._window_range(self._db, sid, si, t_start, t_stop)
                return self._read_range(self._db, sid, si, start, stop)
            pieces = list(self._window_pieces(self._db, sid, si, t_start, t_stop))
        return _join(si, pieces, contiguous=False)

    def window_range(
        self, session_id: str, stream: str, t_start: float | None = None, t_stop: float | None = None
    ) -> tuple[int, int] | None:
        """The sample range ``[start, stop)`` of a time window of a monotonic stream (index seeks
        only), or None for a stream whose times go back (its windows are not ranges)."""
        sid, si = self._frame_stream(session_id, stream)
        if not si.monotonic:
            return None
        with self._lock:
            return self._window_range(self._db, sid, si, t_start, t_stop)

    def count_samples(
        self, session_id: str, stream: str, t_start: float | None = None, t_stop: float | None = None
    ) -> int:
        """Number of samples in a time window (cheap for monotonic streams, a time-only pass otherwise)."""
        rng = self.window_range(session_id, stream, t_start, t_stop)
        if rng is not None:
            return rng[1] - rng[0]
        sid, si = self._frame_stream(session_id, stream)
        with self._lock:
            pieces = self._window_pieces(self._db, sid, si, t_start, t_stop, times_only=True)
            return sum(len(p[0]) for p in pieces)

    def iter_stream(
        self,
        session_id: str,
        stream: str,
        chunk_samples: int = CHUNK_SAMPLES,
        *,
        start: int | None = None,
        stop: int | None = None,
        t_start: float | None = None,
        t_stop: float | None = None,
    ) -> Iterator[StreamData]:
        """A frame stream (or a sample range / time window of it) in chunks of ``chunk_samples``
        samples (the last one shorter), each a :class:`StreamData` with its position in the stream.

        Memory stays bounded by the chunk and one frame. The iterator reads one consistent snapshot
        on its own connection, so the store stays usable while it is suspended.
        """
        if not (isinstance(chunk_samples, int) and chunk_samples > 0):
            raise StoreError(f"chunk_samples must be a positive integer, got {chunk_samples!r}")
        sid, si = self._frame_stream(session_id, stream)
        db = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
        try:
            db.execute("BEGIN")  # one read snapshot for the bounds and the rows
            lo, hi = self._clip_range(db, sid, stream, start or 0, stop)
            if t_start is not None or t_stop is not None:
                if si.monotonic:
                    w0, w1 = self._window_range(db, sid, si, t_start, t_stop)
                    lo, hi = max(lo, w0), max(max(lo, w0), min(hi, w1))
                else:
                    pieces = self._window_pieces(db, sid, si, t_start, t_stop, start=lo, stop=hi)
                    yield from _rechunk(si, pieces, chunk_samples, contiguous=False)
                    return
            yield from self._range_chunks(db, sid, si, lo, hi, chunk_samples)
        finally:
            db.close()

    def frame_index(self, session_id: str, stream: str) -> list[tuple[int, int, float | None, float | None]]:
        """(s0, n, t_min, t_max) of every frame of a stream in arrival order (no payloads read)."""
        sid, _ = self._frame_stream(session_id, stream)
        with self._lock:
            return self._db.execute(
                "SELECT s0, n, t_min, t_max FROM frames WHERE session_id=? AND stream=? ORDER BY s0, ord",
                (sid, stream),
            ).fetchall()

    def stream_timing(self, session_id: str, stream: str, max_frames: int = 32) -> StreamTiming:
        """The real sample spacing of a frame stream, from its first ``max_frames`` non-empty frames."""
        sid, si = self._frame_stream(session_id, stream)
        row_bytes = len(si.channels) * SUPPORTED_DTYPES[si.dtype].itemsize
        with self._lock:
            rows = self._db.execute(
                "SELECT dt, n, has_ts, t_min, CASE WHEN has_ts THEN substr(payload, n * ? + 1) END "
                "FROM frames WHERE session_id=? AND stream=? AND n > 0 ORDER BY s0 LIMIT ?",
                (row_bytes, sid, stream, max_frames),
            ).fetchall()
        diffs, sizes, starts = [], [], []
        for dt, n, has_ts, t_min, tail in rows:
            sizes.append(n)
            starts.append(t_min)
            if has_ts:
                ts = np.frombuffer(tail, dtype="<f8", count=n)
                diffs.append(np.diff(ts))
            elif n > 1:
                diffs.append(np.full(n - 1, dt))
        d = np.concatenate(diffs) if diffs else np.empty(0)
        d = d[d > 0]
        spacing = float(np.median(d)) if d.size else (si.dt or None)
        period = float(np.median(np.diff(starts))) if len(starts) > 1 else None
        return StreamTiming(
            spacing_s=spacing,
            samples_per_frame=int(np.median(sizes)) if sizes else 0,
            frame_period_s=period,
            mean_rate_hz=si.rate,
            frames_sampled=len(rows),
        )

    # -- index helpers (callers hold the lock or own the connection)

    @staticmethod
    def _clip_range(db, sid: str, stream: str, start: int | None, stop: int | None) -> tuple[int, int]:
        row = db.execute(
            "SELECT s0 + n FROM frames WHERE session_id=? AND stream=? AND n > 0 ORDER BY s0 DESC LIMIT 1",
            (sid, stream),
        ).fetchone()
        total = row[0] if row else 0
        lo = 0 if start is None else max(0, min(int(start), total))
        hi = total if stop is None else max(lo, min(int(stop), total))
        return lo, hi

    def _window_range(self, db, sid: str, si: StreamInfo, t_start, t_stop) -> tuple[int, int]:
        """Sample range of ``t_start <= t < t_stop`` in a monotonic stream: two index seeks plus the
        time axes of the two boundary frames."""
        lo = 0
        if t_start is not None:
            row = self._last_frame_before(db, sid, si, t_start)
            if row is not None:
                s0, t = row
                lo = s0 + int(np.searchsorted(t, t_start, side="left"))
        if t_stop is None:
            return lo, self._clip_range(db, sid, si.name, 0, None)[1]
        row = self._last_frame_before(db, sid, si, t_stop)
        if row is None:
            return lo, lo
        s0, t = row
        return lo, max(lo, s0 + int(np.searchsorted(t, t_stop, side="left")))

    @staticmethod
    def _last_frame_before(db, sid: str, si: StreamInfo, t: float) -> tuple[int, np.ndarray] | None:
        """(s0, time axis) of the last non-empty frame whose first sample is earlier than ``t``."""
        row_bytes = len(si.channels) * SUPPORTED_DTYPES[si.dtype].itemsize
        row = db.execute(
            "SELECT s0, t0, dt, n, has_ts, CASE WHEN has_ts THEN substr(payload, n * ? + 1) END "
            "FROM frames WHERE session_id=? AND stream=? AND t_min < ? ORDER BY t_min DESC, s0 DESC LIMIT 1",
            (row_bytes, sid, si.name, float(t)),
        ).fetchone()
        if row is None:
            return None
        s0, t0, dt, n, has_ts, tail = row
        ts = np.frombuffer(tail, dtype="<f8", count=n) if has_ts else t0 + np.arange(n, dtype=np.float64) * dt
        return s0, ts

    def _read_range(self, db, sid: str, si: StreamInfo, start: int, stop: int) -> StreamData:
        """Samples [start, stop) in one array (the single chunk of :meth:`_range_chunks`)."""
        for chunk in self._range_chunks(db, sid, si, start, stop, max(1, stop - start)):
            return chunk
        return _join(si, [], contiguous=True, first=start)

    def _range_chunks(
        self, db, sid: str, si: StreamInfo, start: int, stop: int, chunk: int
    ) -> Iterator[StreamData]:
        """Samples [start, stop) in chunks of ``chunk`` samples: each chunk is one preallocated array
        that frames are copied into (one copy of the data, little per-frame work)."""
        dtype = SUPPORTED_DTYPES[si.dtype]
        native = dtype.newbyteorder("=")
        n_ch = len(si.channels)
        row_bytes = n_ch * dtype.itemsize
        ramp = np.arange(0, dtype=np.float64)
        pos = start
        t = data = None
        k = 0
        for s0, t0, dt, n, has_ts, payload in self._range_rows(db, sid, si, start, stop):
            a = max(0, pos - s0)
            b = min(n, stop - s0)
            frame = np.frombuffer(payload, dtype=dtype, count=n * n_ch).reshape(n, n_ch) if n_ch else None
            while a < b:
                if t is None:
                    size = min(chunk, stop - pos)
                    t = np.empty(size, dtype=np.float64)
                    data = np.empty((size, n_ch), dtype=native)
                    k = 0
                m = min(b - a, len(t) - k)
                if has_ts:
                    t[k : k + m] = np.frombuffer(
                        payload, dtype="<f8", offset=(n * row_bytes) + 8 * a, count=m
                    )
                else:  # t0 + k*dt exactly as Frame.time() and every other read computes it
                    if len(ramp) < n:
                        ramp = np.arange(max(n, 2 * len(ramp)), dtype=np.float64)
                    np.multiply(ramp[a : a + m], dt, out=t[k : k + m])
                    t[k : k + m] += t0
                if frame is not None:
                    data[k : k + m] = frame[a : a + m]
                k += m
                a += m
                pos += m
                if k == len(t):
                    yield StreamData(si.name, t, data, list(si.channels), list(si.units), start=pos - k)
                    t = data = None
        if pos != stop or t is not None:
            raise StoreError(
                f"stream {si.name!r}: frame index is inconsistent (samples {pos} of {start}..{stop})"
            )

    def _range_rows(self, db, sid: str, si: StreamInfo, start: int, stop: int) -> Iterator[tuple]:
        """The non-empty frames overlapping samples [start, stop), in order."""
        if stop <= start:
            return iter(())
        first = db.execute(
            "SELECT MAX(s0) FROM frames WHERE session_id=? AND stream=? AND s0 <= ?", (sid, si.name, start)
        ).fetchone()[0]
        return self._rows(db, sid, si, "s0 >= ? AND s0 < ?", (first or 0, stop))

    def _rows(self, db, sid: str, si: StreamInfo, where: str, args: tuple) -> Iterator[tuple]:
        return db.execute(
            "SELECT s0, t0, dt, n, has_ts, payload FROM frames "
            f"WHERE session_id=? AND stream=? AND n > 0 AND {where} ORDER BY s0",
            (sid, si.name, *args),
        )

    def _window_pieces(
        self, db, sid, si: StreamInfo, t_start, t_stop, *, start=0, stop=None, times_only=False
    ) -> Iterator[tuple]:
        """(t, data, index) of the samples in a time window, for streams whose times go back:
        the frames overlapping the window (index-assisted filter), each masked sample by sample."""
        lo = -math.inf if t_start is None else float(t_start)
        hi = math.inf if t_stop is None else float(t_stop)
        stop = math.inf if stop is None else stop
        rows = self._rows(db, sid, si, "t_max >= ? AND t_min < ?", (lo, hi))
        for s0, t0, dt, n, has_ts, payload in rows:
            t, data = _decode(si, t0, dt, n, has_ts, payload, times_only=times_only)
            idx = s0 + np.arange(n, dtype=np.int64)
            keep = (t >= lo) & (t < hi) & (idx >= start) & (idx < stop)
            if keep.any():
                yield t[keep], (None if data is None else data[keep]), idx[keep]

    def events(
        self,
        session_id: str,
        kind: str | None = None,
        stream: str | None = None,
        *,
        t_start: float | None = None,
        t_stop: float | None = None,
    ) -> list[Event]:
        """Committed events of a session in arrival order, optionally of one kind / stream and
        with ``t_start <= t < t_stop``."""
        sid = self.get_session(session_id).id
        sql = "SELECT stream, kind, seq, t, body, replay FROM events WHERE session_id=?"
        args: list = [sid]
        if t_start is not None:
            sql += " AND t >= ?"
            args.append(float(t_start))
        if t_stop is not None:
            sql += " AND t < ?"
            args.append(float(t_stop))
        if kind is not None:
            sql += " AND kind=?"
            args.append(kind)
        if stream is not None:
            sql += " AND stream=?"
            args.append(stream)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY ord", args).fetchall()
        return [
            Event(stream=s, kind=k, seq=q, t=t, body=json.loads(b), session_id=sid, replay=bool(r))
            for s, k, q, t, b, r in rows
        ]

    def event_counts(self, session_id: str) -> dict[tuple[str, str], int]:
        """Number of events per (stream, kind)."""
        sid = self.get_session(session_id).id
        with self._lock:
            rows = self._db.execute(
                "SELECT stream, kind, COUNT(*) FROM events WHERE session_id=? "
                "GROUP BY stream, kind ORDER BY stream, kind",
                (sid,),
            ).fetchall()
        return {(s, k): n for s, k, n in rows}

    def messages(self, session_id: str, streams: list[str] | None = None) -> Iterator[Frame | Event]:
        """Every committed frame and event of a session in original order (streamed, for replay)."""
        info = self.get_session(session_id)
        layouts = {name: s for name, s in info.streams.items()}
        db = sqlite3.connect(self.path, timeout=10.0)
        try:
            fcur = db.execute(
                "SELECT ord, stream, seq, t0, dt, n, has_ts, replay, payload FROM frames "
                "WHERE session_id=? ORDER BY ord",
                (info.id,),
            )
            ecur = db.execute(
                "SELECT ord, stream, kind, seq, t, replay, body FROM events WHERE session_id=? ORDER BY ord",
                (info.id,),
            )
            frow, erow = fcur.fetchone(), ecur.fetchone()
            while frow is not None or erow is not None:
                if erow is None or (frow is not None and frow[0] < erow[0]):
                    msg: Frame | Event = self._frame_from_row(info.id, layouts, frow)
                    frow = fcur.fetchone()
                else:
                    _, stream, kind, seq, t, replay, body = erow
                    msg = Event(
                        stream=stream,
                        kind=kind,
                        seq=seq,
                        t=t,
                        body=json.loads(body),
                        session_id=info.id,
                        replay=bool(replay),
                    )
                    erow = ecur.fetchone()
                if streams is None or msg.stream in streams:
                    yield msg
        finally:
            db.close()

    @staticmethod
    def _frame_from_row(sid: str, layouts: dict[str, StreamInfo], row: tuple) -> Frame:
        _, stream, seq, t0, dt, n, has_ts, replay, payload = row
        si = layouts[stream]
        dtype = SUPPORTED_DTYPES[si.dtype]
        n_ch = len(si.channels)
        n_data = n * n_ch * dtype.itemsize
        data = np.frombuffer(payload, dtype=dtype, count=n * n_ch).reshape(n, n_ch)
        ts = np.frombuffer(payload, dtype="<f8", offset=n_data, count=n) if has_ts else None
        return Frame(
            stream=stream,
            seq=seq,
            t0=t0,
            dt=None if has_ts else dt,
            channels=list(si.channels),
            units=list(si.units),
            data=data,
            timestamps=ts,
            session_id=sid,
            replay=bool(replay),
        )

    # ------------------------------------------------------------------ life cycle

    def close(self) -> None:
        """Flush and close (sessions still running stay running: finish them first)."""
        try:
            self.flush()
        finally:
            with self._lock:
                self._db.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_SESSION_COLS = (
    "id, kind, status, reason, started, ended, config, software_version, devices, "
    "writer_host, writer_pid, heartbeat, stats"
)


def _decode(si: StreamInfo, t0, dt, n, has_ts, payload, times_only: bool = False) -> tuple:
    """(t, data) of one stored frame; ``data`` is a read-only view of the payload (None with times_only)."""
    dtype = SUPPORTED_DTYPES[si.dtype]
    n_ch = len(si.channels)
    n_data = n * n_ch * dtype.itemsize
    if has_ts:
        t = np.frombuffer(payload, dtype="<f8", offset=n_data, count=n)
    else:
        t = t0 + np.arange(n, dtype=np.float64) * dt
    if times_only:
        return t, None
    return t, np.frombuffer(payload, dtype=dtype, count=n * n_ch).reshape(n, n_ch)


def _join(si: StreamInfo, pieces: Iterable[tuple], contiguous: bool, first: int = 0) -> StreamData:
    """One StreamData (native byte order, writable) from (t, data[, index]) pieces."""
    pieces = list(pieces)
    dtype = SUPPORTED_DTYPES[si.dtype].newbyteorder("=")
    n_ch = len(si.channels)
    if pieces:
        t = np.concatenate([p[0] for p in pieces]).astype(np.float64, copy=False)
        data = np.concatenate([p[1] for p in pieces]).astype(dtype, copy=False)
    else:
        t, data = np.empty(0), np.empty((0, n_ch), dtype=dtype)
    index = None
    if not contiguous:
        index = np.concatenate([p[2] for p in pieces]) if pieces else np.empty(0, dtype=np.int64)
    return StreamData(si.name, t, data, list(si.channels), list(si.units), start=first, index=index)


def _rechunk(
    si: StreamInfo, pieces: Iterable[tuple], chunk: int, contiguous: bool, first: int = 0
) -> Iterator[StreamData]:
    """Cut a sequence of per-frame pieces into chunks of exactly ``chunk`` samples (last one shorter)."""
    buf: list[tuple] = []
    have = 0
    pos = first
    for piece in pieces:
        while len(piece[0]):
            take = min(chunk - have, len(piece[0]))
            buf.append(tuple(x[:take] for x in piece))
            piece = tuple(x[take:] for x in piece)
            have += take
            if have == chunk:
                yield _join(si, buf, contiguous, pos)
                pos += have
                buf, have = [], 0
    if have:
        yield _join(si, buf, contiguous, pos)


def _num(x: float) -> str:
    """Four significant digits without exponent noise (sample times at unix-time magnitude carry
    ~0.2 us of rounding, so more digits would only show that)."""
    return f"{float(f'{x:.4g}'):g}"


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


def _frame_span(t0: float, dt: float | None, n: int, ts: np.ndarray | None) -> tuple:
    """(t_min, t_max, non-decreasing inside) of a frame; (None, None, True) when it is empty."""
    if n == 0:
        return None, None, True
    if ts is not None:
        inside = bool(np.all(ts[1:] >= ts[:-1]))
        if inside:
            return float(ts[0]), float(ts[-1]), True
        return float(ts.min()), float(ts.max()), False
    return float(t0), float(t0 + (n - 1) * dt), True  # same arithmetic as the time axis of reads


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")
