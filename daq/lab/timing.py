"""The real sample spacing of a lab stream from its frame table, computed as the local store computes it
(:meth:`daq.store.reader.SessionReader.stream_timing`) so ``hil show`` says the same of both."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from daq.store.records import StreamInfo, StreamTiming


def stream_timing(si: StreamInfo, frames: dict[str, np.ndarray],
                  times: Callable[[int, int], np.ndarray], max_frames: int = 32) -> StreamTiming:
    """``frames``: the stream's frame table (columns); ``times(lo, hi)``: its time axis of samples
    [lo, hi)."""
    order = np.argsort(frames["s0"], kind="stable")
    rows = [k for k in order if frames["n"][k] > 0][:max_frames]
    if rows:
        last = rows[-1]
        t_all = times(0, int(frames["s0"][last] + frames["n"][last]))
    diffs, sizes, starts = [], [], []
    for k in rows:
        n, s0 = int(frames["n"][k]), int(frames["s0"][k])
        sizes.append(n)
        starts.append(float(frames["t_min"][k]))
        if frames["has_ts"][k]:
            diffs.append(np.diff(t_all[s0:s0 + n]))
        elif n > 1:
            diffs.append(np.full(n - 1, float(frames["dt"][k])))
    d = np.concatenate(diffs) if diffs else np.empty(0)
    d = d[d > 0]
    spacing = float(np.median(d)) if d.size else (si.dt or None)
    period = float(np.median(np.diff(starts))) if len(starts) > 1 else None
    return StreamTiming(spacing_s=spacing, samples_per_frame=int(np.median(sizes)) if sizes else 0,
                        frame_period_s=period, mean_rate_hz=si.rate, frames_sampled=len(rows))
