"""What every export format shares: formats and sizes, the plan of one stream, the result, the
session's time base and metadata."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import daq.errors
from daq import json_codec
from daq.bus.frames import Event
from daq.store.records import SessionInfo, StreamData, StreamInfo

FORMATS = ("hdf5", "mat", "csv")
MAT_VERSIONS = ("auto", "5", "7.3")
_SUFFIX = {"hdf5": ".h5", "mat": ".mat", "csv": "_csv"}
#: Folder of exports when no output path is given (relative to the current directory; git-ignored).
DEFAULT_DIR = Path("exports")
#: Samples per chunk read from the store and written out (small chunks stay in the allocator's
#: reused memory; big ones cost page faults and cache misses for nothing).
CHUNK_SAMPLES = 1 << 16
#: CSV rows are built as Python strings (~70 bytes each per value): smaller chunks bound that.
CSV_CHUNK_SAMPLES = 1 << 13
#: Chunks read ahead by a background thread while the previous ones are written (MAT and CSV: SQLite and
#: file writes release the GIL, so reading and writing overlap). Not HDF5: h5py holds the GIL while it
#: writes, so a reading thread mostly waits for it - the export reads in its own thread instead, into
#: one reused chunk (loops over the 3-min bench session: 0.15-0.18 s CPU in one thread, 0.19-0.21 s with a
#: reading thread, and no shorter wall time on 2 busy cores).
READ_AHEAD = 2
#: Largest MAT v5 variable, bytes (MATLAB needs v7.3 for variables of 2 GB and more).
MAT_V5_MAX_BYTES = 2**31 - 1
#: Times after this are unix times (1973-03-03); earlier ones are relative to some start.
_UNIX_AFTER_S = 1e8
#: Streams whose rows get extra label columns from events: stream -> (event stream, kind, {column: body key}).
LABELLED_STREAMS = {"press.sensors": ("press.plan", "measurement", {"series": "series", "setpoint": "index"})}

Progress = Callable[[int, int], None]  # (samples written, samples in total)


class ExportError(daq.errors.StoreError):
    """An export could not be written (one clear message)."""


@dataclass
class StreamPlan:
    """One frame stream to export: its layout, sample count in the slice and label columns."""

    name: str
    info: StreamInfo
    n: int
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # column -> value per frame
    frame_starts: np.ndarray | None = None  # s0 of the labelled frames

    def label_columns(self, chunk: StreamData) -> dict[str, np.ndarray]:
        """Label columns (int64, one value per sample) of a chunk."""
        if not self.labels:
            return {}
        assert self.frame_starts is not None  # set with the labels
        frame = np.searchsorted(self.frame_starts, chunk.sample_index(), side="right") - 1
        return {col: values[frame] for col, values in self.labels.items()}


@dataclass
class ExportResult:
    path: Path
    format: str
    mat_version: str | None
    streams: dict[str, int]  # samples written per frame stream
    events: int
    time_base: str
    t_start: float | None
    t_stop: float | None
    seconds: float = 0.0
    bytes: int = 0

    def as_dict(self) -> dict:
        return {
            "path": str(self.path),
            "format": self.format,
            "mat_version": self.mat_version,
            "streams": self.streams,
            "events": self.events,
            "time_base": self.time_base,
            "t_start": self.t_start,
            "t_stop": self.t_stop,
            "seconds": round(self.seconds, 3),
            "bytes": self.bytes,
        }


def time_origin(info: SessionInfo) -> float | None:
    """Earliest sample or event time of a session (s, its own time base); None when empty."""
    firsts = [s.t_first for s in info.streams.values() if s.t_first is not None]
    return min(firsts) if firsts else None


def time_base(info: SessionInfo) -> str:
    """``"unix"`` when the session's times are unix times (live data), else ``"relative"``."""
    origin = time_origin(info)
    return "unix" if origin is not None and origin > _UNIX_AFTER_S else "relative"


def time_base_text(base: str) -> str:
    if base == "unix":
        return "unix time: seconds since 1970-01-01T00:00:00Z"
    return "relative time: seconds from an arbitrary origin (not a calendar time)"


#: ``session_header(..., started_by=NOT_LISTED)``: the view has no ``started_by`` field (the exports).
NOT_LISTED = object()


def session_header(info: SessionInfo, started_by: str | None | object = NOT_LISTED) -> dict:
    """The fields every view of a session starts with (``hil sessions``, ``hil show``, the exports'
    metadata, ``hil serve``'s API): id, kind, status, reason, started, ended; then ``started_by`` (who asked
    for the run, None when nobody was recorded) unless it is :data:`NOT_LISTED` - the exports leave it out,
    so that their bytes stay those of sessions exported before the field existed."""
    head: dict[str, Any] = {"id": info.id, "kind": info.kind, "status": info.status, "reason": info.reason,
            "started": info.started, "ended": info.ended}
    if started_by is not NOT_LISTED:
        head["started_by"] = started_by
    return head


def session_metadata(info: SessionInfo, started_by: str | None | object = NOT_LISTED) -> dict:
    """JSON-friendly summary of a session (no sample data); ``started_by`` as :func:`session_header`."""
    return {
        **session_header(info, started_by),
        "software_version": info.software_version,
        "time_base": time_base(info),
        "time_origin": time_origin(info),
        "config": info.config,
        "devices": info.devices,
        "streams": {
            name: {
                "type": s.type,
                "channels": s.channels,
                "units": s.units,
                "dtype": s.dtype,
                "dt": s.dt,
                "rate_hz": s.rate,
                "n_messages": s.n_messages,
                "n_samples": s.n_samples,
                "t_first": s.t_first,
                "t_last": s.t_last,
                **(
                    {
                        "spacing_s": s.timing.spacing_s,
                        "sample_rate_hz": s.timing.rate_hz,
                        "samples_per_frame": s.timing.samples_per_frame,
                        "frame_period_s": s.timing.frame_period_s,
                        "bursty": s.timing.bursty,
                    }
                    if s.timing is not None
                    else {}
                ),
            }
            for name, s in info.streams.items()
        },
        "stats": info.stats,
    }


def strict_json(obj, **options) -> str:
    """``obj`` as standard JSON that strict parsers accept: non-finite floats (NaN, inf, which event
    bodies and device info may hold) become null, numpy scalars and arrays plain values; ``options``:
    ``indent``, ``default`` (``default=str`` for what is still not JSON)."""
    return json_codec.dumps_strict(obj, **options)


def events_by_stream(events: list[Event]) -> dict[str, list[Event]]:
    """Events grouped by stream, each group in arrival order (the groups in order of first arrival)."""
    out: dict[str, list[Event]] = {}
    for ev in events:
        out.setdefault(ev.stream, []).append(ev)
    return out


def check_count(plan: StreamPlan, written: int) -> None:
    if written != plan.n:
        raise ExportError(
            f"stream {plan.name!r} changed during the export ({written} samples written, {plan.n} expected); "
            "export a finished session"
        )
