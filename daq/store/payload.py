"""How a stored frame row is laid out: the time span of a frame, and its samples decoded back.

A row's payload is the frame's data (n x channels, little-endian) followed, for frames with explicit
timestamps, by their n float64 sample times; other frames have ``t0 + k * dt``.
"""

from __future__ import annotations

import numpy as np

from daq.bus.frames import SUPPORTED_DTYPES, Frame
from daq.store.records import StreamInfo


def frame_span(t0: float, dt: float | None, n: int, ts: np.ndarray | None) -> tuple:
    """(t_min, t_max, non-decreasing inside) of a frame; (None, None, True) when it is empty."""
    if n == 0:
        return None, None, True
    if ts is not None:
        inside = bool(np.all(ts[1:] >= ts[:-1]))
        if inside:
            return float(ts[0]), float(ts[-1]), True
        return float(ts.min()), float(ts.max()), False
    assert dt is not None  # a frame without timestamps has a dt
    return float(t0), float(t0 + (n - 1) * dt), True  # same arithmetic as the time axis of reads


def decode(si: StreamInfo, t0, dt, n, has_ts, payload, times_only: bool = False) -> tuple:
    """(t, data) of one stored frame; ``data`` is a read-only view of the payload (None with times_only)."""
    assert si.dtype is not None  # a frame stream
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


def frame_from_row(sid: str, layouts: dict[str, StreamInfo], row: tuple) -> Frame:
    """The frame of a row (ord, stream, seq, t0, dt, n, has_ts, replay, payload) of session ``sid``."""
    _, stream, seq, t0, dt, n, has_ts, replay, payload = row
    si = layouts[stream]
    assert si.dtype is not None  # a frame stream
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
