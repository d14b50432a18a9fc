"""Session store: one embedded SQLite file (WAL mode), no server to run.

Layout (one row per *block* of samples, never one row per sample):

* ``sessions``  id, kind, status, times, config snapshot, software version, device identities,
  writer identity (host, pid) and a heartbeat;
* ``streams``   per session and stream: channels, units, dtype, sample period, counts;
* ``frames``    the raw little-endian payload of every frame plus its header fields;
* ``events``    events with their JSON body.

A global ordinal ``ord`` (per session) keeps frames and events in arrival order for replay.

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
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from daq.frames import SUPPORTED_DTYPES, Event, Frame, FrameError, frame_header, frame_payload
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
    payload BLOB NOT NULL
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
_STORE_FORMAT = "1"


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
        self._owned: set[str] = set()
        self._last_heartbeat = 0.0
        if recover:
            self.recover()

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
                    f"SELECT {_SESSION_COLS} FROM sessions ORDER BY started DESC LIMIT 1").fetchone()
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
            "SELECT stream, type, channels, units, dtype, dt, n_messages, n_samples, t_first, t_last "
            "FROM streams WHERE session_id=? ORDER BY stream",
            (sid,),
        ):
            name, typ, ch, un, dtype, dt, nm, ns, tf, tl = srow
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
            except FrameError as exc:
                raise StoreError(f"refusing frame of stream {msg.stream!r}: {exc}") from None
            self._check_layout(session_id, h)
            self._frames.append(
                (
                    session_id,
                    ordinal,
                    h["stream"],
                    h["seq"],
                    h["t0"],
                    h["dt"],
                    h["shape"][0],
                    int(h["timestamps"]),
                    int(msg.replay),
                    payload,
                )
            )
            self._buffered_bytes += len(payload)
            t_last = (
                (msg.t0 + (h["shape"][0] - 1) * h["dt"])
                if h["dt"]
                else (float(msg.timestamps[-1]) if h["shape"][0] else msg.t0)
            )
            t_first = float(msg.timestamps[0]) if h["timestamps"] and h["shape"][0] else msg.t0
            self._note_stream(session_id, h["stream"], h["shape"][0], t_first, t_last)
        elif isinstance(msg, Event):
            if (
                not isinstance(msg.stream, str)
                or not msg.stream
                or not isinstance(msg.kind, str)
                or not msg.kind
            ):
                raise StoreError("event needs a non-empty stream and kind")
            try:
                body = json.dumps(msg.body, allow_nan=True, default=_json_default)
            except (TypeError, ValueError) as exc:
                raise StoreError(f"event body is not JSON-serialisable: {exc}") from None
            self._check_layout(session_id, {"type": "event", "stream": msg.stream})
            self._events.append(
                (session_id, ordinal, msg.stream, msg.kind, int(msg.seq), float(msg.t), int(msg.replay), body)
            )
            self._note_stream(session_id, msg.stream, 0, msg.t, msg.t)
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
        if not (self._frames or self._events or self._pending_streams or heartbeat_due):
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
                        "INSERT INTO frames VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", self._frames
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
        self._buffered_bytes = 0
        self._oldest = None

    def heartbeat(self) -> None:
        """Commit pending data, or at least refresh the heartbeat of owned running sessions."""
        self.flush()

    # ------------------------------------------------------------------ reading

    def read_stream(self, session_id: str, stream: str) -> StreamData:
        """All committed samples of a frame stream, concatenated in arrival order."""
        info = self.get_session(session_id)
        if stream not in info.streams or info.streams[stream].type != "frame":
            names = [s for s, si in info.streams.items() if si.type == "frame"]
            raise StoreError(f"session {info.id} has no frame stream {stream!r} (frame streams: {names})")
        si = info.streams[stream]
        dtype = SUPPORTED_DTYPES[si.dtype]
        n_ch = len(si.channels)
        blocks, times = [], []
        with self._lock:
            rows = self._db.execute(
                "SELECT t0, dt, n, has_ts, payload FROM frames WHERE session_id=? AND stream=? ORDER BY ord",
                (info.id, stream),
            ).fetchall()
        for t0, dt, n, has_ts, payload in rows:
            n_data = n * n_ch * dtype.itemsize
            blocks.append(np.frombuffer(payload, dtype=dtype, count=n * n_ch).reshape(n, n_ch))
            if has_ts:
                times.append(np.frombuffer(payload, dtype="<f8", offset=n_data, count=n))
            else:
                times.append(t0 + np.arange(n, dtype=np.float64) * dt)
        data = np.concatenate(blocks) if blocks else np.empty((0, n_ch), dtype=dtype)
        t = np.concatenate(times) if times else np.empty(0)
        return StreamData(
            stream=stream,
            t=t,
            data=data.astype(dtype.newbyteorder("=")),
            channels=si.channels,
            units=si.units,
        )

    def events(self, session_id: str, kind: str | None = None, stream: str | None = None) -> list[Event]:
        """Committed events of a session in arrival order, optionally of one kind / stream."""
        sid = self.get_session(session_id).id
        sql = "SELECT stream, kind, seq, t, body, replay FROM events WHERE session_id=?"
        args: list = [sid]
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


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")
