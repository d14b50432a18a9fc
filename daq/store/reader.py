"""The reading side of a session store: sessions and their streams, sample ranges, time windows and
chunks of frame streams, events, and every message in arrival order (for replay).

A reader sees what writers have committed (through the same :class:`StoreFile`: at once; from
another handle or process: at their next commit). Code that only reads (``hil sessions``, ``show``,
export, analysis, replay) needs nothing else: :class:`SessionReader` never buffers nor writes data.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import Self

import numpy as np

from daq import json_codec
from daq.bus.frames import SUPPORTED_DTYPES, Event, Frame
from daq.store import ranges
from daq.store.errors import StoreError, UnknownSession
from daq.store.payload import frame_from_row
from daq.store.records import SessionInfo, StreamData, StreamInfo, StreamTiming
from daq.store.schema import SESSION_COLS
from daq.store.store_file import StoreFile

#: Default number of samples per chunk of :meth:`SessionReader.iter_stream`.
CHUNK_SAMPLES = 1 << 15


#: Session key that selects the newest session.
LATEST = "latest"


class SessionReader:
    """Read sessions from the store at ``source`` (a path, or a :class:`StoreFile` shared with a
    writer). ``create``: create an empty store when there is none; ``recover``: mark sessions whose
    writer is gone as ``incomplete`` on open."""

    def __init__(self, source: str | os.PathLike | StoreFile, *, create: bool = False, recover: bool = True):
        self._file = StoreFile.of(source, create=create, recover=recover)
        self.path = self._file.path
        self._db = self._file.db
        self._lock = self._file.lock

    # ------------------------------------------------------------------ sessions

    def list_sessions(self) -> list[SessionInfo]:
        """All sessions, oldest first."""
        with self._lock:
            rows = self._db.execute(f"SELECT {SESSION_COLS} FROM sessions ORDER BY started, id").fetchall()
            return [self._session_from_row(r) for r in rows]

    def get_session(self, session_id_or_unique_prefix: str) -> SessionInfo:
        """The session with this id, the only one whose id starts with the given prefix, or the newest
        one for ``"latest"``."""
        key = str(session_id_or_unique_prefix)
        with self._lock:
            row = self._db.execute(f"SELECT {SESSION_COLS} FROM sessions WHERE id=?", (key,)).fetchone()
            if row is None and key == LATEST:
                row = self._db.execute(
                    f"SELECT {SESSION_COLS} FROM sessions ORDER BY started DESC LIMIT 1"
                ).fetchone()
            if row is None and key:
                like = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                rows = self._db.execute(
                    f"SELECT {SESSION_COLS} FROM sessions WHERE id LIKE ? ESCAPE '\\' LIMIT 3", (like,)
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
                json_codec.loads(ch or "null") or [],
                json_codec.loads(un or "null") or [],
                dtype,
                dt,
                nm,
                ns,
                tf,
                tl,
                bool(mono),
            )
        if status == "running" and sid in self._file.unmarked:  # abandoned, but the store could not say so
            status, reason = "incomplete", self._file.unmarked[sid]
        return SessionInfo(
            id=sid,
            kind=kind,
            status=status,
            reason=reason,
            started=started,
            ended=ended,
            config=json_codec.loads(config),
            software_version=version,
            devices=json_codec.loads(devices),
            streams=streams,
            writer_host=host,
            writer_pid=pid,
            heartbeat=hb,
            stats=json_codec.loads(stats) if stats else None,
        )

    # ------------------------------------------------------------------ frame streams

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
            start, stop = ranges.clip_range(self._db, sid, stream, start, stop)
            return ranges.read_range(self._db, sid, si, start, stop)

    def read_window(
        self, session_id: str, stream: str, t_start: float | None = None, t_stop: float | None = None
    ) -> StreamData:
        """Samples with ``t_start <= t < t_stop`` (s, the stream's own time base) in arrival order."""
        sid, si = self._frame_stream(session_id, stream)
        with self._lock:
            if si.monotonic:
                start, stop = ranges.window_range(self._db, sid, si, t_start, t_stop)
                return ranges.read_range(self._db, sid, si, start, stop)
            pieces = list(ranges.window_pieces(self._db, sid, si, t_start, t_stop))
        return ranges.join(si, pieces, contiguous=False)

    def window_range(
        self, session_id: str, stream: str, t_start: float | None = None, t_stop: float | None = None
    ) -> tuple[int, int] | None:
        """The sample range ``[start, stop)`` of a time window of a monotonic stream (index seeks
        only), or None for a stream whose times go back (its windows are not ranges)."""
        sid, si = self._frame_stream(session_id, stream)
        if not si.monotonic:
            return None
        with self._lock:
            return ranges.window_range(self._db, sid, si, t_start, t_stop)

    def count_samples(
        self, session_id: str, stream: str, t_start: float | None = None, t_stop: float | None = None
    ) -> int:
        """Number of samples in a time window (cheap for monotonic streams, a time-only pass otherwise)."""
        rng = self.window_range(session_id, stream, t_start, t_stop)
        if rng is not None:
            return rng[1] - rng[0]
        sid, si = self._frame_stream(session_id, stream)
        with self._lock:
            pieces = ranges.window_pieces(self._db, sid, si, t_start, t_stop, times_only=True)
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
        reuse: bool = False,
    ) -> Generator[StreamData, None, None]:
        """A frame stream (or a sample range / time window of it) in chunks of ``chunk_samples``
        samples (the last one shorter), each a :class:`StreamData` with its position in the stream.

        Memory stays bounded by the chunk and one frame. The iterator reads one consistent snapshot
        on its own connection, so the store stays usable while it is suspended. ``reuse``: the
        chunks of a monotonic stream share two arrays, each chunk valid only until the next one is
        taken (for a consumer that writes every chunk out at once, like the HDF5 export).
        """
        if not (isinstance(chunk_samples, int) and chunk_samples > 0):
            raise StoreError(f"chunk_samples must be a positive integer, got {chunk_samples!r}")
        sid, si = self._frame_stream(session_id, stream)
        db = self._file.second_connection()
        try:
            db.execute("BEGIN")  # one read snapshot for the bounds and the rows
            lo, hi = ranges.clip_range(db, sid, stream, start or 0, stop)
            if t_start is not None or t_stop is not None:
                if si.monotonic:
                    w0, w1 = ranges.window_range(db, sid, si, t_start, t_stop)
                    lo, hi = max(lo, w0), max(max(lo, w0), min(hi, w1))
                else:
                    pieces = ranges.window_pieces(db, sid, si, t_start, t_stop, start=lo, stop=hi)
                    yield from ranges.rechunk(si, pieces, chunk_samples, contiguous=False)
                    return
            yield from ranges.range_chunks(db, sid, si, lo, hi, chunk_samples, reuse)
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
        assert si.dtype is not None  # a frame stream
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

    # ------------------------------------------------------------------ events and messages

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
            Event(stream=s, kind=k, seq=q, t=t, body=json_codec.loads(b), session_id=sid, replay=bool(r))
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
        db = self._file.second_connection()
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
                    msg: Frame | Event = frame_from_row(info.id, layouts, frow)
                    frow = fcur.fetchone()
                else:
                    _, stream, kind, seq, t, replay, body = erow
                    msg = Event(
                        stream=stream,
                        kind=kind,
                        seq=seq,
                        t=t,
                        body=json_codec.loads(body),
                        session_id=info.id,
                        replay=bool(replay),
                    )
                    erow = ecur.fetchone()
                if streams is None or msg.stream in streams:
                    yield msg
        finally:
            db.close()

    # ------------------------------------------------------------------ life cycle

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
