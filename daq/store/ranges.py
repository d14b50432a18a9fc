"""Sample ranges and time windows of a frame stream, read through the frame index (see
:mod:`daq.store.schema`): each function takes the connection to read from, so a caller either holds
the store's lock or owns the connection (a snapshot of its own)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np

from daq.bus.frames import SUPPORTED_DTYPES
from daq.store.errors import StoreError
from daq.store.payload import decode
from daq.store.records import StreamData, StreamInfo


def clip_range(db, sid: str, stream: str, start: int | None, stop: int | None) -> tuple[int, int]:
    """``[start, stop)`` clipped to the committed samples of a stream (None: its start / end)."""
    row = db.execute(
        "SELECT s0 + n FROM frames WHERE session_id=? AND stream=? AND n > 0 ORDER BY s0 DESC LIMIT 1",
        (sid, stream),
    ).fetchone()
    total = row[0] if row else 0
    lo = 0 if start is None else max(0, min(int(start), total))
    hi = total if stop is None else max(lo, min(int(stop), total))
    return lo, hi


def window_range(db, sid: str, si: StreamInfo, t_start, t_stop) -> tuple[int, int]:
    """Sample range of ``t_start <= t < t_stop`` in a monotonic stream: two index seeks plus the
    time axes of the two boundary frames."""
    lo = 0
    if t_start is not None:
        row = last_frame_before(db, sid, si, t_start)
        if row is not None:
            s0, t = row
            lo = s0 + int(np.searchsorted(t, t_start, side="left"))
    if t_stop is None:
        return lo, clip_range(db, sid, si.name, 0, None)[1]
    row = last_frame_before(db, sid, si, t_stop)
    if row is None:
        return lo, lo
    s0, t = row
    return lo, max(lo, s0 + int(np.searchsorted(t, t_stop, side="left")))


def last_frame_before(db, sid: str, si: StreamInfo, t: float) -> tuple[int, np.ndarray] | None:
    """(s0, time axis) of the last non-empty frame whose first sample is earlier than ``t``."""
    assert si.dtype is not None  # a frame stream
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


def read_range(db, sid: str, si: StreamInfo, start: int, stop: int) -> StreamData:
    """Samples [start, stop) in one array (the single chunk of :func:`range_chunks`)."""
    for chunk in range_chunks(db, sid, si, start, stop, max(1, stop - start)):
        return chunk
    return join(si, [], contiguous=True, first=start)


def range_chunks(
    db, sid: str, si: StreamInfo, start: int, stop: int, chunk: int, reuse: bool = False
) -> Iterator[StreamData]:
    """Samples [start, stop) in chunks of ``chunk`` samples: each chunk is one preallocated array
    that frames are copied into (one copy of the data, little per-frame work).

    ``reuse``: every chunk is copied into the same two arrays (the last one into their first rows),
    so a chunk is valid only until the next one is asked for - for a consumer that writes each
    chunk out before it takes the next: the arrays stay in the CPU cache instead of a fresh
    allocation per chunk whose first touch misses it."""
    assert si.dtype is not None  # a frame stream
    dtype = SUPPORTED_DTYPES[si.dtype]
    native = dtype.newbyteorder("=")
    n_ch = len(si.channels)
    row_bytes = n_ch * dtype.itemsize
    ramp = np.arange(0, dtype=np.float64)
    pos = start
    t = data = None
    k = 0
    t_buf = np.empty(min(chunk, stop - start) if reuse else 0, dtype=np.float64)
    data_buf = np.empty((len(t_buf), n_ch), dtype=native)
    for s0, t0, dt, n, has_ts, payload in range_rows(db, sid, si, start, stop):
        a = max(0, pos - s0)
        b = min(n, stop - s0)
        frame = np.frombuffer(payload, dtype=dtype, count=n * n_ch).reshape(n, n_ch) if n_ch else None
        while a < b:
            if t is None:
                size = min(chunk, stop - pos)
                if reuse:
                    t, data = t_buf[:size], data_buf[:size]
                else:
                    t = np.empty(size, dtype=np.float64)
                    data = np.empty((size, n_ch), dtype=native)
                k = 0
            assert data is not None  # allocated with t
            m = min(b - a, len(t) - k)
            if has_ts:
                t[k : k + m] = np.frombuffer(payload, dtype="<f8", offset=(n * row_bytes) + 8 * a, count=m)
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


def range_rows(db, sid: str, si: StreamInfo, start: int, stop: int) -> Iterator[tuple]:
    """The non-empty frames overlapping samples [start, stop), in order."""
    if stop <= start:
        return iter(())
    first = db.execute(
        "SELECT MAX(s0) FROM frames WHERE session_id=? AND stream=? AND s0 <= ?", (sid, si.name, start)
    ).fetchone()[0]
    return _rows(db, sid, si, "s0 >= ? AND s0 < ?", (first or 0, stop))


def _rows(db, sid: str, si: StreamInfo, where: str, args: tuple) -> Iterator[tuple]:
    return db.execute(
        "SELECT s0, t0, dt, n, has_ts, payload FROM frames "
        f"WHERE session_id=? AND stream=? AND n > 0 AND {where} ORDER BY s0",
        (sid, si.name, *args),
    )


def window_pieces(
    db, sid, si: StreamInfo, t_start, t_stop, *, start=0, stop=None, times_only=False
) -> Iterator[tuple]:
    """(t, data, index) of the samples in a time window, for streams whose times go back:
    the frames overlapping the window (index-assisted filter), each masked sample by sample."""
    lo = -math.inf if t_start is None else float(t_start)
    hi = math.inf if t_stop is None else float(t_stop)
    stop = math.inf if stop is None else stop
    rows = _rows(db, sid, si, "t_max >= ? AND t_min < ?", (lo, hi))
    for s0, t0, dt, n, has_ts, payload in rows:
        t, data = decode(si, t0, dt, n, has_ts, payload, times_only=times_only)
        idx = s0 + np.arange(n, dtype=np.int64)
        keep = (t >= lo) & (t < hi) & (idx >= start) & (idx < stop)
        if keep.any():
            yield t[keep], (None if data is None else data[keep]), idx[keep]


def join(si: StreamInfo, pieces: Iterable[tuple], contiguous: bool, first: int = 0) -> StreamData:
    """One StreamData (native byte order, writable) from (t, data[, index]) pieces."""
    pieces = list(pieces)
    assert si.dtype is not None  # a frame stream
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


def rechunk(
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
                yield join(si, buf, contiguous, pos)
                pos += have
                buf, have = [], 0
    if have:
        yield join(si, buf, contiguous, pos)
